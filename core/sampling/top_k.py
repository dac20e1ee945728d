"""The k largest of a long list of logits in one compiled pass (the top-k of every sampling
step over the whole vocabulary, 150-260k entries).

A min-heap of the k best seen so far, where "worse" means a lower value, or an equal value
at a later index: an entry replaces the heap's worst only when strictly greater, so ties at
the k-th value go to the earliest indices, and the result, sorted by value descending then
index, is exactly the first k of a stable descending sort of the whole list. -inf entries
(banned tokens) need no special case; NaN never enters a heap that is full. One comparison
per entry for most of the list, against NumPy's argpartition over all of it.
"""

from __future__ import annotations

import numpy as np
from numba import njit


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


@njit(cache=True, nogil=True)
def top_k_indices(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values (0 < k <= len(values)), value descending, ties by index."""
    heap = np.empty(k, dtype=np.int64)
    for i in range(k):  # the first k entries, heapified
        heap[i] = i
    for i in range(k // 2 - 1, -1, -1):
        _sift_down(values, heap, k, i)
    for i in range(k, values.shape[0]):
        if values[i] > values[heap[0]]:  # strictly better than the worst kept (ties: earlier wins)
            heap[0] = i
            _sift_down(values, heap, k, 0)
    out = np.empty(k, dtype=np.int64)
    for j in range(k - 1, -1, -1):  # pop the worst into the last free place: best first
        out[j] = heap[0]
        heap[0] = heap[j]
        _sift_down(values, heap, j, 0)
    return out
