"""The lattice tables of ggml's IQ quantizers: `iq2xs_init_impl` (IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S,
IQ1_M) and `iq3xs_init_impl` (IQ3_XXS, IQ3_S) of ggml-quants.c, built once at first use.

A grid entry is a point of `n` values (8, or 4 for IQ3), each a level l stored as 2l + 1.
A point of levels L (any in [0, 4) per value, or [0, 8) for IQ3) has the key
u = sum L[i] << (bits * i). `kmap[u]` is the grid index of the point when it is on the grid;
otherwise -(offset + 1), and `neighbours[offset]` is a count c followed by c grid indices: the
entries at the `nwant` smallest squared distances from the point, by distance then index
(C's qsort with a comparator that leaves no ties, then the cut after nwant distinct distances).

The levels come from the dequantization grids (core/model/kernels/grids.py): each type's grid
bytes are its levels' magnitudes, in order.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from numba import njit

from llamacli.core.model.kernels import grids as G


@dataclass(frozen=True)
class IQGrid:
    """grid (entries, n) int8 = 2l + 1; kmap (kmap size,) int32; neighbours uint16 (flat)."""

    grid: np.ndarray
    kmap: np.ndarray
    neighbours: np.ndarray


# name -> (the dequantization grid, its magnitudes per level, bits per value in the key,
#          kmap size, nwant)
_SPECS = {
    "iq2_xxs": (G.IQ2XXS_GRID, (8, 25, 43), 2, 43692, 2),
    "iq2_xs": (G.IQ2XS_GRID, (8, 25, 43), 2, 43692, 2),
    "iq2_s": (G.IQ2S_GRID, (8, 25, 43), 2, 43692, 1),
    "iq1": (G.IQ1S_GRID, (-1, 0, 1), 2, 43692, 3),
    "iq3_xxs": (G.IQ3XXS_GRID, (4, 12, 20, 28, 36, 44, 52, 62), 3, 4096, 2),
    "iq3_s": (G.IQ3S_GRID, (1, 3, 5, 7, 9, 11, 13, 15), 3, 4096, 3),
}


@njit(cache=True, nogil=True)
def _neighbour_lists(grid, kmap, bits, nwant):  # type: ignore[no-untyped-def]
    """Fill kmap's off-grid keys and return the neighbour lists (see the module docstring).
    Distances are small integers, so the (distance, index) order is a counting sort."""
    n_grid, n = grid.shape
    mask = (1 << bits) - 1
    max_d2 = n * (2 * mask) * (2 * mask)
    d2 = np.empty(n_grid, np.int32)
    seen = np.zeros(max_d2 + 1, np.bool_)
    out = np.empty(kmap.shape[0] * 64, np.uint16)
    used = 0
    for i in range(kmap.shape[0]):
        if kmap[i] >= 0:
            continue
        for v in range(max_d2 + 1):
            seen[v] = False
        for j in range(n_grid):
            s = 0
            for k in range(n):
                diff = np.int32(grid[j, k]) - (2 * ((i >> (bits * k)) & mask) + 1)
                s += diff * diff
            d2[j] = s
            seen[s] = True
        # the nwant smallest distinct distances
        cut = -1
        have = 0
        for v in range(max_d2 + 1):
            if seen[v]:
                cut = v
                have += 1
                if have == nwant:
                    break
        count = 0
        for j in range(n_grid):
            if d2[j] <= cut:
                count += 1
        if used + count + 1 > out.shape[0]:
            grown = np.empty(2 * (used + count + 1), np.uint16)
            grown[:used] = out[:used]
            out = grown
        kmap[i] = -(used + 1)
        out[used] = count
        at = used + 1
        for v in range(cut + 1):
            if not seen[v]:
                continue
            for j in range(n_grid):
                if d2[j] == v:
                    out[at] = j
                    at += 1
        used = at
    return out[:used].copy()


@functools.cache
def iq_grid(name: str) -> IQGrid:
    """The tables of one quantizer (see _SPECS for the names), built on first use."""
    table, levels, bits, kmap_size, nwant = _SPECS[name]
    lv = np.asarray(levels, dtype=np.int32)
    idx = np.searchsorted(lv, table.astype(np.int32))
    assert (lv[np.minimum(idx, lv.size - 1)] == table).all(), name
    grid = (2 * idx + 1).astype(np.int8)
    kmap = np.full(kmap_size, -1, dtype=np.int32)
    keys = (idx << (bits * np.arange(grid.shape[1]))).sum(axis=1)
    kmap[keys] = np.arange(grid.shape[0], dtype=np.int32)
    neighbours = _neighbour_lists(grid, kmap, bits, nwant)
    for a in (grid, kmap, neighbours):
        a.flags.writeable = False
    return IQGrid(grid, kmap, neighbours)
