"""Integer dot products of int8 vectors, emitted as LLVM vector IR.

Numba types every small-integer operation as int64, so a plain loop over int8 codes compiles
to 64-bit scalar (or gathered) code. These intrinsics load n int8 values from each operand as
one `<n x i8>` vector, sign-extend, multiply and reduce with `llvm.vector.reduce.add`: LLVM
lowers that to `vpmovsxbw` + `vpmaddwd` + a shuffle tree on AVX2/AVX-512 (VNNI forms where
the CPU has them). The result is an exact int32 (|sum| <= n * 128 * 128), so how LLVM orders
the additions cannot change it: the value is the same on every CPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import cgutils, types
from numba.extending import intrinsic


def kernel_intrinsic(fn: Any) -> Any:
    """numba's `intrinsic`, typed for mypy as what compiled code calls it with (the operands):
    numba's own annotations describe the typing-time function, whose first argument is the
    typing context."""
    return intrinsic(fn)


def _make_idot(n: int, a_bits: int = 8) -> Any:
    @intrinsic
    def idot(typingctx: Any, a: Any, ao: Any, b: Any, bo: Any) -> Any:
        """sum(int32(a[ao + i]) * int32(b[bo + i]) for i < n); a int8 or int16 (a_bits), b int8
        (1-D, C)."""
        sig = types.int32(a, ao, b, bo)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            aa = context.make_array(signature.args[0])(context, builder, args[0])
            ba = context.make_array(signature.args[2])(context, builder, args[2])
            pa = builder.gep(aa.data, [args[1]])
            pb = builder.gep(ba.data, [args[3]])
            va = builder.load(builder.bitcast(pa, ir.VectorType(ir.IntType(a_bits), n).as_pointer()), align=a_bits // 8)
            vb = builder.load(builder.bitcast(pb, ir.VectorType(ir.IntType(8), n).as_pointer()), align=1)
            wt = ir.VectorType(ir.IntType(32), n)
            prod = builder.mul(builder.sext(va, wt), builder.sext(vb, wt))
            fnty = ir.FunctionType(ir.IntType(32), [wt])
            fn = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.vector.reduce.add.v{n}i32")
            return builder.call(fn, [prod])

        return sig, codegen

    return idot


idot16 = _make_idot(16)
idot32 = _make_idot(32)
idot_w16_32 = _make_idot(32, 16)  # int16 weight codes (scales folded in) x int8 activations
idot_w16_256 = _make_idot(256, 16)
idot_w16_16 = _make_idot(16, 16)

@njit(cache=True, nogil=True)
def dot_q8_0(w, o, x, xo):  # type: ignore[no-untyped-def]
    """The integer dot of the Q8_0 block at byte o of row w (fp16 d, then 32 int8 codes) with
    x[xo : xo + 32] (int8)."""
    return idot32(w.view(np.int8), o + 2, x, xo)


TILE = 64  # tokens per tile of `tile_dot64`: four 16-lane int32 accumulators


def _make_tile_dot(tile: int) -> Any:
    @intrinsic
    def tile_dot(typingctx: Any, w: Any, wo: Any, npairs: Any, x: Any, xo: Any, tp: Any, out: Any) -> Any:
        """For `tile` tokens t: out[t] = sum over i < 2 * npairs of w[wo + i] * xcode(t, i), exact int32.

        w: int16 weight codes (scales folded in); x: int16 activation codes laid out (pairs, tp, 2),
        x[xo + (p * tp + t) * 2 + e] = code of element 2p + e of token t; out: int32 (tile,).
        Each step multiplies one broadcast pair of weights with a pair of codes of 16 tokens and
        adds the two products into 32-bit lanes (the vpmaddwd pattern; vpdpwssd with VNNI)."""
        sig = types.void(w, wo, npairs, x, xo, tp, out)
        nv = tile // 16

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            i16, i32, i64 = ir.IntType(16), ir.IntType(32), ir.IntType(64)
            wa = context.make_array(signature.args[0])(context, builder, args[0])
            xa = context.make_array(signature.args[3])(context, builder, args[3])
            oa = context.make_array(signature.args[6])(context, builder, args[6])
            wbase = builder.gep(wa.data, [args[1]])
            xbase = builder.gep(xa.data, [args[4]])
            np_ = builder.sext(args[2], i64) if args[2].type != i64 else args[2]
            tp2 = builder.mul(args[5] if args[5].type == i64 else builder.sext(args[5], i64), ir.Constant(i64, 2))
            v16x32 = ir.VectorType(i32, 16)
            v32x16 = ir.VectorType(i16, 32)
            v32x32 = ir.VectorType(i32, 32)
            zero = ir.Constant(v16x32, [0] * 16)
            even = ir.Constant(ir.VectorType(i32, 16), list(range(0, 32, 2)))
            odd = ir.Constant(ir.VectorType(i32, 16), list(range(1, 32, 2)))
            fn = builder.function
            pre = builder.block
            loop = fn.append_basic_block("tile_loop")
            done = fn.append_basic_block("tile_done")
            has = builder.icmp_signed(">", np_, ir.Constant(i64, 0))
            builder.cbranch(has, loop, done)
            builder.position_at_end(loop)
            i = builder.phi(i64)
            accs = [builder.phi(v16x32) for _ in range(nv)]
            i.add_incoming(ir.Constant(i64, 0), pre)
            for a in accs:
                a.add_incoming(zero, pre)
            wp = builder.bitcast(builder.gep(wbase, [builder.mul(i, ir.Constant(i64, 2))]), i32.as_pointer())
            wpair = builder.load(wp, align=2)
            wv = builder.bitcast(
                builder.shuffle_vector(
                    builder.insert_element(ir.Constant(v16x32, ir.Undefined), wpair, ir.Constant(i32, 0)),
                    ir.Constant(v16x32, ir.Undefined),
                    ir.Constant(ir.VectorType(i32, 16), [0] * 16),
                ),
                v32x16,
            )
            wv32 = builder.sext(wv, v32x32)
            xrow = builder.gep(xbase, [builder.mul(i, tp2)])
            new = []
            for j, a in enumerate(accs):
                xp = builder.bitcast(builder.gep(xrow, [ir.Constant(i64, 32 * j)]), v32x16.as_pointer())
                xv = builder.sext(builder.load(xp, align=2), v32x32)
                prod = builder.mul(xv, wv32)
                pair = builder.add(
                    builder.shuffle_vector(prod, prod, even), builder.shuffle_vector(prod, prod, odd)
                )
                new.append(builder.add(a, pair))
            i1 = builder.add(i, ir.Constant(i64, 1))
            i.add_incoming(i1, loop)
            for a, n_ in zip(accs, new):
                a.add_incoming(n_, loop)
            builder.cbranch(builder.icmp_signed("<", i1, np_), loop, done)
            builder.position_at_end(done)
            res = [builder.phi(v16x32) for _ in range(nv)]
            for r, a, n_ in zip(res, accs, new):
                r.add_incoming(zero, pre)
                r.add_incoming(n_, loop)
            for j, r in enumerate(res):
                op = builder.bitcast(builder.gep(oa.data, [ir.Constant(i64, 16 * j)]), v16x32.as_pointer())
                builder.store(r, op, align=4)
            return context.get_dummy_value()

        return sig, codegen
    return tile_dot


tile_dot16 = _make_tile_dot(16)
tile_dot64 = _make_tile_dot(64)


# ---- bit-field unpacking, n lanes at a time (uint8 source -> int16 destination) ---------------
# Numba compiles element loops over packed bytes to scalar code (int64 arithmetic, negative-index
# checks); these write the same lanes as one vector operation each. Arguments after the arrays
# are ints (offsets in elements, shift counts, masks), splatted to every lane.


def _ptr(context: Any, builder: Any, aty: Any, arr: Any, off: Any, elem: Any, n: int) -> Any:
    a = context.make_array(aty)(context, builder, arr)
    return builder.bitcast(builder.gep(a.data, [off]), ir.VectorType(elem, n).as_pointer())


def _splat16(builder: Any, v: Any, n: int) -> Any:
    i16 = ir.IntType(16)
    s = builder.trunc(v, i16) if v.type.width > 16 else builder.sext(v, i16) if v.type.width < 16 else v
    vec = builder.insert_element(ir.Constant(ir.VectorType(i16, n), ir.Undefined), s, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(vec, ir.Constant(ir.VectorType(i16, n), ir.Undefined), ir.Constant(ir.VectorType(ir.IntType(32), n), [0] * n))


def _make_bits(n: int, op: str) -> Any:
    @intrinsic
    def bits(typingctx: Any, src: Any, so: Any, dst: Any, do: Any, shift: Any, mask: Any, arg: Any) -> Any:
        """set: dst[do+i] = ((src[so+i] >> shift) & mask) + arg
        or:  dst[do+i] |= ((src[so+i] >> shift) & mask) << arg        (for i < n)"""
        sig = types.void(src, so, dst, do, shift, mask, arg)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            i16 = ir.IntType(16)
            sp = _ptr(context, builder, signature.args[0], args[0], args[1], ir.IntType(8), n)
            dp = _ptr(context, builder, signature.args[2], args[2], args[3], i16, n)
            v = builder.zext(builder.load(sp, align=1), ir.VectorType(i16, n))
            v = builder.and_(builder.lshr(v, _splat16(builder, args[4], n)), _splat16(builder, args[5], n))
            if op == "set":
                v = builder.add(v, _splat16(builder, args[6], n))
            else:
                v = builder.or_(builder.load(dp, align=2), builder.shl(v, _splat16(builder, args[6], n)))
            builder.store(v, dp, align=2)
            return context.get_dummy_value()

        return sig, codegen

    return bits


set_bits16 = _make_bits(16, "set")
set_bits32 = _make_bits(32, "set")
or_bits32 = _make_bits(32, "or")


def _make_scale(n: int) -> Any:
    @intrinsic
    def scale(typingctx: Any, dst: Any, do: Any, mul: Any, add: Any) -> Any:
        """dst[do+i] = (dst[do+i] + add) * mul for i < n (int16 lanes)."""
        sig = types.void(dst, do, mul, add)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            dp = _ptr(context, builder, signature.args[0], args[0], args[1], ir.IntType(16), n)
            v = builder.add(builder.load(dp, align=2), _splat16(builder, args[3], n))
            builder.store(builder.mul(v, _splat16(builder, args[2], n)), dp, align=2)
            return context.get_dummy_value()

        return sig, codegen

    return scale


scale16 = _make_scale(16)
scale32 = _make_scale(32)


@kernel_intrinsic
def or_bitmask32(typingctx: Any, qh: Any, dst: Any, do: Any, lshift: Any) -> Any:
    """dst[do+i] |= ((qh >> i) & 1) << lshift for i < 32; qh a uint32 bit mask (Q5_0/Q5_1)."""
    sig = types.void(qh, dst, do, lshift)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        i32, i16 = ir.IntType(32), ir.IntType(16)
        dp = _ptr(context, builder, signature.args[1], args[1], args[2], i16, 32)
        q = builder.trunc(args[0], i32) if args[0].type.width > 32 else args[0]
        qv = builder.shuffle_vector(
            builder.insert_element(ir.Constant(ir.VectorType(i32, 32), ir.Undefined), q, ir.Constant(i32, 0)),
            ir.Constant(ir.VectorType(i32, 32), ir.Undefined),
            ir.Constant(ir.VectorType(i32, 32), [0] * 32),
        )
        bitsv = builder.and_(builder.lshr(qv, ir.Constant(ir.VectorType(i32, 32), list(range(32)))), ir.Constant(ir.VectorType(i32, 32), [1] * 32))
        b16 = builder.shl(builder.trunc(bitsv, ir.VectorType(i16, 32)), _splat16(builder, args[3], 32))
        builder.store(builder.or_(builder.load(dp, align=2), b16), dp, align=2)
        return context.get_dummy_value()

    return sig, codegen


@kernel_intrinsic
def load_f16(typingctx: Any, w: Any, o: Any) -> Any:
    """The fp16 value stored at byte offset o of the uint8 array w, as float32 (exact; F16C)."""
    sig = types.float32(w, o)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        a = context.make_array(signature.args[0])(context, builder, args[0])
        p = builder.bitcast(builder.gep(a.data, [args[1]]), ir.HalfType().as_pointer())
        return builder.fpext(builder.load(p, align=1), ir.FloatType())

    return sig, codegen


def _make_dot_legacy(qs_at: int, qh_at: int, offset: int) -> Any:
    """Dot of one 32-value legacy block (4-bit codes, optional 5th bits) with 32 int8 codes, in
    registers: the nibbles (qs at byte qs_at of the block: low nibbles are values 0-15, high
    16-31), the 5th bits (the uint32 bit mask at qh_at, if >= 0), minus `offset`."""

    @intrinsic
    def dot(typingctx: Any, w: Any, wo: Any, x: Any, xo: Any) -> Any:
        sig = types.int32(w, wo, x, xo)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            i8, i32 = ir.IntType(8), ir.IntType(32)
            wa = context.make_array(signature.args[0])(context, builder, args[0])
            base = builder.gep(wa.data, [args[1]])
            qs = builder.load(builder.bitcast(builder.gep(base, [ir.Constant(ir.IntType(64), qs_at)]), ir.VectorType(i8, 16).as_pointer()), align=1)
            lo = builder.and_(qs, ir.Constant(ir.VectorType(i8, 16), [15] * 16))
            hi = builder.lshr(qs, ir.Constant(ir.VectorType(i8, 16), [4] * 16))
            q = builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(i32, 32), list(range(32))))
            if qh_at >= 0:
                qh = builder.load(builder.bitcast(builder.gep(base, [ir.Constant(ir.IntType(64), qh_at)]), i32.as_pointer()), align=1)
                qv = builder.shuffle_vector(
                    builder.insert_element(ir.Constant(ir.VectorType(i32, 32), ir.Undefined), qh, ir.Constant(i32, 0)),
                    ir.Constant(ir.VectorType(i32, 32), ir.Undefined),
                    ir.Constant(ir.VectorType(i32, 32), [0] * 32),
                )
                bit = builder.and_(builder.lshr(qv, ir.Constant(ir.VectorType(i32, 32), list(range(32)))), ir.Constant(ir.VectorType(i32, 32), [1] * 32))
                q = builder.or_(q, builder.shl(builder.trunc(bit, ir.VectorType(i8, 32)), ir.Constant(ir.VectorType(i8, 32), [4] * 32)))
            if offset:
                q = builder.sub(q, ir.Constant(ir.VectorType(i8, 32), [offset] * 32))
            xa = context.make_array(signature.args[2])(context, builder, args[2])
            xv = builder.load(builder.bitcast(builder.gep(xa.data, [args[3]]), ir.VectorType(i8, 32).as_pointer()), align=1)
            wt = ir.VectorType(i32, 32)
            prod = builder.mul(builder.sext(q, wt), builder.sext(xv, wt))
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [wt]), "llvm.vector.reduce.add.v32i32")
            return builder.call(fn, [prod])

        return sig, codegen

    return dot


dot_q4_0 = _make_dot_legacy(2, -1, 8)  # d | qs[16]
dot_q4_1 = _make_dot_legacy(4, -1, 0)  # d | m | qs[16]
dot_q5_0 = _make_dot_legacy(6, 2, 16)  # d | qh | qs[16]
dot_q5_1 = _make_dot_legacy(8, 4, 0)  # d | m | qh | qs[16]


@kernel_intrinsic
def round_f16(typingctx: Any, x: Any) -> Any:
    """float32 -> fp16 (round to nearest even, as F16C's vcvtps2ph) -> float32."""
    sig = types.float32(x)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.fpext(builder.fptrunc(args[0], ir.HalfType()), ir.FloatType())

    return sig, codegen


@kernel_intrinsic
def f16_bits(typingctx: Any, x: Any) -> Any:
    """The fp16 bit pattern of float32 x (round to nearest even, as F16C's vcvtps2ph)."""
    sig = types.uint16(x)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))

    return sig, codegen
