"""IQ3_XXS and IQ3_S: ggml's `quantize_row_iq3_xxs_impl` (grid 256) and
`quantize_row_iq3_s_impl` (grid 512, blocks of 32), compiled and bit-exact (see weighted.py).

Super-blocks of 256 values, blocks of 32, groups of 4 values whose magnitudes are a point of a
grid of levels 2l + 1, l in [0, 8) (iqgrid.py). Layouts:
  IQ3_XXS (98 bytes):  d | grid indices[64] | 8 x u32 (4 x 7 sign bits << 7k, scale << 28)
  IQ3_S   (110 bytes): d | grid index low bytes[64] | qh[8] (bit 8 of each) | signs[32] |
                       scales[4] (nibbles)
Both work without importance weights (weight x^2).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .iq2 import block_scratch
from .iqsearch import block_weights, cmax, fold_signs, grid_index, scale_nibble, search_scale
from .weighted import QK_K, _put_f16, _row_sigma2

_KMAX = 8
_FIFTH = np.float32(0.2)
_EPS_IQ3_XXS = np.float32(1e-8)


@njit(cache=True, nogil=True)
def row_iq3(x, qw, has_w, out, grid, kmap, nbrs, is_s):  # type: ignore[no-untyped-def]
    """One row x into out: quantize_row_iq3_xxs_impl(256, ...) (is_s False) or
    quantize_row_iq3_s_impl(32, ...) (is_s True)."""
    weight, waux, xval, L, Laux, _, _ = block_scratch(32)
    on = np.zeros(8, np.bool_)
    on_aux = np.zeros(8, np.bool_)
    scales = np.zeros(QK_K // 32, np.float32)
    signs = np.zeros(4, np.int64)
    sas = np.zeros(8, np.int64)  # IQ3_XXS: scales_and_signs (u32)
    size = 110 if is_s else 98
    for ibl in range(x.shape[0] // QK_K):
        o = size * ibl
        out[o : o + size] = 0
        sas[:] = 0
        qs = o + 2  # IQ3_S: advances only past the blocks that were quantized (as in C)
        sg = o + 74
        xbl = x[QK_K * ibl : QK_K * (ibl + 1)]
        max_scale = np.float32(0.0)
        sigma2 = _row_sigma2(xbl, True)
        for ib in range(QK_K // 32):
            xb = xbl[32 * ib : 32 * ib + 32]
            block_weights(xb, qw, QK_K * ibl + 32 * ib, has_w, sigma2, np.float32(0.0), weight, waux, 32)
            for k in range(4):
                signs[k] = fold_signs(xb, weight, xval, 8 * k, not is_s)
            mx = xval[0]
            for i in range(1, 32):
                mx = cmax(mx, xval[i])
            L[:] = 0
            if (not mx) if is_s else (mx < _EPS_IQ3_XXS):
                scales[ib] = 0
                continue
            if is_s:
                scale = search_scale(xval, weight, waux, L, Laux, on, on_aux, 32, 4, _KMAX, 3, grid, kmap, nbrs,
                                     9, _FIFTH, mx, mx / np.float32(2 * _KMAX - 1), False, 2)
            else:
                scale = search_scale(xval, weight, waux, L, Laux, on, on_aux, 32, 4, _KMAX, 3, grid, kmap, nbrs,
                                     15, _FIFTH, mx, mx / np.float32(2 * _KMAX - 1), True, 1)
            if scale < 0:
                scale = -scale
                for k in range(4):
                    signs[k] = (~signs[k]) & (255 if is_s else 127)
            for k in range(8):
                gi = grid_index(L, 4 * k, 4, 3, kmap)
                if is_s:
                    out[qs + k] = gi & 255
                    out[o + 66 + ib] |= (gi >> 8) << k
                else:
                    out[o + 2 + 8 * ib + k] = gi
            if is_s:
                qs += 8
                for k in range(4):
                    out[sg + k] = signs[k]
                sg += 4
            else:
                sas[ib] = signs[0] | (signs[1] << 7) | (signs[2] << 14) | (signs[3] << 21)
            scales[ib] = scale
            max_scale = cmax(max_scale, scale)
        if not max_scale:
            if not is_s:
                out[o + 2 : o + 98] = 0
            continue
        d = max_scale / np.float32(31)
        _put_f16(out, o, d * (np.float32(1.033) if is_s else np.float32(1.0125)))
        id_ = np.float32(1.0) / d
        if is_s:
            for ib in range(0, QK_K // 32, 2):
                out[o + 106 + ib // 2] = scale_nibble(id_, scales[ib], 15) | (scale_nibble(id_, scales[ib + 1], 15) << 4)
        else:
            for ib in range(QK_K // 32):
                sas[ib] |= scale_nibble(id_, scales[ib], 15) << 28
                for b in range(4):
                    out[o + 66 + 4 * ib + b] = (sas[ib] >> (8 * b)) & 0xFF
