"""The decode kernel: few activation rows against a weight matrix, compiled once per weight type
(core/model/kernels/qmm/per_type.py).

The arithmetic is block_dots.py's (module docstring there; Q8_0: lanes.py's): the 16-row kernels for the types
that have one (core/model/kernels/qmm/rows.py: the 16 rows' block sums reduced together, the
float terms one vector operation per block, the next rows prefetched), then the rows left over
one at a time: Q8_0 in ggml's lane order (core/model/kernels/qmm/lanes.py), the other 32-value
legacy types dot each block in registers, the others unpack a row
to int16 codes with the sub-block scales folded in and dot it with every activation row
(`idot`, vpmaddwd).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
from numba import njit, prange
from numba.core import types
from numba.np.numpy_support import carray

from llamacli.core.model.kernels.qmm import per_type
from llamacli.core.model.kernels.qmm.block_dots import min_sum, term
from llamacli.core.model.kernels.qmm.lanes import LANES, dot_row
from llamacli.core.model.kernels.qmm.per_type import CLayout
from llamacli.core.model.kernels.qmm.rows import ROWS
from llamacli.core.model.kernels.qmm.simd import idot_w16_16, idot_w16_32, idot_w16_256
from llamacli.core.model.kernels.qmm.unpack import f16_at

# Activation rows per call of a 16-row kernel: their accumulators (16 floats each) and codes
# stay in the first cache levels while a group's blocks are unpacked once for all of them.
TOKENS_PER_CALL = 64
_NO_SUMS = np.zeros((1, 1, 1), dtype=np.int32)

# Bound per type when `decode_rows` is compiled (per_type.TypeCode.globals); these module-level
# values are never compiled.
ROWS16 = LEGACY = Q8_LANES = False
QK = NSUB = ACT = MIN_TERM = BLOCK = 0
XPER = 1  # kernel blocks per activation scale (weight_types.QFormat.xper)
OUTER = 0  # Q1_0, Q2_0: kernel blocks per weight scale applied after their sum (QFormat.outer)
rows16: Any = None
legacy_dot: Any = None
packed_dot: Any = None
unpack_row: Any = None

# w (N, row bytes), xc (T, K), xd (T, nb), xs (T, K/32) or empty, xb (T, nb, nsub) or empty,
# out (T, N); then the first and end row.
LAYOUT = CLayout(((types.uint8, 2), (types.int8, 2), (types.float32, 2), (types.float32, 2), (types.int32, 3), (types.float32, 2)), 2)


@njit(cache=True, nogil=True, inline="always")
def _arrays(w_p, w_n, w_k, xc_p, xc_t, xc_k, xd_p, xd_t, xd_nb, xs_p, xs_t, xs_nb, xb_p, xb_t, xb_nb, xb_ns,  # type: ignore[no-untyped-def]
            out_p, out_t, out_n):
    """A type function's arrays (LAYOUT) from their data pointers and shapes."""
    return (carray(w_p, (w_n, w_k)), carray(xc_p, (xc_t, xc_k)), carray(xd_p, (xd_t, xd_nb)), carray(xs_p, (xs_t, xs_nb)),
            carray(xb_p, (xb_t, xb_nb, xb_ns)), carray(out_p, (out_t, out_n)))


