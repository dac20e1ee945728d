"""The decode kernel: few activation rows against a weight matrix, one compiled function per
weight type.

`decode_rows` below is written once. For each weight type it is compiled with that type's
block layout, unpacker and 16-row kernel bound as its globals (numba drops the branches of the
other types before compiling: `ROWS16`, `LEGACY`, `QK`, `MIN_TERM` are constants), as a C
function (`numba.cfunc`) with a disk cache of its own. So a model compiles only the types it
has, each type's code is compiled once (numba compiles a function's callees again inside each
caller: a kernel reached through five levels of callers was compiled five times), and each
type reaches the disk cache as soon as it is compiled: a first start killed part-way leaves
the types it finished to the next one.

`mm_decode_many` is the parallel loop over work items; it calls each matrix's type function
through its address (`call_decode`), so it contains no type's code and compiles in a second.

The arithmetic is block_dots.py's (module docstring there): the 16-row kernels for the types
that have one (core/model/kernels/qmm/rows.py), then the rows left over one at a time: the
32-value legacy types dot each block in registers, the others unpack a row to int16 codes with
the sub-block scales folded in and dot it with every activation row.
"""

from __future__ import annotations

import types as pytypes
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from llvmlite import ir
from numba import cfunc, njit, prange
from numba.core import types
from numba.np.numpy_support import carray

from llamacli.core.model.kernels.qmm import unpack as U
from llamacli.core.model.kernels.qmm.block_dots import min_sum, term
from llamacli.core.model.kernels.qmm.rows import ROWS, rows_q4_0, rows_q4_1, rows_q4_k, rows_q5_0, rows_q5_1, rows_q5_k, rows_q6_k, rows_q8_0
from llamacli.core.model.kernels.qmm.simd import dot_q4_0, dot_q4_1, dot_q5_0, dot_q5_1, idot32, idot_w16_32, idot_w16_256, kernel_intrinsic
from llamacli.core.model.kernels.qmm.unpack import f16_at
from llamacli.core.model.kernels.qmm.weight_types import QUANT_FORMATS, QFormat

# Activation rows per call of a 16-row kernel: their accumulators (16 floats each) and codes
# stay in the first cache levels while a group's blocks are unpacked once for all of them.
TOKENS_PER_CALL = 64
_NO_SUMS = np.zeros((1, 1, 1), dtype=np.int32)


@njit(cache=True, nogil=True)
def _dot_q8_0(wr, o, xt, xo):  # type: ignore[no-untyped-def]
    """The integer dot of the Q8_0 block at byte o of row wr with xt[xo : xo + 32]."""
    return idot32(wr.view(np.int8), o + 2, xt, xo)


@dataclass(frozen=True)
class TypeCode:
    """What `decode_rows` is compiled with for one weight type."""

    name: str
    fmt: QFormat
    block_bytes: int
    unpack: Any  # the row unpacker (core/model/kernels/qmm/unpack.py)
    rows16: Any = None  # the 16-row kernel, where the type has one
    legacy_dot: Any = None  # 32-value legacy types: the block dot in registers


_UNPACK = {
    U.Q4_0: U.unpack_q4_0, U.Q4_1: U.unpack_q4_1, U.Q5_0: U.unpack_q5_0, U.Q5_1: U.unpack_q5_1, U.Q8_0: U.unpack_q8_0,
    U.IQ4_NL: U.unpack_iq4_nl, U.Q2_K: U.unpack_q2_k, U.Q3_K: U.unpack_q3_k, U.Q4_K: U.unpack_q4_k, U.Q5_K: U.unpack_q5_k,
    U.Q6_K: U.unpack_q6_k, U.IQ4_XS: U.unpack_iq4_xs,
}
_ROWS16 = {
    U.Q4_0: rows_q4_0, U.Q4_1: rows_q4_1, U.Q5_0: rows_q5_0, U.Q5_1: rows_q5_1, U.Q8_0: rows_q8_0,
    U.Q4_K: rows_q4_k, U.Q5_K: rows_q5_k, U.Q6_K: rows_q6_k,
}
_LEGACY_DOT = {U.Q4_0: dot_q4_0, U.Q4_1: dot_q4_1, U.Q5_0: dot_q5_0, U.Q5_1: dot_q5_1, U.Q8_0: _dot_q8_0}

