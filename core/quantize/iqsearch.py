"""The steps that ggml's IQ2 and IQ3 quantizers (ggml-quants.c) share, compiled and bit-exact
like weighted.py: folding signs into magnitudes, the nearest grid point of an off-grid point
(`iq2_find_best_neighbour` / `iq3_find_best_neighbour`), and the search of a block's scale
over candidate inverse scales, each candidate snapped to the grid.

A block's values x are quantized as scale * (2 L + 1) * sign, L a level per value; the levels of
each group of `gs` values (8, or 4 for IQ3) must form a point of the grid (see iqgrid.py).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .weighted import _f, _nearest_int

_FLT_MAX = np.float32(3.4028234663852886e38)


@njit(cache=True, nogil=True)
def cmax(a, b):  # type: ignore[no-untyped-def]
    """C's MAX(a, b): a > b ? a : b (b on ties, as the macro)."""
    return a if a > b else b


@njit(cache=True, nogil=True)
def fold_signs(xb, weight, xval, at, even):  # type: ignore[no-untyped-def]
    """The 8 values xb[at:at + 8] -> their magnitudes in xval[at:], returning the sign bits (bit
    i: value i was negative). even: the signs are stored as 7 bits with even parity, so with an
    odd count of negatives the value of least weight * x^2 keeps its sign (its magnitude is
    negated instead); the 7 low bits are returned."""
    nflip = 0
    s = 0
    for i in range(8):
        v = xb[at + i]
        if v >= 0:
            xval[at + i] = v
        else:
            xval[at + i] = -v
            nflip += 1
            s |= 1 << i
    if even:
        if nflip % 2:
            imin = 0
            mn = weight[at] * xb[at] * xb[at]
            for i in range(1, 8):
                ax = weight[at + i] * xb[at + i] * xb[at + i]
                if ax < mn:
                    mn = ax
                    imin = i
            xval[at + imin] = -xval[at + imin]
            s ^= 1 << imin
        return s & 127
    return s


@njit(cache=True, nogil=True)
def find_best_neighbour(neighbours, start, grid, xval, weight, at, gs, scale, L):  # type: ignore[no-untyped-def]
    """iq2/iq3_find_best_neighbour: of the neighbour list at neighbours[start:] (start from the
    kmap entry), the grid point of least weighted squared error to xval[at:at + gs] at this
    scale (the first on ties); its levels go to L[at:]. Returns its index."""
    n = np.int32(neighbours[start])
    best_d2 = _FLT_MAX
    grid_index = -1
    for j in range(start + 1, start + n + 1):
        g = np.int32(neighbours[j])
        d2 = np.float32(0.0)
        for i in range(gs):
            diff = scale * _f(grid[g, i]) - xval[at + i]
            d2 += weight[at + i] * diff * diff
        if d2 < best_d2:
            best_d2 = d2
            grid_index = g
    if grid_index < 0:
        raise ValueError("iq quantizer: no grid neighbour (non-finite values)")
    for i in range(gs):
        L[at + i] = (np.int32(grid[grid_index, i]) - 1) // 2
    return grid_index


@njit(cache=True, nogil=True)
def snap_group(xval, waux, at, gs, id_, scale, L, kmax, bits, grid, kmap, nbrs):  # type: ignore[no-untyped-def]
    """The levels of the group at xval[at:at + gs] for the inverse scale id_ into L[at:]:
    nearest_int(0.5 (id x - 1)) clamped to [0, kmax), then the best neighbour (at `scale`) when
    that point is off the grid. Returns whether it was on the grid."""
    u = 0
    for i in range(gs):
        l = _nearest_int(np.float32(0.5) * (id_ * xval[at + i] - np.float32(1.0)))
        l = max(0, min(kmax - 1, l))
        L[at + i] = l
        u |= l << (bits * i)
    k = kmap[u]
    if k >= 0:
        return True
    find_best_neighbour(nbrs, -k - 1, grid, xval, waux, at, gs, scale, L)
    return False


