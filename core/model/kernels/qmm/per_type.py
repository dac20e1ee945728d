"""Kernels compiled once per weight type, and called by address from the parallel loops.

A kernel whose inner loop depends on the weight type (its unpacker, its 16-row kernel, its
block size and min term) is written once as a plain Python function, a *template* reading
those as module globals (`QK`, `XPER`, `OUTER`, `NSUB`, `MIN_TERM`, `BLOCK`, `ROWS16`, `LEGACY`, `unpack_row`,
`rows16`, `legacy_dot`, `packed_dot`). `type_function(template, layout, kind)` compiles it for one type: a
copy of the function whose globals are the type's (numba prunes the branches of the other
types before typing them, the constants being known), as a C function (`numba.cfunc`) with a
disk cache of its own, named after the template and the type (`decode_rows_q4_k`).

Why: numba compiles a callee again inside each of its callers (it links the callee's LLVM
module into the caller's and generates code for all of it), and a parallel loop is four
levels of callers (the loop body, two wrappers, the kernel). A kernel holding every type's
code went through code generation six times; the type functions go through it once, and only
for the types a model has. Each is cached on disk as soon as it is compiled.

The parallel loops call a type function through its address (`CLayout.caller`): each array
passed as its data pointer and shape, then some integers (`CLayout`). They hold no type's
code themselves.
"""

from __future__ import annotations

import types as pytypes
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from llvmlite import ir
from numba import cfunc
from numba.core import types

from llamacli.core.model.kernels.qmm import unpack as U
from llamacli.core.model.kernels.qmm import unpack_lowbit as L
from llamacli.core.model.kernels.qmm import unpack_split as S
from llamacli.core.model.kernels.qmm.packed import PACKED_DOTS
from llamacli.core.model.kernels.qmm.rows import (
    rows_mxfp4, rows_q4_0, rows_q4_1, rows_q4_k, rows_q5_0, rows_q5_1, rows_q5_k, rows_q6_k, rows_q8_0, rows_tq1_0, rows_tq2_0,
)
from llamacli.core.model.kernels.qmm.rows_grid import rows_iq1_m, rows_iq1_s, rows_iq2_s, rows_iq2_xs, rows_iq2_xxs, rows_iq3_s, rows_iq3_xxs
from llamacli.core.model.kernels.qmm.simd import dot_q4_0, dot_q4_1, dot_q5_0, dot_q5_1, dot_q8_0, kernel_intrinsic
from llamacli.core.model.kernels.qmm.weight_types import QUANT_FORMATS, QFormat


@dataclass(frozen=True)
class TypeCode:
    """What a template is compiled with for one weight type."""

    name: str  # "q4_k"
    fmt: QFormat
    unpack: Any  # the row unpacker (core/model/kernels/qmm/unpack.py)
    rows16: Any = None  # the 16-row kernel (core/model/kernels/qmm/rows.py), where the type has one
    legacy_dot: Any = None  # 32-value legacy types: the block dot in registers (simd.py)
    packed_dot: Any = None  # the kernel of its packed matrices, where it has one (packed.py)

    def globals(self) -> dict[str, Any]:
        f = self.fmt
        return dict(
            QK=f.qk, XPER=f.xper, OUTER=f.split if f.outer else 0, NSUB=f.nsub, ACT=f.act, MIN_TERM=f.min_term, BLOCK=f.type_size, ROWS16=self.rows16 is not None,
            LEGACY=self.legacy_dot is not None, unpack_row=self.unpack, rows16=self.rows16, legacy_dot=self.legacy_dot,
            packed_dot=self.packed_dot, Q8_LANES=f.kind == U.Q8_0,
        )


_UNPACK = {
    U.Q4_0: U.unpack_q4_0, U.Q4_1: U.unpack_q4_1, U.Q5_0: U.unpack_q5_0, U.Q5_1: U.unpack_q5_1, U.Q8_0: U.unpack_q8_0,
    U.IQ4_NL: U.unpack_iq4_nl, U.Q2_K: U.unpack_q2_k, U.Q3_K: U.unpack_q3_k, U.Q4_K: U.unpack_q4_k, U.Q5_K: U.unpack_q5_k,
    U.Q6_K: U.unpack_q6_k, U.IQ4_XS: U.unpack_iq4_xs,
    **L.UNPACKERS,
    **S.UNPACKERS,
}
_ROWS16 = {
    U.Q4_0: rows_q4_0, U.Q4_1: rows_q4_1, U.Q5_0: rows_q5_0, U.Q5_1: rows_q5_1, U.Q8_0: rows_q8_0,
    U.Q4_K: rows_q4_k, U.Q5_K: rows_q5_k, U.Q6_K: rows_q6_k, U.MXFP4: rows_mxfp4,
    U.TQ2_0: rows_tq2_0, U.IQ2_XXS: rows_iq2_xxs, U.IQ2_XS: rows_iq2_xs, U.IQ3_XXS: rows_iq3_xxs, U.IQ1_S: rows_iq1_s,
    U.IQ2_S: rows_iq2_s, U.IQ3_S: rows_iq3_s, U.IQ1_M: rows_iq1_m,
    U.TQ1_0: rows_tq1_0,
}
_LEGACY_DOT = {U.Q4_0: dot_q4_0, U.Q4_1: dot_q4_1, U.Q5_0: dot_q5_0, U.Q5_1: dot_q5_1, U.Q8_0: dot_q8_0}

