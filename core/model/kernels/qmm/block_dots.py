"""The quantized matmul kernels: y (T, N) = x (T, K) @ W.T for W (N, K) in its GGUF blocks.

What every output element is (the same arithmetic in every kernel, so a row's result
does not depend on the batch it is in, on the kernel chosen or on the thread count):

    acc = 0.0f
    for each block b of the row, in order:              (float32, each operation rounded)
        isum = sum_j sc[j] * dot(q_w[j], q_x[j])        (exact integer)
        term = (d_x * d_w) * float(isum)                (float(int): round to nearest even)
        K mins:   term = term - (d_x * dmin_w) * float(sum_j m[j] * sum(q_x[j]))
        Q8_1 min: term = term + m_w * s_x
        acc = acc + term

Q1_0 and Q2_0 (one fp16 d_w over 4 or 2 Q8_0 activation blocks) keep ggml's order of the scale
terms instead: inner = sum over the ggml block's kernel blocks of d_x * float(isum), then
acc = acc + d_w * inner (weight_types.QFormat.outer).

Q8_0 weights are the exception: they follow ggml's own order (eight FMA lanes per row,
core/model/kernels/qmm/lanes.py), so that they give llama.cpp's bits.

The integer dot products are exact however they are computed, and LLVM may not reorder float
operations (no fast-math): the result is the same on every CPU and SIMD width. ggml sums the
same terms, but lane by lane in its SIMD registers, so its float roundings differ from ours in
the last bits (docs/numerics.md).

The kernels, compiled once per weight type (core/model/kernels/qmm/per_type.py): few rows of
activations, core/model/kernels/qmm/decode.py (16 weight rows at once for the types that have a
16-row kernel, core/model/kernels/qmm/rows.py); many rows of a type without one,
core/model/kernels/qmm/prefill.py (64 tokens at a time in 32-bit integer lanes). Here: the
float kernel (`mm_float`) and the pieces of the arithmetic the others share.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange

from llamacli.core.model.kernels.qmm.unpack import F16

_JIT: dict[str, Any] = dict(cache=True, nogil=True, parallel=True)

ROWS_PER_TASK = 16  # weight rows per parallel work item


@njit(cache=True, nogil=True)
def term(act, min_term, dx, d, dmin, isum, msum, s_x):  # type: ignore[no-untyped-def]
    """One block's contribution (see the module docstring)."""
    y = (dx * d) * np.float32(isum)
    if min_term == 2:
        y = y - (dx * dmin) * np.float32(msum)
    elif min_term == 1:
        y = y + dmin * s_x
    return y


@njit(cache=True, nogil=True)
def min_sum(mn, xb, t, b):  # type: ignore[no-untyped-def]
    """sum_j m[j] * (sum of the activation codes of sub-block j); xb (T, nb, nsub)."""
    msum = 0
    for j in range(mn.shape[0]):
        msum += mn[j] * xb[t, b, j]
    return msum


LANES = 16


@njit(cache=True, nogil=True)
def _row_to_f32(ftype, wr, k, wf):  # type: ignore[no-untyped-def]
    """A float weight row (bytes) -> wf (k,) float32. ftype 0 F32, 1 F16, 2 BF16."""
    if ftype == 1:
        for i in range(k):
            wf[i] = F16[np.int64(wr[2 * i]) | (np.int64(wr[2 * i + 1]) << 8)]
    elif ftype == 2:
        bits = wf.view(np.uint32)
        for i in range(k):
            bits[i] = (np.uint32(wr[2 * i]) << 16) | (np.uint32(wr[2 * i + 1]) << 24)
    else:
        src = wr.view(np.float32)
        for i in range(k):
            wf[i] = src[i]


@njit(**_JIT)
def mm_float(w, ftype, x, out):  # type: ignore[no-untyped-def]
    """Float weights: out (T, N) = x (T, K) @ W.T, W (N, K) as F32/F16/BF16 bytes (N, row bytes).

    Fixed order: 16 lanes, lane l summing the products of elements l, l + 16, ... in order
    (product and sum each rounded), then lanes added pairwise (l + 8, + 4, + 2, + 1)."""
    n = w.shape[0]
    t_rows, k = x.shape
    n_tasks = (n + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    k16 = k - k % LANES
    for task in prange(n_tasks):
        wf = np.empty(k, dtype=np.float32)
        lane = np.empty(LANES, dtype=np.float32)
        for r in range(task * ROWS_PER_TASK, min(n, (task + 1) * ROWS_PER_TASK)):
            _row_to_f32(ftype, w[r], k, wf)
            for t in range(t_rows):
                xt = x[t]
                lane[:] = 0.0
                for i0 in range(0, k16, LANES):
                    for l in range(LANES):
                        lane[l] += wf[i0 + l] * xt[i0 + l]
                for i in range(k16, k):
                    lane[i - k16] += wf[i] * xt[i]
                h = LANES // 2
                while h >= 1:
                    for l in range(h):
                        lane[l] += lane[l + h]
                    h //= 2
                out[t, r] = lane[0]