@njit(cache=True, nogil=True)
def fit_scale(weight, xval, L, n):  # type: ignore[no-untyped-def]
    """(sumqx, sumq2): the weighted least-squares terms of x ~ scale * (2 L + 1)."""
    sumqx = np.float32(0.0)
    sumq2 = np.float32(0.0)
    for i in range(n):
        w = weight[i]
        q = _f(2 * L[i] + 1)
        sumqx += w * xval[i] * q
        sumq2 += w * q * q
    return sumqx, sumq2


@njit(cache=True, nogil=True)
def search_scale(xval, weight, waux, L, Laux, on, on_aux, n, gs, kmax, bits, grid, kmap, nbrs,  # type: ignore[no-untyped-def]
                 n_is, step, denom, scale, init_on, mode):
    """The candidate loop of quantize_row_iq2_*/iq3_*_impl for one block of n values in groups
    of gs: inverse scales (2 kmax - 1 + is * step) / denom for is in [-n_is, n_is], each snapped
    to the grid, keeping the best weighted fit (its levels in L, scale returned). Then, at the
    best scale, the groups are snapped again, and the scale refitted: mode 0 every group,
    always (IQ2_XXS); mode 1 the groups that were off the grid, if any (IQ2_XS, IQ2_S,
    IQ3_XXS); mode 2 every group, if any was off the grid (IQ3_S). `on` starts as init_on."""
    ng = n // gs
    best = np.float32(0.0)
    for k in range(ng):
        on[k] = init_on
    c = _f(2 * kmax - 1)
    for is_ in range(-n_is, n_is + 1):
        id_ = (c + _f(is_) * step) / denom
        this_scale = np.float32(1.0) / id_
        for k in range(ng):
            on_aux[k] = snap_group(xval, waux, gs * k, gs, id_, this_scale, Laux, kmax, bits, grid, kmap, nbrs)
        sumqx, sumq2 = fit_scale(weight, xval, Laux, n)
        if sumq2 > 0 and sumqx * sumqx > best * sumq2:
            scale = sumqx / sumq2
            best = scale * sumqx
            for i in range(n):
                L[i] = Laux[i]
            for k in range(ng):
                on[k] = on_aux[k]
    n_off = 0
    for k in range(ng):
        if not on[k]:
            n_off += 1
    if (mode == 0 or n_off > 0) and scale > 0:
        id_ = np.float32(1.0) / scale
        for k in range(ng):
            if mode == 1 and on[k]:
                continue
            snap_group(xval, waux, gs * k, gs, id_, scale, L, kmax, bits, grid, kmap, nbrs)
        sumqx, sumq2 = fit_scale(weight, xval, L, n)
        if sumq2 > 0:
            scale = sumqx / sumq2
    return scale


@njit(cache=True, nogil=True)
def grid_index(L, at, gs, bits, kmap):  # type: ignore[no-untyped-def]
    """The grid index of the levels L[at:at + gs] (on the grid by construction)."""
    u = 0
    for i in range(gs):
        u |= L[at + i] << (bits * i)
    k = kmap[u]
    if k < 0:
        raise ValueError("iq quantizer: a point off the grid")
    return k


@njit(cache=True, nogil=True)
def scale_nibble(id_, s, top):  # type: ignore[no-untyped-def]
    """nearest_int(0.5 (id * s - 1)) clamped to [0, top]: a block scale's stored code."""
    l = _nearest_int(np.float32(0.5) * (id_ * s - np.float32(1.0)))
    return max(0, min(top, l))


@njit(cache=True, nogil=True)
def block_weights(xb, qw, at, has_w, sigma2, floor, weight, waux, n):  # type: ignore[no-untyped-def]
    """weight = qw * sqrt(sigma2 + x^2) with weights (qw[at:] the block's part), floor + x^2
    without (floor 0, or 0.25 sigma2 for IQ2_S); waux = sqrt(weight)."""
    for i in range(n):
        if has_w:
            weight[i] = qw[at + i] * np.float32(np.sqrt(np.float32(sigma2 + xb[i] * xb[i])))
        else:
            weight[i] = floor + xb[i] * xb[i]
        waux[i] = np.float32(np.sqrt(weight[i]))