def decode_rows(w_p, w_n, w_k, xc_p, xc_t, xc_k, xd_p, xd_t, xd_nb, xs_p, xs_t, xs_nb, xb_p, xb_t, xb_nb, xb_ns,  # type: ignore[no-untyped-def]
                out_p, out_t, out_n, r0, r1):
    """Rows r0..r1 of out (T, N) = x @ W.T for W (N, row bytes) of one type (module docstring):
    xc (T, K) int8 codes; xd (T, nb) scales; xs (T, K/32) Q8_1 sums or empty; xb (T, nb, nsub)
    int32 code sums per sub-block or empty."""
    w, xc, xd, xs, xb, out = _arrays(w_p, w_n, w_k, xc_p, xc_t, xc_k, xd_p, xd_t, xd_nb, xs_p, xs_t, xs_nb, xb_p, xb_t, xb_nb, xb_ns, out_p, out_t, out_n)
    t_rows = xc_t
    k = xc_k
    nb = k // QK
    if ROWS16 and r0 + ROWS <= r1:
        # the 16-row kernel's scratch for several activation rows (one row needs none: `out`
        # stands in, unread): an allocation per work item was a decode step's ~2%
        acc = np.empty((TOKENS_PER_CALL, ROWS * (LANES if Q8_LANES else 1)), dtype=np.float32) if t_rows > 1 else out
        while r0 + ROWS <= r1:
            for t0 in range(0, t_rows, TOKENS_PER_CALL):
                t1 = min(t_rows, t0 + TOKENS_PER_CALL)
                xc_, xd_, out_ = xc[t0:t1], xd[t0:t1], out[t0:t1]
                xs_ = xs[t0:t1] if xs.shape[0] > 0 else xd_  # Q8_1 sums, read by Q4_1/Q5_1 only
                xb_ = xb[t0:t1] if xb.shape[0] > 0 else _NO_SUMS  # sub-block sums, read by Q4_K/Q5_K only
                rows16(w, r0, nb, xc_, xd_, xs_, xb_, out_, acc)
            r0 += ROWS
    if r0 >= r1:
        return 1
    if Q8_LANES:  # ggml's order (lanes.py)
        for r in range(r0, r1):
            for t in range(t_rows):
                out[t, r] = dot_row(w[r], xc[t], xd[t], nb)
        return 1
    if LEGACY:
        isums = np.empty(nb, dtype=np.int32)
        for r in range(r0, r1):
            wr = w[r]
            for t in range(t_rows):
                xt = xc[t]
                for b in range(nb):
                    isums[b] = legacy_dot(wr, b * BLOCK, xt, b * 32)
                acc1 = np.float32(0.0)
                if MIN_TERM == 1:
                    for b in range(nb):
                        o = b * BLOCK
                        acc1 += (xd[t, b] * f16_at(wr, o)) * np.float32(isums[b]) + f16_at(wr, o + 2) * xs[t, b]
                else:
                    for b in range(nb):
                        acc1 += (xd[t, b] * f16_at(wr, b * BLOCK)) * np.float32(isums[b])
                out[t, r] = acc1
        return 1
    codes = np.empty(k, dtype=np.int16)
    sc = np.ones((nb, NSUB), dtype=np.int32)
    mn = np.zeros((nb, NSUB), dtype=np.int32)
    ds = np.empty(nb, dtype=np.float32)
    dms = np.empty(nb, dtype=np.float32)
    for r in range(r0, r1):
        unpack_row(w[r], nb, codes, sc, mn, ds, dms)
        for t in range(t_rows):
            xt = xc[t]
            acc1 = np.float32(0.0)
            inner = np.float32(0.0)
            for b in range(nb):
                if QK == 256:
                    isum = idot_w16_256(codes, b * 256, xt, b * 256)
                elif QK == 16:
                    isum = idot_w16_16(codes, b * 16, xt, b * 16)
                else:
                    isum = idot_w16_32(codes, b * 32, xt, b * 32)
                msum = min_sum(mn[b], xb, t, b) if MIN_TERM == 2 else 0
                s_x = xs[t, b] if MIN_TERM == 1 else np.float32(0.0)
                if OUTER:  # ggml's order: d_w * sum over the ggml block of d_x * isum
                    inner += xd[t, b] * np.float32(isum)
                    if b % OUTER == OUTER - 1:
                        acc1 += ds[b] * inner
                        inner = np.float32(0.0)
                else:
                    acc1 += term(ACT, MIN_TERM, xd[t, b // XPER], ds[b], dms[b], isum, msum, s_x)
            out[t, r] = acc1
    return 1


def decode_packed(w_p, w_n, w_k, xc_p, xc_t, xc_k, xd_p, xd_t, xd_nb, xs_p, xs_t, xs_nb, xb_p, xb_t, xb_nb, xb_ns,  # type: ignore[no-untyped-def]
                  out_p, out_t, out_n, r0, r1):
    """As `decode_rows`, for W packed (core/model/kernels/qmm/packed.py): w (N / 8, nb * R), rows
    r0..r1 multiples of 8 (r1 may be N); xb (T, nb, 1) the activation's code sums per block
    (Q4_0, Q5_0) or empty. Any number of activation rows."""
    w, xc, xd, xs, xb, out = _arrays(w_p, w_n, w_k, xc_p, xc_t, xc_k, xd_p, xd_t, xd_nb, xs_p, xs_t, xs_nb, xb_p, xb_t, xb_nb, xb_ns, out_p, out_t, out_n)
    t_rows = xc_t
    g0, g1 = r0 // 8, (r1 + 7) // 8
    acc = np.empty((TOKENS_PER_CALL, 16), dtype=np.float32) if t_rows > 1 else out  # (one row, Q8_0: unread)
    for t0 in range(0, t_rows, TOKENS_PER_CALL):
        t1 = min(t_rows, t0 + TOKENS_PER_CALL)
        xd_ = xd[t0:t1]
        xs_ = xs[t0:t1] if xs.shape[0] > 0 else xd_  # Q8_1 sums, read by Q4_1/Q5_1 only
        xb_ = xb[t0:t1] if xb.shape[0] > 0 else _NO_SUMS  # block sums, read by Q4_0/Q5_0 only
        packed_dot(w, g0, g1, xc[t0:t1], xd_, xs_, xb_, out[t0:t1], acc)
    return 1


def type_function(kind: int, packed: bool = False) -> Any:
    """The decode function of weight type `kind` (compiled or loaded now, once per process),
    for its matrices as stored or packed."""
    return per_type.type_function(decode_packed if packed else decode_rows, LAYOUT, kind)


def cached(kind: int, packed: bool = False) -> bool:
    return per_type.cached(decode_packed if packed else decode_rows, kind)


@lru_cache(maxsize=256)
def addresses(kinds: tuple[int, ...], packed: bool = False) -> np.ndarray:
    """`mm_decode_many`'s fns for matrices of these types, stored or packed (compiling the
    missing functions)."""
    a = np.array(per_type.addresses(decode_packed if packed else decode_rows, LAYOUT, kinds), dtype=np.int64)
    a.flags.writeable = False
    return a


_call = per_type.caller(LAYOUT)


@njit(cache=True, nogil=True, parallel=True)
def mm_decode_many(fns, ws, xc, xd, xs, xb, outs, tasks):  # type: ignore[no-untyped-def]
    """Matrices of the same input (one, or Q/K/V, gate/up) in one parallel loop: ws (N_i, row
    bytes) uint8 and outs (T, N_i) float32 are tuples (matrix.MANY of them); fns[i] the address
    of matrix i's type function; tasks (n, 3) rows of (matrix, first row, end row). xc (T, K)
    int8 codes; xd (T, nb) scales; xs (T, K/32) Q8_1 sums; xb (T, nb, nsub) int32 code sums per
    sub-block (K mins only). Returns the number of work items done (n unless one failed)."""
    done = 0
    for i in prange(tasks.shape[0]):
        mi = tasks[i, 0]
        done += _call(fns[mi], ws[mi], xc, xd, xs, xb, outs[mi], tasks[i, 1], tasks[i, 2])
    return done
