"""ggml's vectorised exp (ggml_v_expf) and the soft-max sum around it, compiled.

ggml-cpu's soft max (ggml_vec_soft_max_f32, the non-flash-attention path) computes
e = exp(x - max) sixteen lanes at a time with `ggml_v_expf` (ARM's optimized-routines
algorithm, float32, fused multiply-adds), and adds each group of 16 to a float64 sum after
reducing it in float32. `expf_ggml` is that function's arithmetic, operation for operation:

    z = fma(x, 0x1.715476p+0, 0x1.8p23)                 n = z - 0x1.8p23   (x / ln 2, rounded)
    b = fma(-n, 0x1.7f7d1cp-20, fma(-n, 0x1.62e4p-1, x)) (x - n ln 2, in two parts)
    u = b * b
    j = fma(fma(fma(c5, b, c4), u, fma(c3, b, c2)), u, fma(c1, b, 1))
    e = j * 2^n    (scalef: one rounding; 0 where |n| > 192 and n <= 0, inf where n > 192)

Every step is one IEEE operation of float32 (fused multiply-adds through llvm.fma, which is
exactly rounded on every CPU: machines without FMA get libm's `fmaf`), so the value is the
same everywhere, and the same as ggml's on its AVX-512 build. Scaled in float64 (j * 2^n is
exact there), then rounded once to float32, as scalef rounds.

`exp_sum` applies it over a run of scores and returns their float64 sum in ggml's order: each
whole group of 16 reduced in float32 as _mm512_reduce_add_ps does (lanes i + 8, then + 4, then
(0 + 2) + (1 + 3)), the rest one by one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import cgutils, types

from llamacli.core.model.kernels.qmm.simd import kernel_intrinsic

f32 = np.float32


@kernel_intrinsic
def fmaf(typingctx: Any, a: Any, b: Any, c: Any) -> Any:
    """a * b + c with one rounding (float32 operands)."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ft = ir.FloatType()
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ft, [ft, ft, ft]), "llvm.fma.f32")
        return builder.call(fn, list(args))

    return sig, codegen


@kernel_intrinsic
def pow2_f64(typingctx: Any, n: Any) -> Any:
    """2.0 ** n as a float64, for an integer -1022 <= n <= 1023 (its bits: (n + 1023) << 52)."""
    sig = types.float64(types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i64 = ir.IntType(64)
        bits = builder.shl(builder.add(args[0], ir.Constant(i64, 1023)), ir.Constant(i64, 52))
        return builder.bitcast(bits, ir.DoubleType())

    return sig, codegen


def _hex(v: str) -> np.float32:
    return f32(float.fromhex(v))


_R = _hex("0x1.8p23")
_LOG2E = _hex("0x1.715476p+0")
_LN2_HI = _hex("0x1.62e4p-1")
_LN2_LO = _hex("0x1.7f7d1cp-20")
_C5 = _hex("0x1.0e4020p-7")
_C4 = _hex("0x1.573e2ep-5")
_C3 = _hex("0x1.555e66p-3")
_C2 = _hex("0x1.fffdb6p-2")
_C1 = _hex("0x1.ffffecp-1")


@njit(cache=True, nogil=True, inline="always")
def expf_ggml(x):  # type: ignore[no-untyped-def]
    """ggml_v_expf's value for one float32 x (module docstring)."""
    z = fmaf(x, _LOG2E, _R)
    n = z - _R
    b = fmaf(-n, _LN2_LO, fmaf(-n, _LN2_HI, x))
    u = b * b
    j = fmaf(fmaf(fmaf(_C5, b, _C4), u, fmaf(_C3, b, _C2)), u, fmaf(_C1, b, f32(1.0)))
    if abs(n) > f32(192.0):  # also NaN -> NaN below (the comparison is false)
        return f32(np.inf) if n > f32(0.0) else f32(0.0)
    return f32(np.float64(j) * pow2_f64(np.int64(n)))


@njit(cache=True, nogil=True)
def exp_sum(s, o, n, m):  # type: ignore[no-untyped-def]
    """s[o + i] = expf_ggml(s[o + i] - m) for i < n; returns their sum (float64, module order)."""
    for i in range(n):
        s[o + i] = expf_ggml(s[o + i] - m)
    total = 0.0
    g = n - n % 16
    for c in range(o, o + g, 16):
        # _mm512_reduce_add_ps: 16 -> 8 -> 4 lanes, then (0 + 2) + (1 + 3)
        t0 = (s[c + 8] + s[c]) + (s[c + 12] + s[c + 4])
        t1 = (s[c + 9] + s[c + 1]) + (s[c + 13] + s[c + 5])
        t2 = (s[c + 10] + s[c + 2]) + (s[c + 14] + s[c + 6])
        t3 = (s[c + 11] + s[c + 3]) + (s[c + 15] + s[c + 7])
        total += np.float64((t0 + t2) + (t1 + t3))
    for i in range(o + g, o + n):
        total += np.float64(s[i])
    return total
