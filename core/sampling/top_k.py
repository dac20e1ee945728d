"""The k largest of a long list of logits in one compiled pass (the top-k of every sampling
step over the whole vocabulary, 150-260k entries).

A min-heap of the k best seen so far, where "worse" means a lower value, or an equal value
at a later index: an entry replaces the heap's worst only when strictly greater, so ties at
the k-th value go to the earliest indices, and the result, sorted by value descending then
index, is exactly the first k of a stable descending sort of the whole list. -inf entries
(banned tokens) need no special case; NaN never enters a heap that is full.

Most of the list cannot enter: from the maximum of each block of BLOCK entries (NumPy's
vectorised reduction), the k-th largest block maximum t has at least k entries at or above
it, so nothing below t is in the top k; the pass visits only blocks whose maximum reaches t
and is above the heap's worst. A list in ascending order, which would push every entry
through the heap, thus pushes at most k blocks' worth.
"""

from __future__ import annotations

import numpy as np
from numba import njit

BLOCK = 1024  # entries per block maximum (256: NumPy's per-row overhead doubled the cost)


@njit(cache=True, nogil=True, inline="always")
def _worse(values: np.ndarray, a: int, b: int) -> bool:
    """Entry a ranks below entry b (lower value, or equal value and later index)."""
    return values[a] < values[b] or (values[a] == values[b] and a > b)


@njit(cache=True, nogil=True)
def _sift_down(values: np.ndarray, heap: np.ndarray, n: int, i: int) -> None:
    """Restore the heap (worst entry at the root) below position i, over heap[:n]."""
    while True:
        lo = i
        left, right = 2 * i + 1, 2 * i + 2
        if left < n and _worse(values, heap[left], heap[lo]):
            lo = left
        if right < n and _worse(values, heap[right], heap[lo]):
            lo = right
        if lo == i:
            return
        heap[i], heap[lo] = heap[lo], heap[i]
        i = lo


def top_k_indices(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values (0 < k <= len(values)), value descending, ties by index."""
    n_blocks = values.shape[0] // BLOCK
    block_max = values[: n_blocks * BLOCK].reshape(n_blocks, BLOCK).max(axis=1)  # (n_blocks,)
    floor = -np.inf
    if n_blocks >= k:
        floor = np.partition(block_max, n_blocks - k)[n_blocks - k]  # k blocks reach it
        if np.isnan(floor):  # NaN maxima: no bound (NaN never enters below)
            floor = -np.inf
    out, n = _top_k(values, block_max, k, values.dtype.type(floor))
    if n < k:  # fewer than k comparable entries (NaN logits): the stable sort decides
        return np.argsort(-values, kind="stable")[:k]
    return out


@njit(cache=True, nogil=True)
def _top_k(values: np.ndarray, block_max: np.ndarray, k: int, floor: float) -> tuple[np.ndarray, int]:
    """top_k_indices given each whole block's maximum and a value the k-th largest is not
    below; the indices and how many entries were found (k unless NaN hid some)."""
    n = values.shape[0]
    heap = np.empty(k, dtype=np.int64)
    size = 0
    worst = floor  # below this nothing enters (the heap's worst once it is full)
    n_blocks = block_max.shape[0]
    for b in range(n_blocks + 1):
        lo, hi = b * BLOCK, min((b + 1) * BLOCK, n)
        if b < n_blocks and (block_max[b] < floor or (size == k and block_max[b] <= worst)):
            continue  # nothing here reaches the floor, or beats the worst kept (NaN maxima: scanned)
        for i in range(lo, hi):
            v = values[i]
            if size < k:
                if v >= floor:  # the heap fills with the first k entries at or above the floor
                    heap[size] = i
                    size += 1
                    if size == k:
                        for j in range(k // 2 - 1, -1, -1):
                            _sift_down(values, heap, k, j)
                        worst = values[heap[0]]
            elif v > worst:  # strictly better than the worst kept (ties: earlier wins)
                heap[0] = i
                _sift_down(values, heap, k, 0)
                worst = values[heap[0]]
    out = np.empty(k, dtype=np.int64)
    if size < k:
        return out, size
    for j in range(k - 1, -1, -1):  # pop the worst into the last free place: best first
        out[j] = heap[0]
        heap[0] = heap[j]
        _sift_down(values, heap, j, 0)
    return out, k
