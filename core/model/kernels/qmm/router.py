"""Mixture-of-experts routing as ggml-cpu computes it, compiled: soft max over the router's
logits and the top-k experts of each token.

`softmax_rows`: ggml_soft_max_f32 with no mask and scale 1: e = ggml_v_expf(x - max) and their
float64 sum in ggml's order (`expf.exp_sum`), then p = e * f32(1 / sum).

`sigmoid_rows`: ggml_sigmoid (op_sigmoid: 1.f / (1.f + expf(-x)) with the C library's expf,
correctly rounded here by taking exp in float64 and rounding it to float32).

`top_k_rows`: ggml_argsort_top_k, i.e. ggml_argsort (descending) then its first k entries.
ggml's argsort is `std::sort` over the indices 0..n-1 with the comparator `x[a] > x[b]`; which
of two equal probabilities comes first is whatever libstdc++'s introsort leaves, so `_sort_desc`
is that algorithm step for step (GCC's bits/stl_algo.h: `__introsort_loop` with the median of
three moved to the front and the unguarded partition while more than 16 elements remain, heap
sort past the depth limit, then the final insertion sort). For 16 experts or fewer it is a plain
insertion sort: equal probabilities keep index order.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from llamacli.core.model.kernels.qmm.expf import exp_sum

_THRESHOLD = 16  # libstdc++'s _S_threshold


@njit(cache=True, nogil=True)
def softmax_rows(logits):  # type: ignore[no-untyped-def]
    """(T, E) float32 -> (T, E) float32 probabilities (ggml_soft_max, module docstring)."""
    t, e = logits.shape
    out = np.empty((t, e), dtype=np.float32)
    for i in range(t):
        row = out[i]
        m = np.float32(-np.inf)
        for j in range(e):
            row[j] = logits[i, j]
            if logits[i, j] > m:
                m = logits[i, j]
        total = exp_sum(row, 0, e, m)
        scale = np.float32(1.0 / total)
        for j in range(e):
            row[j] = row[j] * scale
    return out


def sigmoid_rows(logits: np.ndarray) -> np.ndarray:
    """(T, E) float32 -> (T, E) float32 sigmoids (ggml_sigmoid, module docstring)."""
    with np.errstate(over="ignore", under="ignore"):  # expf(-x): inf below x = -88 (sigmoid 0), 0 above 104 (1)
        e = np.exp(-logits.astype(np.float64)).astype(np.float32)
        return (np.float32(1.0) / (np.float32(1.0) + e)).astype(np.float32)


@njit(cache=True, nogil=True, inline="always")
def _gt(x, a, b):  # type: ignore[no-untyped-def]
    return x[a] > x[b]  # cmp_argsort<GGML_SORT_ORDER_DESC>


@njit(cache=True, nogil=True)
def _sift_down(x, idx, first, hole, n, val):  # type: ignore[no-untyped-def]
    """std::__adjust_heap (a max-heap under _gt, i.e. the smallest x on top)."""
    top = hole
    child = hole
    while child < (n - 1) // 2:
        child = 2 * (child + 1)
        if _gt(x, idx[first + child], idx[first + child - 1]):
            child -= 1
        idx[first + hole] = idx[first + child]
        hole = child
    if (n & 1) == 0 and child == (n - 2) // 2:
        child = 2 * (child + 1)
        idx[first + hole] = idx[first + child - 1]
        hole = child - 1
    parent = (hole - 1) // 2  # std::__push_heap
    while hole > top and _gt(x, idx[first + parent], val):
        idx[first + hole] = idx[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    idx[first + hole] = val


@njit(cache=True, nogil=True)
def _heap_sort(x, idx, first, last):  # type: ignore[no-untyped-def]
    """std::__partial_sort(first, last, last): make_heap then sort_heap."""
    n = last - first
    if n < 2:
        return
    parent = (n - 2) // 2
    while True:
        _sift_down(x, idx, first, parent, n, idx[first + parent])
        if parent == 0:
            break
        parent -= 1
    end = last
    while end - first > 1:
        end -= 1
        val = idx[end]
        idx[end] = idx[first]
        _sift_down(x, idx, first, 0, end - first, val)


@njit(cache=True, nogil=True)
def _median_to_first(x, idx, result, a, b, c):  # type: ignore[no-untyped-def]
    """std::__move_median_to_first."""
    if _gt(x, idx[a], idx[b]):
        if _gt(x, idx[b], idx[c]):
            idx[result], idx[b] = idx[b], idx[result]
        elif _gt(x, idx[a], idx[c]):
            idx[result], idx[c] = idx[c], idx[result]
        else:
            idx[result], idx[a] = idx[a], idx[result]
    elif _gt(x, idx[a], idx[c]):
        idx[result], idx[a] = idx[a], idx[result]
    elif _gt(x, idx[b], idx[c]):
        idx[result], idx[c] = idx[c], idx[result]
    else:
        idx[result], idx[b] = idx[b], idx[result]


@njit(cache=True, nogil=True)
def _partition(x, idx, first, last, pivot):  # type: ignore[no-untyped-def]
    """std::__unguarded_partition."""
    while True:
        while _gt(x, idx[first], idx[pivot]):
            first += 1
        last -= 1
        while _gt(x, idx[pivot], idx[last]):
            last -= 1
        if not first < last:
            return first
        idx[first], idx[last] = idx[last], idx[first]
        first += 1


@njit(cache=True, nogil=True)
def _insertion_sort(x, idx, first, last, guarded):  # type: ignore[no-untyped-def]
    """std::__insertion_sort (guarded) / std::__unguarded_insertion_sort."""
    for i in range(first + 1 if guarded else first, last):
        val = idx[i]
        if guarded and _gt(x, val, idx[first]):
            for j in range(i, first, -1):
                idx[j] = idx[j - 1]
            idx[first] = val
            continue
        j = i
        while _gt(x, val, idx[j - 1]):
            idx[j] = idx[j - 1]
            j -= 1
        idx[j] = val


@njit(cache=True, nogil=True)
def _sort_desc(x, idx):  # type: ignore[no-untyped-def]
    """std::sort(idx, idx + n, x[a] > x[b]) as libstdc++ does it (module docstring)."""
    n = idx.shape[0]
    if n < 2:
        return
    depth = 0
    while (1 << (depth + 1)) <= n:
        depth += 1
    # __introsort_loop with an explicit stack of (first, last, depth_limit)
    stack = np.empty((2 * 64, 3), dtype=np.int64)
    sp = 0
    stack[0, 0], stack[0, 1], stack[0, 2] = 0, n, 2 * depth
    sp = 1
    while sp > 0:
        sp -= 1
        first, last, limit = stack[sp, 0], stack[sp, 1], stack[sp, 2]
        while last - first > _THRESHOLD:
            if limit == 0:
                _heap_sort(x, idx, first, last)
                break
            limit -= 1
            mid = first + (last - first) // 2
            _median_to_first(x, idx, first, first + 1, mid, last - 1)
            cut = _partition(x, idx, first + 1, last, first)
            # recurse on [cut, last) first, then loop on [first, cut): the order only matters
            # for the work done, each range is sorted independently
            stack[sp, 0], stack[sp, 1], stack[sp, 2] = cut, last, limit
            sp += 1
            last = cut
    if n > _THRESHOLD:  # __final_insertion_sort
        _insertion_sort(x, idx, 0, _THRESHOLD, True)
        _insertion_sort(x, idx, _THRESHOLD, n, False)
    else:
        _insertion_sort(x, idx, 0, n, True)


@njit(cache=True, nogil=True)
def top_k_rows(probs, k):  # type: ignore[no-untyped-def]
    """(T, E) float32 -> (T, k) int64: each row's first k indices after ggml_argsort (desc)."""
    t, e = probs.shape
    out = np.empty((t, k), dtype=np.int64)
    idx = np.empty(e, dtype=np.int64)
    for i in range(t):
        for j in range(e):
            idx[j] = j
        _sort_desc(probs[i], idx)
        out[i] = idx[:k]
    return out
