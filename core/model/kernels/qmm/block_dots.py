"""The quantized matmul kernels: y (T, N) = x (T, K) @ W.T for W (N, K) in its GGUF blocks.

What every output element is (the same arithmetic in both kernels below, so a row's result
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

`mm_decode_many`: few rows of activations. 32-value legacy types take 16 weight rows at once
(core/model/kernels/qmm/rows.py: the 16 rows' block sums reduced together, the float terms one vector
operation per block, the next rows prefetched); the others unpack each weight row once to
int16 codes and dot it with every activation row (`idot`, vpmaddwd).
`mm_prefill`: many rows. The weight row is unpacked once to int16 codes (scales folded in),
and multiplied with the activation codes of 64 tokens at a time in 32-bit integer lanes
(`simd.tile_dot`: vpmaddwd / vpdpwssd), so `isum` is the same exact integer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange

from llamacli.core.model.kernels.qmm.rows import ROWS, rows_q4_0, rows_q4_1, rows_q4_k, rows_q5_0, rows_q5_1, rows_q5_k, rows_q6_k, rows_q8_0
from llamacli.core.model.kernels.qmm.simd import TILE, dot_q4_0, dot_q4_1, dot_q5_0, dot_q5_1, idot32, idot_w16_32, idot_w16_256, tile_dot16, tile_dot64
from llamacli.core.model.kernels.qmm.unpack import F16, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0, f16_at, unpack

_JIT: dict[str, Any] = dict(cache=True, nogil=True, parallel=True)

ROWS_PER_TASK = 16  # weight rows per parallel work item


@njit(cache=True, nogil=True)
def _term(act, min_term, dx, d, dmin, isum, msum, s_x):  # type: ignore[no-untyped-def]
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
def _min_sum(mn, xb, t, b):  # type: ignore[no-untyped-def]
    """sum_j m[j] * (sum of the activation codes of sub-block j); xb (T, nb, nsub)."""
    msum = 0
    for j in range(mn.shape[0]):
        msum += mn[j] * xb[t, b, j]
    return msum


@njit(cache=True, nogil=True)
def _legacy_isums(kind, wr, nb, xt, isums):  # type: ignore[no-untyped-def]
    """isums[b] = the integer dot of block b of a 32-value legacy row with xt, in registers
    (no unpacking); one loop per type so that nothing is decided per block."""
    if kind == Q8_0:
        wi = wr.view(np.int8)
        for b in range(nb):
            isums[b] = idot32(wi, b * 34 + 2, xt, b * 32)
    elif kind == Q5_0:
        for b in range(nb):
            isums[b] = dot_q5_0(wr, b * 22, xt, b * 32)
    elif kind == Q4_0:
        for b in range(nb):
            isums[b] = dot_q4_0(wr, b * 18, xt, b * 32)
    elif kind == Q4_1:
        for b in range(nb):
            isums[b] = dot_q4_1(wr, b * 20, xt, b * 32)
    else:
        for b in range(nb):
            isums[b] = dot_q5_1(wr, b * 24, xt, b * 32)


@njit(cache=True, nogil=True)
def _decode_legacy_row(kind, wr, nb, act, min_term, xc, xd, xs, out, r, isums):  # type: ignore[no-untyped-def]
    """Row r of a 32-value block type; the float terms as `_term`, in block order."""
    size = 34 if kind == Q8_0 else 18 if kind == Q4_0 else 20 if kind == Q4_1 else 22 if kind == Q5_0 else 24
    for t in range(xc.shape[0]):
        _legacy_isums(kind, wr, nb, xc[t], isums)
        acc = np.float32(0.0)
        if min_term == 1:
            for b in range(nb):
                o = b * size
                acc += (xd[t, b] * f16_at(wr, o)) * np.float32(isums[b]) + f16_at(wr, o + 2) * xs[t, b]
        else:
            for b in range(nb):
                acc += (xd[t, b] * f16_at(wr, b * size)) * np.float32(isums[b])
        out[t, r] = acc


_NO_SUMS = np.zeros((1, 1, 1), dtype=np.int32)
# Activation rows per call of a 16-row kernel: their accumulators (16 floats each) and codes
# stay in the first cache levels while a group's blocks are unpacked once for all of them.
TOKENS_PER_CALL = 64


@njit(cache=True, nogil=True)
def _rows16(kind, w, r, nb, xc, xd, xs, xb, out, acc):  # type: ignore[no-untyped-def]
    """Rows r..r+16 of out (T, N), 16 rows at once for every activation row (core/model/kernels/qmm/rows.py),
    for the types that `has_rows16`; acc (TOKENS_PER_CALL, ROWS) float32 scratch."""
    for t0 in range(0, xc.shape[0], TOKENS_PER_CALL):
        t1 = min(xc.shape[0], t0 + TOKENS_PER_CALL)
        xc_, xd_, out_ = xc[t0:t1], xd[t0:t1], out[t0:t1]
        xs_ = xs[t0:t1] if xs.shape[0] > 0 else xd_  # Q8_1 sums, read by Q4_1/Q5_1 only
        xb_ = xb[t0:t1] if xb.shape[0] > 0 else _NO_SUMS  # sub-block sums, read by Q4_K/Q5_K only
        if kind == Q8_0:
            rows_q8_0(w, r, nb, xc_, xd_, xs_, xb_, out_, acc)
        elif kind == Q5_0:
            rows_q5_0(w, r, nb, xc_, xd_, xs_, xb_, out_, acc)
        elif kind == Q4_0:
            rows_q4_0(w, r, nb, xc_, xd_, xs_, xb_, out_, acc)
        elif kind == Q4_1:
            rows_q4_1(w, r, nb, xc_, xd_, xs_, xb_, out_, acc)
        elif kind == Q5_1:
            rows_q5_1(w, r, nb, xc_, xd_, xs_, xb_, out_, acc)
        elif kind == Q4_K:
            rows_q4_k(w, r, nb, xc_, xd_, xs_, xb_, out_, acc)
        elif kind == Q5_K:
            rows_q5_k(w, r, nb, xc_, xd_, xs_, xb_, out_, acc)
        else:
            rows_q6_k(w, r, nb, xc_, xd_, xs_, xb_, out_, acc)


ROWS16_KINDS = frozenset((Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K))


@njit(cache=True, nogil=True)
def has_rows16(kind):  # type: ignore[no-untyped-def]
    """The types with a 16-row kernel (ROWS16_KINDS)."""
    return kind <= Q8_0 or kind == Q4_K or kind == Q5_K or kind == Q6_K


@njit(cache=True, nogil=True)
def _decode_rows(w, kind, qk, nsub, act, min_term, xc, xd, xs, xb, out, r0, r1):  # type: ignore[no-untyped-def]
    """Rows r0..r1 of out (T, N) for w (N, row bytes); see mm_decode_many."""
    t_rows = xc.shape[0]
    k = xc.shape[1]
    nb = k // qk
    if has_rows16(kind):
        acc = np.empty((TOKENS_PER_CALL, ROWS), dtype=np.float32)
        while r0 + ROWS <= r1:
            _rows16(kind, w, r0, nb, xc, xd, xs, xb, out, acc)
            r0 += ROWS
    if kind == Q8_0 or kind == Q4_0 or kind == Q4_1 or kind == Q5_0 or kind == Q5_1:
        isums = np.empty(nb, dtype=np.int32)
        for r in range(r0, r1):
            _decode_legacy_row(kind, w[r], nb, act, min_term, xc, xd, xs, out, r, isums)
        return
    codes = np.empty(k, dtype=np.int16)
    sc = np.ones((nb, nsub), dtype=np.int32)
    mn = np.zeros((nb, nsub), dtype=np.int32)
    ds = np.empty(nb, dtype=np.float32)
    dms = np.empty(nb, dtype=np.float32)
    for r in range(r0, r1):
        _unpack_row(kind, w[r], nb, qk, nsub, codes, sc, mn, ds, dms)
        for t in range(t_rows):
            xt = xc[t]
            acc = np.float32(0.0)
            for b in range(nb):
                if qk == 256:
                    isum = idot_w16_256(codes, b * 256, xt, b * 256)
                else:
                    isum = idot_w16_32(codes, b * 32, xt, b * 32)
                msum = _min_sum(mn[b], xb, t, b) if min_term == 2 else 0
                s_x = xs[t, b] if min_term == 1 else np.float32(0.0)
                acc += _term(act, min_term, xd[t, b], ds[b], dms[b], isum, msum, s_x)
            out[t, r] = acc


@njit(**_JIT)
def mm_decode_many(ws, kinds, qk, nsub, act, min_term, xc, xd, xs, xb, outs, tasks):  # type: ignore[no-untyped-def]
    """Matrices of the same input (one, or Q/K/V, gate/up) in one parallel loop: ws (N_i, row
    bytes) uint8 and outs (T, N_i) float32 are tuples (matrix.MANY of them); kinds[i] their types
    (same qk, nsub, activation and min term); tasks (n, 3) rows of (matrix, first row, end row).
    xc (T, K) int8 codes; xd (T, nb) scales; xs (T, K/32) Q8_1 sums; xb (T, nb, nsub) int32 code
    sums per sub-block (K mins only)."""
    for i in prange(tasks.shape[0]):
        mi = tasks[i, 0]
        _decode_rows(ws[mi], kinds[mi], qk, nsub, act, min_term, xc, xd, xs, xb, outs[mi], tasks[i, 1], tasks[i, 2])


@njit(**_JIT)
def mm_prefill(w, kind, qk, nsub, act, min_term, x16, tp, tile, xd, xs, xb, out):  # type: ignore[no-untyped-def]
    """As mm_decode_many for one matrix, with the activations laid out token-fastest: x16 int16
    codes (K / 2, tp, 2) (see simd.tile_dot64), xd (nb, tp) scales, xs (nb, tp) Q8_1 sums, xb (nb, nsub, tp) code
    sums per sub-block; tp a multiple of `tile` (16 or 64; padding tokens are zero); out (T, N).
    The per-block float terms are computed for a whole tile at once (vectorised over tokens),
    with the same operations as `_term`."""
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