TYPE_CODES: dict[int, TypeCode] = {
    f.kind: TypeCode(qt.name.lower(), f, _UNPACK[f.kind], _ROWS16.get(f.kind), _LEGACY_DOT.get(f.kind), PACKED_DOTS.get(f.kind))
    for qt, f in QUANT_FORMATS.items()
}
ROWS16_KINDS = frozenset(_ROWS16)  # the types with a 16-row kernel


@dataclass(frozen=True)
class CLayout:
    """The C arguments of a type function: arrays (dtype, dimensions), each as its data pointer
    and its shape, then `n_ints` int64; it returns int64 (1 done; 0 from numba's C wrapper
    when the function raised, after printing the error)."""

    arrays: tuple[tuple[types.Type, int], ...]
    n_ints: int

    @property
    def signature(self) -> Any:
        args = [t for dt, nd in self.arrays for t in (types.CPointer(dt),) + (types.int64,) * nd]
        return types.int64(*args, *([types.int64] * self.n_ints))

    def emit_call(self, context: Any, builder: Any, signature: Any, args: Any) -> Any:
        """Code calling the function at address args[0] with the arrays and integers args[1:]."""
        i64 = ir.IntType(64)
        cargs = []
        for i, (dt, nd) in enumerate(self.arrays, start=1):
            aty = signature.args[i]
            assert aty.ndim == nd and aty.dtype == dt, (aty, dt, nd)
            arr = context.make_array(aty)(context, builder, args[i])
            cargs.append(builder.bitcast(arr.data, context.get_value_type(types.CPointer(dt))))
            cargs.extend(builder.extract_value(arr.shape, d) for d in range(nd))
        for v in args[1 + len(self.arrays):]:
            cargs.append(builder.sext(v, i64) if v.type != i64 else v)
        sig = self.signature
        fnty = ir.FunctionType(context.get_value_type(sig.return_type), [context.get_value_type(a) for a in sig.args])
        assert [a.type for a in cargs] == list(fnty.args)
        return builder.call(builder.inttoptr(args[0], fnty.as_pointer()), cargs)


def _bound(template: Callable[..., Any], kind: int) -> Any:
    """`template` with type `kind`'s values as its globals, named after both (numba names the
    cache file after it)."""
    tc = TYPE_CODES[kind]
    g = dict(template.__globals__)
    g.update(tc.globals())
    fn = pytypes.FunctionType(template.__code__, g, f"{template.__name__}_{tc.name}")
    fn.__qualname__ = fn.__name__
    fn.__doc__ = template.__doc__
    return fn


_held: set[tuple[str, int]] = set()  # (template, type) compiled or loaded in this process


@lru_cache(maxsize=None)
def type_function(template: Callable[..., Any], layout: CLayout, kind: int) -> Any:
    """`template` compiled for weight type `kind` (a numba CFunc), loaded from the disk cache
    or compiled (and cached) now."""
    f = cfunc(layout.signature, nogil=True, cache=True)(_bound(template, kind))
    _held.add((template.__name__, kind))
    return f


def cached(template: Callable[..., Any], kind: int) -> bool:
    """Whether `template`'s function for type `kind` is in this process or in the disk cache."""
    if (template.__name__, kind) in _held:
        return True
    from numba.core.caching import FunctionCache

    try:
        return bool(FunctionCache(_bound(template, kind))._cache_file._load_index())  # numba's index of cached signatures
    except Exception:  # noqa: BLE001  (private API: assume not)
        return False


def addresses(template: Callable[..., Any], layout: CLayout, kinds: tuple[int, ...]) -> tuple[int, ...]:
    """The addresses of `template`'s functions for these types (compiling what is missing)."""
    return tuple(type_function(template, layout, k).address for k in kinds)


def caller(layout: CLayout) -> Any:
    """An intrinsic `call(address, *arrays, *ints) -> int64` calling a type function of this
    layout (numba intrinsics take a fixed number of arguments: one per count of integers)."""
    if layout.n_ints == 2:

        @kernel_intrinsic
        def call2(typingctx: Any, fn: Any, a0: Any, a1: Any, a2: Any, a3: Any, a4: Any, a5: Any, i0: Any, i1: Any) -> Any:
            return types.int64(fn, a0, a1, a2, a3, a4, a5, i0, i1), layout.emit_call

        return call2
    if layout.n_ints == 4:

        @kernel_intrinsic
        def call4(
            typingctx: Any, fn: Any, a0: Any, a1: Any, a2: Any, a3: Any, a4: Any, a5: Any, i0: Any, i1: Any, i2: Any, i3: Any
        ) -> Any:
            return types.int64(fn, a0, a1, a2, a3, a4, a5, i0, i1, i2, i3), layout.emit_call

        return call4
    raise ValueError(f"no caller for {layout.n_ints} integers")
