"""Vector intrinsics of the low-bit unpackers (core/model/kernels/qmm/unpack_lowbit.py), emitted
as LLVM vector IR as core/model/kernels/qmm/simd.py's: numba compiles their loops over a few
int8 values to 64-bit scalar code, which made unpacking a row most of a matmul's time.

Each writes n int16 codes at dst[do:], exact (|code| <= 31 * 62 or 15 * 9):
  set_grid8 / set_grid4   dst[do + j] = mul * (ext(src[so + j]) * k + add) * (bit j of signs ? -1 : 1)
                          (a grid entry of n bytes, ext: zero- or sign-extension)
  set_trits32 / 16 / 4    dst[do + j] = (((src[so + j] * pow3) & 255) * 3 >> 8) - 1   (TQ1_0's trits)
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from llamacli.core.model.kernels.qmm.simd import _ptr, _splat16

_I16 = ir.IntType(16)


def _const16(v: int, n: int) -> ir.Constant:
    return ir.Constant(ir.VectorType(_I16, n), [v] * n)


def _make_grid(n: int, signed: bool) -> Any:
    @intrinsic
    def grid(typingctx: Any, src: Any, so: Any, dst: Any, do: Any, signs: Any, mul: Any, k: Any, add: Any) -> Any:
        sig = types.void(src, so, dst, do, signs, mul, k, add)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            vt = ir.VectorType(_I16, n)
            sp = _ptr(context, builder, signature.args[0], args[0], args[1], ir.IntType(8), n)
            dp = _ptr(context, builder, signature.args[2], args[2], args[3], _I16, n)
            raw = builder.load(sp, align=1)
            v = builder.sext(raw, vt) if signed else builder.zext(raw, vt)
            v = builder.add(builder.mul(v, _splat16(builder, args[6], n)), _splat16(builder, args[7], n))
            bit = builder.and_(_splat16(builder, args[4], n), ir.Constant(vt, [1 << j for j in range(n)]))
            neg = builder.icmp_unsigned("!=", bit, _const16(0, n))
            v = builder.select(neg, builder.sub(_const16(0, n), v), v)
            builder.store(builder.mul(v, _splat16(builder, args[5], n)), dp, align=2)
            return context.get_dummy_value()

        return sig, codegen

    return grid


set_grid8 = _make_grid(8, False)
set_grid4 = _make_grid(4, False)
set_grid8_signed = _make_grid(8, True)


def _make_trits(n: int) -> Any:
    @intrinsic
    def trits(typingctx: Any, src: Any, so: Any, dst: Any, do: Any, pow3: Any) -> Any:
        sig = types.void(src, so, dst, do, pow3)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            sp = _ptr(context, builder, signature.args[0], args[0], args[1], ir.IntType(8), n)
            dp = _ptr(context, builder, signature.args[2], args[2], args[3], _I16, n)
            v = builder.zext(builder.load(sp, align=1), ir.VectorType(_I16, n))
            v = builder.and_(builder.mul(v, _splat16(builder, args[4], n)), _const16(255, n))
            v = builder.lshr(builder.mul(v, _const16(3, n)), _const16(8, n))
            builder.store(builder.sub(v, _const16(1, n)), dp, align=2)
            return context.get_dummy_value()

        return sig, codegen

    return trits


set_trits32 = _make_trits(32)
set_trits16 = _make_trits(16)
set_trits4 = _make_trits(4)
