"""An image cut into encoder-sized tiles plus a downscaled overview, as mtmd's idefics3 (SmolVLM)
preprocessor (tools/mtmd/mtmd-image.cpp, `mtmd_image_preprocessor_idefics3`), in RGB uint8.

With `clip.vision.preproc_image_size` (the processor's longest edge L, written by current
converters): the image is resized, aspect kept, so that its longer side is L (the shorter one
truncated, then rounded up to even), resized again (stretched) up to whole tiles of side S,
cut into tiles row by row; the overview is that refined image resized to S x S. Every resize is
Lanczos. Without the key (older files): each side rounded to the nearest multiple of S (at least
S), the image drawn centred into that size (bicubic, aspect kept, black borders) and cut; the
overview is the original image stretched to S x S (bicubic).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llamacli.core.errors import InvalidRequest
from llamacli.core.multimodal.preprocess import fit_size
from llamacli.core.multimodal.resample import resize

LANCZOS = "lanczos"
BICUBIC = "bicubic"


@dataclass(frozen=True)
class Slices:
    """grid_x x grid_y tiles (S, S, 3) uint8, row by row, and the overview (S, S, 3)."""

    grid_x: int
    grid_y: int
    tiles: list[np.ndarray]
    overview: np.ndarray


def longest_edge_size(width: int, height: int, longest: int) -> tuple[int, int]:
    """(w, h) with the longer side `longest`, the other truncated from the float64 ratio and
    rounded up to even (transformers' idefics3 processor, as mtmd); InvalidRequest when that
    leaves 0 pixels."""
    ratio = width / height
    if width >= height:
        h = int(longest / ratio)
        w, h = longest, h + h % 2
    else:
        w = int(longest * ratio)
        w, h = w + w % 2, longest
    if w == 0 or h == 0:  # an image more than `longest` times wider than high (mtmd's resize throws)
        raise InvalidRequest(f"image {width}x{height} cannot be sliced: resize target {w}x{h} is out of range")
    return w, h


def _round_to(x: int, f: int) -> int:
    """max(f, x rounded to the nearest multiple of f), in float32 as mtmd's round_by_factor."""
    return max(f, int(math.floor(float(np.float32(x) / np.float32(f)) + 0.5)) * f)


def refined_size(width: int, height: int, side: int, longest: int) -> tuple[int, int]:
    """(w, h) of the image cut into tiles: whole tiles of side x side."""
    if longest > 0:
        rw, rh = longest_edge_size(width, height, longest)
        return -(-rw // side) * side, -(-rh // side) * side
    return _round_to(width, side), _round_to(height, side)


def slice_grid(width: int, height: int, side: int, longest: int) -> tuple[int, int]:
    """(grid_x, grid_y): the tiles per row and per column of a width x height image."""
    rw, rh = refined_size(width, height, side, longest)
    return rw // side, rh // side


def _cut(img: np.ndarray, side: int) -> tuple[int, int, list[np.ndarray]]:
    gy, gx = img.shape[0] // side, img.shape[1] // side
    tiles = [img[y * side : (y + 1) * side, x * side : (x + 1) * side] for y in range(gy) for x in range(gx)]
    return gx, gy, tiles


def slice_image(rgb: np.ndarray, side: int, longest: int) -> Slices:
    """rgb (h, w, 3) uint8 as tiles of side x side and the overview; `longest`: the file's
    preproc_image_size (0: the older files' layout)."""
    h, w = rgb.shape[:2]
    tw, th = refined_size(w, h, side, longest)
    if longest > 0:
        refined = resize(resize(rgb, *longest_edge_size(w, h, longest), LANCZOS), tw, th, LANCZOS)
        gx, gy, tiles = _cut(refined, side)
        return Slices(gx, gy, tiles, resize(refined, side, side, LANCZOS))
    nw, nh = fit_size(w, h, tw, th)
    refined = np.zeros((th, tw, 3), dtype=np.uint8)
    x0, y0 = (tw - nw) // 2, (th - nh) // 2
    refined[y0 : y0 + nh, x0 : x0 + nw] = resize(rgb, nw, nh, BICUBIC)
    gx, gy, tiles = _cut(refined, side)
    return Slices(gx, gy, tiles, resize(rgb, side, side, BICUBIC))
