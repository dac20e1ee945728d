"""IQ1_S and IQ1_M: ggml's `quantize_row_iq1_s_impl` and `quantize_row_iq1_m_impl`, compiled
and bit-exact (see weighted.py).

Values are ternary, x ~ scale * (q + shift), q in {-1, 0, 1} and shift +-IQ1_DELTA; groups of
8 ternary values are a point of the 2048-entry grid (iqgrid.py). Per block (32 values IQ1_S,
16 IQ1_M) the optimal split of the sorted values into the three levels is found exhaustively
(prefix sums over the values sorted by C's qsort: glibc's merge sort, stable, so ties keep
their index order, as the insertion sort here does). Layouts:
  IQ1_S (50 bytes): d | grid index low bytes[32] | 8 x u16 (3 x 3 high bits, scale << 12,
                    shift sign << 15)
  IQ1_M (56 bytes): grid index low bytes[32] | qh[16] (2 x 3 high bits | shift bits 0x08 0x80)
                    | 4 x u16 (3-bit scales, and 4 bits each of the fp16 d in the top nibbles)
IQ1_S needs importance weights (ggml asserts them); IQ1_M falls back to x^2.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .iqsearch import block_weights, cmax
from .weighted import QK_K, _f, _nearest_int, _put_f16, _row_sigma2

_ZERO = np.float32(0.0)
_DELTA = np.float32(0.125)  # IQ1S_DELTA, IQ1M_DELTA
_FLT_MAX = np.float32(3.4028234663852886e38)
_EPS_IQ1_S = np.float32(1e-12)
_EPS_IQ1_M = np.float32(1e-7)


@njit(cache=True, nogil=True)
def _sort_index(xb, idx):  # type: ignore[no-untyped-def]
    """idx = the order of xb ascending, ties by index (a stable sort, as glibc's qsort)."""
    n = xb.shape[0]
    for j in range(n):
        idx[j] = j
    for j in range(1, n):
        v = idx[j]
        i = j - 1
        while i >= 0 and xb[idx[i]] > xb[v]:
            idx[i + 1] = idx[i]
            i -= 1
        idx[i + 1] = v


@njit(cache=True, nogil=True)
def _best_neighbour2(nbrs, grid, xval, weight, at, scale, xg, L):  # type: ignore[no-untyped-def]
    """iq1_find_best_neighbour2: of the neighbour list, the grid point of least weighted squared
    error to xval[at:at + 8] with values scale * xg[level]; its levels go to L[at:]."""
    n = np.int32(nbrs[0])
    best = _FLT_MAX
    gi = -1
    for j in range(1, n + 1):
        g = np.int32(nbrs[j])
        d2 = np.float32(0.0)
        for i in range(8):
            q = xg[(np.int32(grid[g, i]) - 1) // 2]
            diff = scale * q - xval[at + i]
            d2 += weight[at + i] * diff * diff
        if d2 < best:
            best = d2
            gi = g
    if gi < 0:
        raise ValueError("iq1 quantizer: no grid neighbour (non-finite values)")
    for i in range(8):
        L[at + i] = (np.int32(grid[gi, i]) - 1) // 2
    return gi


@njit(cache=True, nogil=True)
def _abs_max(xb):  # type: ignore[no-untyped-def]
    mx = abs(xb[0])
    for i in range(1, xb.shape[0]):
        mx = cmax(mx, abs(xb[i]))
    return mx


@njit(cache=True, nogil=True)
def _levels(idx, besti1, besti2, L):  # type: ignore[no-untyped-def]
    """L by rank: 0 below besti1, 1 below besti2, 2 above."""
    for j in range(idx.shape[0]):
        L[idx[j]] = 0 if j < besti1 else (1 if j < besti2 else 2)


@njit(cache=True, nogil=True)
def _snap(xb, weight, L, k, scale, xx, grid, kmap, nbrs):  # type: ignore[no-untyped-def]
    """The grid index of group k of L (the best neighbour when off the grid); on-grid flag."""
    u = 0
    for j in range(8):
        u |= L[8 * k + j] << (2 * j)
    gi = np.int64(kmap[u])
    if gi >= 0:
        return gi, True
    return np.int64(_best_neighbour2(nbrs[-gi - 1 :], grid, xb, weight, 8 * k, scale, xx, L)), False


@njit(cache=True, nogil=True)
def row_iq1_s(x, qw, out, grid, kmap, nbrs):  # type: ignore[no-untyped-def]
    """quantize_row_iq1_s_impl: one row into out (50 bytes per 256 values)."""
    bs = 32
    x_p = np.array([-1 + _DELTA, _DELTA, 1 + _DELTA], np.float32)
    x_m = np.array([-1 - _DELTA, -_DELTA, 1 - _DELTA], np.float32)
    weight = np.zeros(bs, np.float32)
    waux = np.zeros(bs, np.float32)  # (unused: the IQ1 searches weigh by weight itself)
    L = np.zeros(bs, np.int32)
    idx = np.zeros(bs, np.int64)
    sumx = np.zeros(bs + 1, np.float32)
    sumw = np.zeros(bs + 1, np.float32)
    index = np.zeros(bs // 8, np.int64)
    scales = np.zeros(QK_K // bs, np.float32)
    shifts = np.zeros(QK_K // bs, np.int64)
    qh = np.zeros(QK_K // bs, np.int64)
    for ibl in range(x.shape[0] // QK_K):
        o = 50 * ibl
        out[o : o + 50] = 0
        qh[:] = 0
        xbl = x[QK_K * ibl : QK_K * (ibl + 1)]
        max_scale = np.float32(0.0)
        sigma2 = _row_sigma2(xbl, True)
        for ib in range(QK_K // bs):
            xb = xbl[bs * ib : bs * ib + bs]
            block_weights(xb, qw, QK_K * ibl + bs * ib, True, sigma2, _ZERO, weight, waux, bs)
            mx = _abs_max(xb)
            if mx < _EPS_IQ1_S:
                scales[ib] = 0
                shifts[ib] = 1
                continue
            _sort_index(xb, idx)
            sumx[0] = 0
            sumw[0] = 0
            for j in range(bs):
                i = idx[j]
                sumx[j + 1] = sumx[j] + weight[i] * xb[i]
                sumw[j + 1] = sumw[j] + weight[i]
            best_score = -_FLT_MAX
            scale = mx
            besti1 = -1
            besti2 = -1
            best_shift = 0
            for i1 in range(bs + 1):
                for i2 in range(i1, bs + 1):
                    for sh in range(2):
                        xs = x_p if sh == 0 else x_m
                        sumqx = ((sumx[i1] - sumx[0]) * xs[0] + (sumx[i2] - sumx[i1]) * xs[1]
                                 + (sumx[bs] - sumx[i2]) * xs[2])
                        sumq2 = ((sumw[i1] - sumw[0]) * xs[0] * xs[0] + (sumw[i2] - sumw[i1]) * xs[1] * xs[1]
                                 + (sumw[bs] - sumw[i2]) * xs[2] * xs[2])
                        if sumq2 > 0 and sumqx * sumqx > best_score * sumq2:
                            scale = sumqx / sumq2
                            best_score = scale * sumqx
                            besti1 = i1
                            besti2 = i2
                            best_shift = 1 if sh == 0 else -1
            if besti1 < 0 or besti2 < 0 or best_shift == 0:
                scales[ib] = 0
                shifts[ib] = 1
                continue
            _levels(idx, besti1, besti2, L)
            if scale < 0:
                for j in range(bs):
                    L[j] = 2 - L[j]
                scale = -scale
                best_shift = -best_shift
            xx = x_p if best_shift == 1 else x_m
            all_on = True
            for k in range(bs // 8):
                gi, on = _snap(xb, weight, L, k, scale, xx, grid, kmap, nbrs)
                index[k] = gi
                all_on = all_on and on
            if not all_on:
                sumqx = np.float32(0.0)
                sumq2 = np.float32(0.0)
                for k in range(bs // 8):
                    for j in range(8):
                        w = weight[8 * k + j]
                        q = xx[(np.int32(grid[index[k], j]) - 1) // 2]
                        sumqx += w * q * xb[8 * k + j]
                        sumq2 += w * q * q
                if sumqx > 0 and sumq2 > 0:
                    scale = sumqx / sumq2
            h = 0
            for k in range(bs // 8):
                out[o + 2 + (bs // 8) * ib + k] = index[k] & 255
                h |= (index[k] >> 8) << (3 * k)
            qh[ib] = h
            scales[ib] = scale
            shifts[ib] = best_shift
            max_scale = cmax(max_scale, scale)
        if max_scale:
            d = max_scale / np.float32(15)
            _put_f16(out, o, d * np.float32(1.125))
            id_ = np.float32(1.0) / d
            for ib in range(QK_K // bs):
                l = _nearest_int(np.float32(0.5) * (id_ * scales[ib] - np.float32(1.0)))
                l = max(0, min(7, l))
                if shifts[ib] == -1:
                    l |= 8
                qh[ib] |= l << 12
        for ib in range(QK_K // bs):
            out[o + 34 + 2 * ib] = qh[ib] & 0xFF
            out[o + 35 + 2 * ib] = (qh[ib] >> 8) & 0xFF


@njit(cache=True, nogil=True)
def row_iq1_m(x, qw, has_w, out, grid, kmap, nbrs):  # type: ignore[no-untyped-def]
    """quantize_row_iq1_m_impl: one row into out (56 bytes per 256 values)."""
    bs = 16
    x_p = np.array([-1 + _DELTA, _DELTA, 1 + _DELTA], np.float32)
    x_m = np.array([-1 - _DELTA, -_DELTA, 1 - _DELTA], np.float32)
    masks = np.array([0x00, 0x80, 0x08, 0x88], np.int64)
    weight = np.zeros(bs, np.float32)
    waux = np.zeros(bs, np.float32)  # (unused: the IQ1 searches weigh by weight itself)
    L = np.zeros(bs, np.int32)
    idx = np.zeros(bs, np.int64)
    px = np.zeros((2, bs + 1), np.float32)
    pw = np.zeros((2, bs + 1), np.float32)
    sumqx = np.zeros(4, np.float32)
    sumq2 = np.zeros(4, np.float32)
    qx_p = np.zeros(2, np.float32)
    qx_m = np.zeros(2, np.float32)
    q2_p = np.zeros(2, np.float32)
    q2_m = np.zeros(2, np.float32)
    index = np.zeros(2, np.int64)
    scales = np.zeros(QK_K // bs, np.float32)
    shifts = np.zeros(QK_K // bs, np.int64)
    sc = np.zeros(4, np.int64)  # the u16 scales
    p2 = x_p[2]
    m2 = x_m[2]
    cp1 = x_p[0] * x_p[0] - x_p[1] * x_p[1]
    cp2 = x_p[1] * x_p[1] - x_p[2] * x_p[2]
    cm1 = x_m[0] * x_m[0] - x_m[1] * x_m[1]
    cm2 = x_m[1] * x_m[1] - x_m[2] * x_m[2]
    for ibl in range(x.shape[0] // QK_K):
        o = 56 * ibl
        out[o : o + 56] = 0
        sc[:] = 0
        xbl = x[QK_K * ibl : QK_K * (ibl + 1)]
        max_scale = np.float32(0.0)
        sigma2 = _row_sigma2(xbl, True)
        for ib in range(QK_K // bs):
            xb = xbl[bs * ib : bs * ib + bs]
            block_weights(xb, qw, QK_K * ibl + bs * ib, has_w, sigma2, _ZERO, weight, waux, bs)
            mx = _abs_max(xb)
            if mx < _EPS_IQ1_M:
                scales[ib] = 0
                shifts[ib] = 0
                continue
            _sort_index(xb, idx)
            best_score = -_FLT_MAX
            scale = mx
            besti1 = -1
            besti2 = -1
            best_k = -1
            # prefix sums per half of the block (each half has its own shift)
            for h in range(2):
                px[h, 0] = 0
                pw[h, 0] = 0
            for j in range(bs):
                i = idx[j]
                h = 0 if i < bs // 2 else 1
                px[h, j + 1] = px[h, j] + weight[i] * xb[i]
                px[1 - h, j + 1] = px[1 - h, j]
                pw[h, j + 1] = pw[h, j] + weight[i]
                pw[1 - h, j + 1] = pw[1 - h, j]
            for i1 in range(bs + 1):
                for i2 in range(i1, bs + 1):
                    for h in range(2):
                        sx = px[h, i1] + px[h, i2]
                        qx_p[h] = px[h, bs] * p2 - sx
                        qx_m[h] = px[h, bs] * m2 - sx
                        q2_p[h] = pw[h, bs] * p2 * p2 + pw[h, i1] * cp1 + pw[h, i2] * cp2
                        q2_m[h] = pw[h, bs] * m2 * m2 + pw[h, i1] * cm1 + pw[h, i2] * cm2
                    sumqx[0] = qx_p[0] + qx_p[1]
                    sumqx[1] = qx_p[0] + qx_m[1]
                    sumqx[2] = qx_m[0] + qx_p[1]
                    sumqx[3] = qx_m[0] + qx_m[1]
                    sumq2[0] = q2_p[0] + q2_p[1]
                    sumq2[1] = q2_p[0] + q2_m[1]
                    sumq2[2] = q2_m[0] + q2_p[1]
                    sumq2[3] = q2_m[0] + q2_m[1]
                    for k in range(4):
                        if sumq2[k] > 0 and sumqx[k] * sumqx[k] > best_score * sumq2[k]:
                            scale = sumqx[k] / sumq2[k]
                            best_score = scale * sumqx[k]
                            besti1 = i1
                            besti2 = i2
                            best_k = k
            if besti1 < 0 or besti2 < 0 or best_k < 0:
                scales[ib] = 0
                shifts[ib] = 0
                continue
            _levels(idx, besti1, besti2, L)
            if scale < 0:
                for j in range(bs):
                    L[j] = 2 - L[j]
                scale = -scale
                best_k = 3 - best_k
            all_on = True
            for k in range(2):
                xx = (x_p if best_k < 2 else x_m) if k == 0 else (x_p if best_k % 2 == 0 else x_m)
                gi, on = _snap(xb, weight, L, k, scale, xx, grid, kmap, nbrs)
                index[k] = gi
                all_on = all_on and on
            if not all_on:
                sqx = np.float32(0.0)
                sq2 = np.float32(0.0)
                for k in range(2):
                    xx = (x_p if best_k < 2 else x_m) if k == 0 else (x_p if best_k % 2 == 0 else x_m)
                    for j in range(8):
                        w = weight[8 * k + j]
                        q = xx[(np.int32(grid[index[k], j]) - 1) // 2]
                        sqx += w * q * xb[8 * k + j]
                        sq2 += w * q * q
                if sqx > 0 and sq2 > 0:
                    scale = sqx / sq2
            out[o + 2 * ib] = index[0] & 255
            out[o + 2 * ib + 1] = index[1] & 255
            out[o + 32 + ib] = (index[0] >> 8) | ((index[1] >> 8) << 4)
            scales[ib] = scale
            shifts[ib] = best_k
            max_scale = cmax(max_scale, scale)
        if not max_scale:
            continue
        d = max_scale / np.float32(15)
        id_ = np.float32(1.0) / d
        sqx = np.float32(0.0)
        sq2 = np.float32(0.0)
        for ib in range(QK_K // bs):
            l = _nearest_int(np.float32(0.5) * (id_ * scales[ib] - np.float32(1.0)))
            l = max(0, min(7, l))
            sc[ib // 4] |= l << (3 * (ib % 4))
            out[o + 32 + ib] |= masks[shifts[ib]]
            xb = xbl[bs * ib : bs * ib + bs]
            block_weights(xb, qw, QK_K * ibl + bs * ib, has_w, sigma2, _ZERO, weight, waux, bs)
            qh = np.int64(out[o + 32 + ib])
            for k in range(2):
                xx = (x_p if shifts[ib] < 2 else x_m) if k == 0 else (x_p if shifts[ib] % 2 == 0 else x_m)
                g = np.int64(out[o + 2 * ib + k]) + ((qh << (8 - 4 * k)) & 0x700)
                for j in range(8):
                    w = weight[8 * k + j]
                    q = xx[(np.int32(grid[g, j]) - 1) // 2] * _f(2 * l + 1)
                    sqx += w * q * xb[8 * k + j]
                    sq2 += w * q * q
        if sq2 > 0:
            d = sqx / sq2
        s = np.zeros(2, np.uint8)
        _put_f16(s, 0, d * np.float32(1.1125))
        u16 = np.int64(s[0]) | (np.int64(s[1]) << 8)
        sc[0] |= (u16 & 0x000F) << 12
        sc[1] |= (u16 & 0x00F0) << 8
        sc[2] |= (u16 & 0x0F00) << 4
        sc[3] |= u16 & 0xF000
        for b in range(4):
            out[o + 48 + 2 * b] = sc[b] & 0xFF
            out[o + 49 + 2 * b] = (sc[b] >> 8) & 0xFF
