"""M-RoPE positions of a sequence with images (mtmd's MTMD_POS_TYPE_MROPE, for Qwen2-VL and
Qwen2.5-VL text models): the rope position (t, h, w, e) of each KV cell.

The cells run one per token, text and image alike (the cache and the causal mask use them:
llama.cpp's 2-D mask inside an image is the raster order of its tokens, which is the cells'
order). The rope positions differ: an image of nx x ny merge units placed when the sequence's
rope position is n_past has tokens i = 0 .. nx ny - 1 at t = n_past, h = n_past + i // nx,
w = n_past + i % nx, e = 0 (mtmd_image_tokens_get_decoder_pos), and the text after it goes on
from n_past + max(nx, ny) (mtmd_image_tokens_get_n_pos), so every later cell's rope position
runs nx ny - max(nx, ny) behind its cell. A medium without a grid (audio) counts one position
per token, as text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # prompt.py runs these positions for its chunks
    from llamacli.core.multimodal.prompt import MediaSpan


def mrope_positions(cells: np.ndarray, spans: Sequence["MediaSpan"]) -> np.ndarray:
    """(T, 4) int64 rope positions of the cells (T,) of a sequence whose prompt holds `spans`
    (their start and end are cells)."""
    cells = np.asarray(cells, dtype=np.int64)
    pos4 = np.repeat(cells[:, None], 4, axis=1)
    behind = 0  # how far the rope position runs behind the cell after the spans so far
    text = np.ones(cells.shape[0], dtype=bool)
    for sp in sorted(spans, key=lambda s: s.start):
        if sp.grid is None:
            continue
        nx, ny = sp.grid
        inside = (cells >= sp.start) & (cells < sp.end)
        i = cells[inside] - sp.start
        t0 = sp.start - behind
        pos4[inside] = np.stack([np.full_like(i, t0), t0 + i // nx, t0 + i % nx, np.zeros_like(i)], axis=1)
        text &= ~inside
        after = text & (cells >= sp.end)
        pos4[after] -= (sp.end - sp.start) - max(nx, ny)
        behind += (sp.end - sp.start) - max(nx, ny)
    return pos4