TYPE_CODES: dict[int, TypeCode] = {
    f.kind: TypeCode(qt.name.lower(), f, f.type_size, _UNPACK[f.kind], _ROWS16.get(f.kind), _LEGACY_DOT.get(f.kind))
    for qt, f in QUANT_FORMATS.items()
}
ROWS16_KINDS = frozenset(_ROWS16)  # the types with a 16-row kernel

# Bound per type (TypeCode) when `decode_rows` is compiled; these module-level values are
# never compiled (`decode_rows` itself is not a kernel).
ROWS16 = LEGACY = False
QK = NSUB = ACT = MIN_TERM = BLOCK = 0
rows16: Any = None
legacy_dot: Any = None
unpack_row: Any = None

# The C signature of a type function: each array as its data pointer and its shape, then the
# first and end row. Arrays (name, dtype, dimensions), in order:
_ARRAYS = (("w", types.uint8, 2), ("xc", types.int8, 2), ("xd", types.float32, 2), ("xs", types.float32, 2),
           ("xb", types.int32, 3), ("out", types.float32, 2))
C_SIG = types.int64(*[t for _, dt, nd in _ARRAYS for t in (types.CPointer(dt),) + (types.int64,) * nd], types.int64, types.int64)


def decode_rows(w_p, w_n, w_k, xc_p, xc_t, xc_k, xd_p, xd_t, xd_nb, xs_p, xs_t, xs_nb, xb_p, xb_t, xb_nb, xb_ns,  # type: ignore[no-untyped-def]
                out_p, out_t, out_n, r0, r1):
    """Rows r0..r1 of out (T, N) = x @ W.T for W (N, row bytes) of one type (module docstring):
    xc (T, K) int8 codes; xd (T, nb) scales; xs (T, K/32) Q8_1 sums or empty; xb (T, nb, nsub)
    int32 code sums per sub-block or empty. Returns 1 (0 from numba's C wrapper if it raised)."""
    w = carray(w_p, (w_n, w_k))
    xc = carray(xc_p, (xc_t, xc_k))
    xd = carray(xd_p, (xd_t, xd_nb))
    xs = carray(xs_p, (xs_t, xs_nb))
    xb = carray(xb_p, (xb_t, xb_nb, xb_ns))
    out = carray(out_p, (out_t, out_n))
    t_rows = xc_t
    k = xc_k
    nb = k // QK
    if ROWS16:
        acc = np.empty((TOKENS_PER_CALL, ROWS), dtype=np.float32)  # the 16-row kernel's scratch
        while r0 + ROWS <= r1:
            for t0 in range(0, t_rows, TOKENS_PER_CALL):
                t1 = min(t_rows, t0 + TOKENS_PER_CALL)
                xc_, xd_, out_ = xc[t0:t1], xd[t0:t1], out[t0:t1]
                xs_ = xs[t0:t1] if xs.shape[0] > 0 else xd_  # Q8_1 sums, read by Q4_1/Q5_1 only
                xb_ = xb[t0:t1] if xb.shape[0] > 0 else _NO_SUMS  # sub-block sums, read by Q4_K/Q5_K only
                rows16(w, r0, nb, xc_, xd_, xs_, xb_, out_, acc)
            r0 += ROWS
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
            for b in range(nb):
                if QK == 256:
                    isum = idot_w16_256(codes, b * 256, xt, b * 256)
                else:
                    isum = idot_w16_32(codes, b * 32, xt, b * 32)
                msum = min_sum(mn[b], xb, t, b) if MIN_TERM == 2 else 0
                s_x = xs[t, b] if MIN_TERM == 1 else np.float32(0.0)
                acc1 += term(ACT, MIN_TERM, xd[t, b], ds[b], dms[b], isum, msum, s_x)
            out[t, r] = acc1
    return 1


