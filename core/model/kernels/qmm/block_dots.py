"""The quantized matmul kernels: y (T, N) = x (T, K) @ W.T for W (N, K) in its GGUF blocks.

What every output element is (the same arithmetic in the decode kernel, core/model/kernels/qmm/decode.py, and the
prefill kernel below, so a row's result
does not depend on the batch it is in, on the kernel chosen or on the thread count):

    acc = 0.0f
    for each block b of the row, in order:              (float32, each operation rounded)
        isum = sum_j sc[j] * dot(q_w[j], q_x[j])        (exact integer)
        term = (d_x * d_w) * float(isum)                (float(int): round to nearest even)
        K mins:   term = term - (d_x * dmin_w) * float(sum_j m[j] * sum(q_x[j]))
        Q8_1 min: term = term + m_w * s_x
        acc = acc + term

The integer dot products are exact however they are computed, and LLVM may not reorder float
operations (no fast-math): the result is the same on every CPU and SIMD width. ggml sums the
same terms, but lane by lane in its SIMD registers, so its float roundings differ from ours in
the last bits (docs/numerics.md).

Few rows of activations: core/model/kernels/qmm/decode.py (the types with a 16-row kernel take
16 weight rows at once: core/model/kernels/qmm/rows.py; the others unpack each weight row once
to int16 codes and dot it with every activation row, `idot`, vpmaddwd).
`mm_prefill`: many rows. The weight row is unpacked once to int16 codes (scales folded in),
and multiplied with the activation codes of 64 tokens at a time in 32-bit integer lanes
(`simd.tile_dot`: vpmaddwd / vpdpwssd), so `isum` is the same exact integer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange

from llamacli.core.model.kernels.qmm.simd import TILE, tile_dot16, tile_dot64
from llamacli.core.model.kernels.qmm.unpack import F16, unpack

_JIT: dict[str, Any] = dict(cache=True, nogil=True, parallel=True)

ROWS_PER_TASK = 16  # weight rows per parallel work item


@njit(cache=True, nogil=True)
def term(act, min_term, dx, d, dmin, isum, msum, s_x):  # type: ignore[no-untyped-def]
    """One block's contribution (see the module docstring)."""
    term = (dx * d) * np.float32(isum)
    if min_term == 2:
        term = term - (dx * dmin) * np.float32(msum)
    elif min_term == 1:
        term = term + dmin * s_x
    return term


@njit(cache=True, nogil=True)
def _unpack_row(kind, wr, nb, qk, nsub, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    """A row as int16 codes with the sub-block scales folded in (|sc * q| <= 4064), so that one
    integer dot per block gives isum = sum_j sc[j] * dot(q_j, x_j); ds, dms, mn per block."""
    unpack(kind, wr, nb, codes, sc, mn, ds, dms)


@njit(cache=True, nogil=True)
def min_sum(mn, xb, t, b):  # type: ignore[no-untyped-def]
    """sum_j m[j] * (sum of the activation codes of sub-block j); xb (T, nb, nsub)."""
    msum = 0
    for j in range(mn.shape[0]):
        msum += mn[j] * xb[t, b, j]
    return msum


@njit(**_JIT)
def mm_prefill(w, kind, qk, nsub, act, min_term, x16, tp, tile, xd, xs, xb, out):  # type: ignore[no-untyped-def]
    """As mm_decode_many for one matrix, with the activations laid out token-fastest: x16 int16
    codes (K / 2, tp, 2) (see simd.tile_dot64), xd (nb, tp) scales, xs (nb, tp) Q8_1 sums, xb (nb, nsub, tp) code
    sums per sub-block; tp a multiple of `tile` (16 or 64; padding tokens are zero); out (T, N).
    The per-block float terms are computed for a whole tile at once (vectorised over tokens),
    with the same operations as `term`."""
    n = w.shape[0]
    k = x16.shape[0] // tp
    t_rows = out.shape[0]
    nb = k // qk
    n_tasks = (n + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(n_tasks):
        wsc = np.empty(k, dtype=np.int16)
        sc = np.ones((nb, nsub), dtype=np.int32)
        mn = np.zeros((nb, nsub), dtype=np.int32)
        ds = np.empty(nb, dtype=np.float32)
        dms = np.empty(nb, dtype=np.float32)
        isum = np.empty(TILE, dtype=np.int32)
        msum = np.empty(TILE, dtype=np.int32)
        acc = np.empty(TILE, dtype=np.float32)
        for r in range(task * ROWS_PER_TASK, min(n, (task + 1) * ROWS_PER_TASK)):
            _unpack_row(kind, w[r], nb, qk, nsub, wsc, sc, mn, ds, dms)
            for t0 in range(0, tp, tile):
                acc[:] = 0.0
                for b in range(nb):
                    if tile == 16:
                        tile_dot16(wsc, b * qk, qk // 2, x16, (b * (qk // 2) * tp + t0) * 2, tp, isum)
                    else:
                        tile_dot64(wsc, b * qk, qk // 2, x16, (b * (qk // 2) * tp + t0) * 2, tp, isum)
                    d = ds[b]
                    dmin = dms[b]
                    xdb = xd[b, t0 : t0 + tile]
                    if min_term == 2:
                        msum[:] = 0
                        for j in range(nsub):
                            mj = mn[b, j]
                            xbj = xb[b, j, t0 : t0 + tile]
                            for tt in range(tile):
                                msum[tt] += mj * xbj[tt]
                        for tt in range(tile):
                            acc[tt] += (xdb[tt] * d) * np.float32(isum[tt]) - (xdb[tt] * dmin) * np.float32(msum[tt])
                    elif min_term == 1:
                        xsb = xs[b, t0 : t0 + tile]
                        for tt in range(tile):
                            acc[tt] += (xdb[tt] * d) * np.float32(isum[tt]) + dmin * xsb[tt]
                    else:
                        for tt in range(tile):
                            acc[tt] += (xdb[tt] * d) * np.float32(isum[tt])
                for tt in range(min(tile, t_rows - t0)):
                    out[t0 + tt, r] = acc[tt]


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
