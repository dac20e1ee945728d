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

`exp_groups` is the same arithmetic on sixteen lanes at once (LLVM vector operations, one per
step: the same bits), and `exp_sum` applies it over a run of scores and returns their float64 sum in ggml's order: each
whole group of 16 reduced in float32 as _mm512_reduce_add_ps does (lanes i + 8, then + 4, then
(0 + 2) + (1 + 3)), the rest one by one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import cgutils, types

from llamacli.core.model.kernels.qmm.fsimd import pairwise_sum
from llamacli.core.model.kernels.qmm.simd import kernel_intrinsic

f32 = np.float32
LANES = 16


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


def _vexp(builder: Any, x: Any) -> Any:
    """`expf_ggml` on a <16 x float> vector: the same operations lane by lane (so the same bits)."""
    vt = x.type
    f64t = ir.DoubleType()
    i64v, f64v = ir.VectorType(ir.IntType(64), LANES), ir.VectorType(f64t, LANES)
    fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt, vt, vt]), "llvm.fma.v16f32")
    fabs = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt]), "llvm.fabs.v16f32")

    def c(v: np.float32) -> Any:
        return ir.Constant(vt, [float(v)] * LANES)

    z = builder.call(fma, [x, c(_LOG2E), c(_R)])
    n = builder.fsub(z, c(_R))
    mn = builder.fneg(n)
    b = builder.call(fma, [mn, c(_LN2_LO), builder.call(fma, [mn, c(_LN2_HI), x])])
    u = builder.fmul(b, b)
    p = builder.call(fma, [builder.call(fma, [c(_C5), b, c(_C4)]), u, builder.call(fma, [c(_C3), b, c(_C2)])])
    j = builder.call(fma, [p, u, builder.call(fma, [c(_C1), b, c(f32(1.0))])])
    small = builder.fcmp_ordered("<=", builder.call(fabs, [n]), c(f32(192.0)))  # false for NaN too
    ni = builder.fptosi(builder.select(small, n, c(f32(0.0))), i64v)  # NaN: 2^0, j is NaN anyway
    bits = builder.shl(builder.add(ni, ir.Constant(i64v, [1023] * LANES)), ir.Constant(i64v, [52] * LANES))
    e = builder.fptrunc(builder.fmul(builder.fpext(j, f64v), builder.bitcast(bits, f64v)), vt)
    big = builder.select(builder.fcmp_ordered(">", n, c(f32(0.0))), c(f32(np.inf)), c(f32(0.0)))
    out = builder.select(builder.fcmp_ordered(">", builder.call(fabs, [n]), c(f32(192.0))), big, e)
    return out


@kernel_intrinsic
def exp_groups(typingctx: Any, s: Any, o: Any, g: Any, m: Any) -> Any:
    """s[o + i] = expf_ggml(s[o + i] - m) for i < 16 g, sixteen lanes at a time; returns the
    float64 sum of each group of 16 reduced in float32 as _mm512_reduce_add_ps does
    (fsimd.pairwise_sum), groups in order."""
    sig = types.float64(s, o, g, types.float32)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i64, f64t = ir.IntType(64), ir.DoubleType()
        vt = ir.VectorType(ir.FloatType(), LANES)
        sa = signature.args
        base = builder.gep(context.make_array(sa[0])(context, builder, args[0]).data, [context.cast(builder, args[1], sa[1], types.int64)])
        g_ = context.cast(builder, args[2], sa[2], types.int64)
        mv = builder.shuffle_vector(
            builder.insert_element(ir.Constant(vt, ir.Undefined), args[3], ir.Constant(ir.IntType(32), 0)),
            ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(ir.IntType(32), LANES), [0] * LANES),
        )
        fn = builder.function
        pre = builder.block
        loop = fn.append_basic_block("exp_groups_loop")
        done = fn.append_basic_block("exp_groups_done")
        builder.cbranch(builder.icmp_signed(">", g_, ir.Constant(i64, 0)), loop, done)
        builder.position_at_end(loop)
        i = builder.phi(i64)
        total = builder.phi(f64t)
        i.add_incoming(ir.Constant(i64, 0), pre)
        total.add_incoming(ir.Constant(f64t, 0.0), pre)
        ptr = builder.bitcast(builder.gep(base, [builder.mul(i, ir.Constant(i64, LANES))]), vt.as_pointer())
        e = _vexp(builder, builder.fsub(builder.load(ptr, align=4), mv))
        builder.store(e, ptr, align=4)
        t1 = builder.fadd(total, builder.fpext(pairwise_sum(builder, e), f64t))
        i1 = builder.add(i, ir.Constant(i64, 1))
        i.add_incoming(i1, loop)
        total.add_incoming(t1, loop)
        builder.cbranch(builder.icmp_signed("<", i1, g_), loop, done)
        builder.position_at_end(done)
        res = builder.phi(f64t)
        res.add_incoming(ir.Constant(f64t, 0.0), pre)
        res.add_incoming(t1, loop)
        return res

    return sig, codegen


@njit(cache=True, nogil=True)
def exp_sum(s, o, n, m):  # type: ignore[no-untyped-def]
    """s[o + i] = expf_ggml(s[o + i] - m) for i < n; returns their sum (float64, module order):
    whole groups of 16 as vectors (`exp_groups`), the rest one by one."""
    g = n - n % LANES
    total = exp_groups(s, o, g // LANES, m)
    for i in range(o + g, o + n):
        s[i] = expf_ggml(s[i] - m)
        total += np.float64(s[i])
    return total