def _bound(tc: TypeCode) -> Any:
    """`decode_rows` with the type's values as its globals, under a name of its own (numba
    names the cache file after it)."""
    g = dict(decode_rows.__globals__)
    g.update(
        ROWS16=tc.rows16 is not None, LEGACY=tc.legacy_dot is not None, QK=tc.fmt.qk, NSUB=tc.fmt.nsub, ACT=tc.fmt.act,
        MIN_TERM=tc.fmt.min_term, BLOCK=tc.block_bytes, rows16=tc.rows16, legacy_dot=tc.legacy_dot, unpack_row=tc.unpack,
    )
    fn = pytypes.FunctionType(decode_rows.__code__, g, f"decode_{tc.name}")
    fn.__qualname__ = fn.__name__
    fn.__doc__ = decode_rows.__doc__
    return fn


_compiled: set[int] = set()  # the types whose function this process holds


@lru_cache(maxsize=None)
def type_function(kind: int) -> Any:
    """The compiled decode function of weight type `kind` (a numba CFunc), loaded from the disk
    cache or compiled (and cached) now."""
    f = cfunc(C_SIG, nogil=True, cache=True)(_bound(TYPE_CODES[kind]))
    _compiled.add(kind)
    return f


def cached(kind: int) -> bool:
    """Whether type `kind`'s function is in this process or in the disk cache."""
    if kind in _compiled:
        return True
    from numba.core.caching import FunctionCache

    try:
        return bool(FunctionCache(_bound(TYPE_CODES[kind]))._cache_file._load_index())  # numba's index of cached signatures
    except Exception:  # noqa: BLE001  (private API: assume not)
        return False


@lru_cache(maxsize=256)
def addresses(kinds: tuple[int, ...]) -> np.ndarray:
    """The addresses of the type functions of matrices of these types (compiling the missing)."""
    a = np.array([type_function(k).address for k in kinds], dtype=np.int64)
    a.flags.writeable = False
    return a


@kernel_intrinsic
def call_decode(typingctx: Any, fn: Any, w: Any, xc: Any, xd: Any, xs: Any, xb: Any, out: Any, r0: Any, r1: Any) -> Any:
    """fn(w, xc, xd, xs, xb, out, r0, r1) for fn the address of a type function (C_SIG: each
    array passed as its data pointer and shape)."""
    sig = types.int64(fn, w, xc, xd, xs, xb, out, r0, r1)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i64 = ir.IntType(64)
        cargs = []
        for i, (_, dt, nd) in enumerate(_ARRAYS, start=1):
            aty = signature.args[i]
            assert aty.ndim == nd and aty.dtype == dt, (aty, dt, nd)
            arr = context.make_array(aty)(context, builder, args[i])
            cargs.append(builder.bitcast(arr.data, context.get_value_type(types.CPointer(dt))))
            cargs.extend(builder.extract_value(arr.shape, d) for d in range(nd))
        for v in args[7:9]:
            cargs.append(builder.sext(v, i64) if v.type != i64 else v)
        fnty = ir.FunctionType(context.get_value_type(C_SIG.return_type), [context.get_value_type(a) for a in C_SIG.args])
        assert [a.type for a in cargs] == list(fnty.args)
        return builder.call(builder.inttoptr(args[0], fnty.as_pointer()), cargs)

    return sig, codegen


@njit(cache=True, nogil=True, parallel=True)
def mm_decode_many(fns, ws, xc, xd, xs, xb, outs, tasks):  # type: ignore[no-untyped-def]
    """Matrices of the same input (one, or Q/K/V, gate/up) in one parallel loop: ws (N_i, row
    bytes) uint8 and outs (T, N_i) float32 are tuples (matrix.MANY of them); fns[i] the address
    of matrix i's type function (`addresses`); tasks (n, 3) rows of (matrix, first row, end row).
    xc (T, K) int8 codes; xd (T, nb) scales; xs (T, K/32) Q8_1 sums; xb (T, nb, nsub) int32 code
    sums per sub-block (K mins only). Returns the number of work items done (n unless one failed)."""
    done = 0
    for i in prange(tasks.shape[0]):
        mi = tasks[i, 0]
        done += call_decode(fns[mi], ws[mi], xc, xd, xs, xb, outs[mi], tasks[i, 1], tasks[i, 2])
    return done
