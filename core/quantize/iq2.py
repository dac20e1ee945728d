"""IQ2_XXS, IQ2_XS and IQ2_S: ggml's `quantize_row_iq2_xxs_impl`, `_iq2_xs_impl` and
`_iq2_s_impl`, compiled and bit-exact (see weighted.py for the float32 rules).

Each super-block of 256 values is cut into blocks (32 values for IQ2_XXS, 16 otherwise) of
groups of 8. A group stores the magnitudes as a point of a grid of levels 2l + 1, l in [0, 3)
(iqgrid.py) and its signs; a block stores a 4-bit scale, the super-block an fp16 d. Layouts:
  IQ2_XXS (66 bytes): d | 8 x (u32 4 grid indices | u32 4 x 7 sign bits << 7k, scale << 28)
  IQ2_XS  (74 bytes): d | 32 x u16 (grid index 9 bits | 7 sign bits << 9) | scales[8] (nibbles)
  IQ2_S   (82 bytes): d | grid index low bytes[32] | signs[32] | qh[8] (2 high bits each) |
                      scales[8]
IQ2_XXS and IQ2_XS need importance weights (ggml asserts them); IQ2_S has a fallback.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .iqsearch import block_weights, cmax, fold_signs, grid_index, scale_nibble, search_scale
from .weighted import QK_K, _EPS, _make_qp_quants, _put_f16, _row_sigma2

_KMAX = 3
_TENTH = np.float32(0.1)
_EPS_IQ2_S = np.float32(1e-8)


@njit(cache=True, nogil=True)
def block_scratch(n):  # type: ignore[no-untyped-def]
    """weight, waux, xval (float32) and L, Laux (int32) of a block of n, on / on_aux per group."""
    f = np.zeros(n, np.float32)
    i = np.zeros(n, np.int32)
    b = np.zeros(n // 8, np.bool_)
    return f.copy(), f.copy(), f.copy(), i.copy(), i.copy(), b.copy(), b.copy()


@njit(cache=True, nogil=True)
def row_iq2_xxs(x, qw, out, grid, kmap, nbrs):  # type: ignore[no-untyped-def]
    """quantize_row_iq2_xxs_impl: one row x into out (66 bytes per 256 values)."""
    weight, waux, xval, L, Laux, on, on_aux = block_scratch(32)
    scales = np.zeros(QK_K // 32, np.float32)
    signs = np.zeros(4, np.int64)
    q2 = np.zeros(16, np.int64)  # uint32 words
    for ibl in range(x.shape[0] // QK_K):
        o = 66 * ibl
        xbl = x[QK_K * ibl : QK_K * (ibl + 1)]
        _put_f16(out, o, np.float32(0.0))
        q2[:] = 0
        max_scale = np.float32(0.0)
        sigma2 = _row_sigma2(xbl, False)
        for ib in range(QK_K // 32):
            xb = xbl[32 * ib : 32 * ib + 32]
            block_weights(xb, qw, QK_K * ibl + 32 * ib, True, sigma2, np.float32(0.0), weight, waux, 32)
            for k in range(4):
                signs[k] = fold_signs(xb, weight, xval, 8 * k, True)
            mx = xval[0]
            for i in range(1, 32):
                mx = cmax(mx, xval[i])
            if mx < _EPS:
                scales[ib] = 0
                continue
            scale = _make_qp_quants(32, _KMAX + 1, xval, L, weight)
            eff_max = scale * np.float32(_KMAX)
            if eff_max <= 0:
                scales[ib] = 0
                continue
            scale = search_scale(xval, weight, waux, L, Laux, on, on_aux, 32, 8, _KMAX, 2, grid, kmap, nbrs,
                                 6, _TENTH, eff_max, scale, False, 0)
            if scale < 0:
                scale = -scale
                for k in range(4):
                    signs[k] = (~signs[k]) & 127
            for k in range(4):
                q2[2 * ib] |= grid_index(L, 8 * k, 8, 2, kmap) << (8 * k)
                q2[2 * ib + 1] |= signs[k] << (7 * k)
            scales[ib] = scale
            max_scale = cmax(max_scale, scale)
        if not max_scale:
            out[o + 2 : o + 66] = 0
            continue
        d = max_scale / np.float32(31)
        _put_f16(out, o, d)
        id_ = np.float32(1.0) / d
        for ib in range(QK_K // 32):
            q2[2 * ib + 1] |= scale_nibble(id_, scales[ib], 15) << 28
        for w in range(16):
            for b in range(4):
                out[o + 2 + 4 * w + b] = (q2[w] >> (8 * b)) & 0xFF


@njit(cache=True, nogil=True)
def row_iq2_xs_s(x, qw, has_w, out, grid, kmap, nbrs, is_s):  # type: ignore[no-untyped-def]
    """quantize_row_iq2_xs_impl (is_s False; 74 bytes per 256 values, weights required) and
    quantize_row_iq2_s_impl (is_s True; 82 bytes, 8 sign bits, no parity)."""
    weight, waux, xval, L, Laux, on, on_aux = block_scratch(16)
    scales = np.zeros(QK_K // 16, np.float32)
    signs = np.zeros(2, np.int64)
    size = 82 if is_s else 74
    sc = 74 if is_s else 66  # the scales' offset in the block
    for ibl in range(x.shape[0] // QK_K):
        o = size * ibl
        out[o : o + size] = 0
        xbl = x[QK_K * ibl : QK_K * (ibl + 1)]
        max_scale = np.float32(0.0)
        sigma2 = _row_sigma2(xbl, is_s)
        for ib in range(QK_K // 16):
            xb = xbl[16 * ib : 16 * ib + 16]
            block_weights(xb, qw, QK_K * ibl + 16 * ib, has_w, sigma2, np.float32(0.25) * sigma2, weight, waux, 16)
            for k in range(2):
                signs[k] = fold_signs(xb, weight, xval, 8 * k, not is_s)
            mx = xval[0]
            for i in range(1, 16):
                mx = cmax(mx, xval[i])
            L[:] = 0
            if mx < (_EPS_IQ2_S if is_s else _EPS):
                scales[ib] = 0
                continue
            scale = search_scale(xval, weight, waux, L, Laux, on, on_aux, 16, 8, _KMAX, 2, grid, kmap, nbrs,
                                 9, _TENTH, mx, mx / np.float32(2 * _KMAX - 1), True, 1)
            if scale < 0:
                scale = -scale
                for k in range(2):
                    signs[k] = (~signs[k]) & (255 if is_s else 127)
            for k in range(2):
                gi = grid_index(L, 8 * k, 8, 2, kmap)
                i8 = 2 * ib + k
                if is_s:
                    out[o + 2 + i8] = gi & 255
                    out[o + 66 + i8 // 4] |= (gi >> 8) << (2 * (i8 % 4))
                    out[o + 34 + i8] = signs[k]
                else:
                    v = gi | (signs[k] << 9)
                    out[o + 2 + 2 * i8] = v & 0xFF
                    out[o + 3 + 2 * i8] = (v >> 8) & 0xFF
            scales[ib] = scale
            max_scale = cmax(max_scale, scale)
        if not max_scale:
            if not is_s:
                out[o + 2 : o + 66] = 0
            continue
        d = max_scale / np.float32(31)
        _put_f16(out, o, d * np.float32(0.9875) if is_s else d)
        id_ = np.float32(1.0) / d
        for ib in range(QK_K // 16):
            l = scale_nibble(id_, scales[ib], 15)
            if ib % 2 == 0:
                out[o + sc + ib // 2] = l
            else:
                out[o + sc + ib // 2] |= l << 4
