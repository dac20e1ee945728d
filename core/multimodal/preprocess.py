"""An RGB image to the pixel tensor a vision encoder reads, as mtmd (tools/mtmd/mtmd-image.cpp).

Fixed-size families (gemma3, LLaVA 1.5 `mlp`): the image is scaled to fit the encoder's square
(aspect ratio kept, sizes rounded up: PAD_CEIL), drawn centred on a square of the pad colour,
then every channel is mapped to (v / 255 - mean) / std in float32. Dynamic-size families
(Qwen2.5-VL: mtmd_image_preprocessor_dyn_size) first pick the canvas: the image's size rounded
to multiples of the merged patch side and kept within a pixel budget (`smart_size`), then the
same fit-and-centre onto that canvas.

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
    dynamic: tuple[int, int, int] | None = None  # (align, min_pixels, max_pixels): canvas by smart_size


def smart_size(width: int, height: int, align: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """The canvas (w, h) for an image of width x height (mtmd-image.cpp's
    calc_size_preserved_ratio, transformers' smart_resize): each side rounded to a multiple of
    `align` (at least align); above max_pixels both sides shrink by sqrt(area / max) and round
    down, below min_pixels they grow by sqrt(min / area) and round up. float32 as the C++
    (std::round: halves away from zero)."""
    f32 = np.float32
    fa = f32(align)

    def by(x: np.float32, how: str) -> int:
        q = f32(x / fa)
        n = math.floor(q + 0.5) if how == "round" else math.floor(q) if how == "floor" else math.ceil(q)
        return int(n) * align

    w, h = f32(width), f32(height)
    w_bar, h_bar = max(align, by(w, "round")), max(align, by(h, "round"))
    if max_pixels > 0 and h_bar * w_bar > max_pixels:
        beta = f32(np.sqrt(f32(f32(h * w) / f32(max_pixels))))
        h_bar, w_bar = max(align, by(f32(h / beta), "floor")), max(align, by(f32(w / beta), "floor"))
    elif min_pixels > 0 and h_bar * w_bar < min_pixels:
        beta = f32(np.sqrt(f32(f32(min_pixels) / f32(h * w))))
        h_bar, w_bar = by(f32(h * beta), "ceil"), by(f32(w * beta), "ceil")
    return w_bar, h_bar


def fit_size(width: int, height: int, side: int, side_h: int | None = None) -> tuple[int, int]:
    """(w, h) of the image scaled to fit a side x side_h canvas (side_h None: a square) (mtmd's
    PAD_CEIL: the scale in float32, sizes rounded up, never beyond the canvas)."""
    sh = side if side_h is None else side_h
    scale = min(np.float32(side) / np.float32(width), np.float32(sh) / np.float32(height))
    return (min(int(math.ceil(np.float32(width) * scale)), side), min(int(math.ceil(np.float32(height) * scale)), sh))


def canvas_size(width: int, height: int, prep: ImagePrep) -> tuple[int, int]:
    """The (w, h) the encoder reads for an image of width x height: the family's square, or the
    dynamic families' smart_size."""
    if prep.dynamic is None:
        return prep.image_size, prep.image_size
    return smart_size(width, height, *prep.dynamic)


def letterbox(rgb: np.ndarray, prep: ImagePrep) -> np.ndarray:
    """rgb (h, w, 3) uint8 scaled into the family's canvas, centred on the pad colour."""
    h, w = rgb.shape[:2]
    cw, ch = canvas_size(w, h, prep)
    if (w, h) == (cw, ch):
        return rgb
    nw, nh = fit_size(w, h, cw, ch)
    out = np.empty((ch, cw, 3), dtype=np.uint8)
    out[...] = np.asarray(prep.pad_color, dtype=np.uint8)
    x0, y0 = (cw - nw) // 2, (ch - nh) // 2
    out[y0 : y0 + nh, x0 : x0 + nw] = resize(rgb, nw, nh, prep.algo)
    return out


def normalize(rgb: np.ndarray, prep: ImagePrep) -> np.ndarray:
    """(h, w, 3) uint8 -> planar (3, h, w) float32, (v / 255 - mean) / std in float32 as
    clip_image_f32::from_u8 and normalize."""
    x = rgb.astype(np.float32) / np.float32(255.0)
    x = (x - np.asarray(prep.mean, dtype=np.float32)) / np.asarray(prep.std, dtype=np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1))


def preprocess(rgb: np.ndarray, prep: ImagePrep) -> np.ndarray:
    """The encoder's input (3, H, W) float32 for an RGB image (h, w, 3) uint8 (H = W = the
    family's side for fixed-size families)."""
    return normalize(letterbox(rgb, prep), prep)
