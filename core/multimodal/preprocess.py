"""An RGB image to the pixel tensor a vision encoder reads, as mtmd (tools/mtmd/mtmd-image.cpp).

Fixed-size families (gemma3, LLaVA 1.5 `mlp`): the image is scaled to fit the encoder's square
(aspect ratio kept, sizes rounded up: PAD_CEIL), drawn centred on a square of the pad colour,
then every channel is mapped to (v / 255 - mean) / std in float32.

The resampling is mtmd's port of Pillow's filters, bit for bit (resample.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llamacli.core.multimodal.resample import resize

BILINEAR = "bilinear"
BICUBIC = "bicubic"


@dataclass(frozen=True)
class ImagePrep:
    """How a family prepares an image: the square side, the resampling filter, the pad colour
    and the normalisation (per channel); slicing families (idefics3) also the longest edge."""

    image_size: int
    algo: str
    pad_color: tuple[int, int, int]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    longest_edge: int = 0  # idefics3: clip.vision.preproc_image_size (0: absent)


def fit_size(width: int, height: int, side: int, side_h: int | None = None) -> tuple[int, int]:
    """(w, h) of the image scaled to fit a side x side square, or side x side_h (mtmd's
    PAD_CEIL: the scale in float32, sizes rounded up, never beyond the target)."""
    th = side if side_h is None else side_h
    scale = min(np.float32(side) / np.float32(width), np.float32(th) / np.float32(height))
    return (min(int(math.ceil(np.float32(width) * scale)), side), min(int(math.ceil(np.float32(height) * scale)), th))


def letterbox(rgb: np.ndarray, prep: ImagePrep) -> np.ndarray:
    """rgb (h, w, 3) uint8 scaled into the family's square, centred on the pad colour."""
    side = prep.image_size
    h, w = rgb.shape[:2]
    if (w, h) == (side, side):
        return rgb
    nw, nh = fit_size(w, h, side)
    out = np.empty((side, side, 3), dtype=np.uint8)
    out[...] = np.asarray(prep.pad_color, dtype=np.uint8)
    x0, y0 = (side - nw) // 2, (side - nh) // 2
    out[y0 : y0 + nh, x0 : x0 + nw] = resize(rgb, nw, nh, prep.algo)
    return out


def normalize(rgb: np.ndarray, prep: ImagePrep) -> np.ndarray:
    """(h, w, 3) uint8 -> planar (3, h, w) float32, (v / 255 - mean) / std in float32 as
    clip_image_f32::from_u8 and normalize."""
    x = rgb.astype(np.float32) / np.float32(255.0)
    x = (x - np.asarray(prep.mean, dtype=np.float32)) / np.asarray(prep.std, dtype=np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1))


def preprocess(rgb: np.ndarray, prep: ImagePrep) -> np.ndarray:
    """The encoder's input (3, side, side) float32 for an RGB image (h, w, 3) uint8."""
    return normalize(letterbox(rgb, prep), prep)
