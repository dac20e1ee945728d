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

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic


def _make_idot(n: int) -> Any:
    @intrinsic
    def idot(typingctx: Any, a: Any, ao: Any, b: Any, bo: Any) -> Any:
        """sum(int32(a[ao + i]) * int32(b[bo + i]) for i < n); a, b int8 arrays (1-D, C)."""
        sig = types.int32(a, ao, b, bo)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            aa = context.make_array(signature.args[0])(context, builder, args[0])
            ba = context.make_array(signature.args[2])(context, builder, args[2])
            pa = builder.gep(aa.data, [args[1]])
            pb = builder.gep(ba.data, [args[3]])
            vt = ir.VectorType(ir.IntType(8), n)
            va = builder.load(builder.bitcast(pa, vt.as_pointer()), align=1)
            vb = builder.load(builder.bitcast(pb, vt.as_pointer()), align=1)
            wt = ir.VectorType(ir.IntType(32), n)
            prod = builder.mul(builder.sext(va, wt), builder.sext(vb, wt))
            fnty = ir.FunctionType(ir.IntType(32), [wt])
            fn = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.vector.reduce.add.v{n}i32")
            return builder.call(fn, [prod])

        return sig, codegen

    return idot


idot16 = _make_idot(16)
idot32 = _make_idot(32)


def _make_idot_w16(n: int) -> Any:
    @intrinsic
    def idot_w16(typingctx: Any, a: Any, ao: Any, b: Any, bo: Any) -> Any:
        """sum(int32(a[ao + i]) * int32(b[bo + i]) for i < n); a int16, b int8 (1-D, C)."""
        sig = types.int32(a, ao, b, bo)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            aa = context.make_array(signature.args[0])(context, builder, args[0])
            ba = context.make_array(signature.args[2])(context, builder, args[2])
            pa = builder.gep(aa.data, [args[1]])
            pb = builder.gep(ba.data, [args[3]])
            va = builder.load(builder.bitcast(pa, ir.VectorType(ir.IntType(16), n).as_pointer()), align=2)
            vb = builder.load(builder.bitcast(pb, ir.VectorType(ir.IntType(8), n).as_pointer()), align=1)
            wt = ir.VectorType(ir.IntType(32), n)
            prod = builder.mul(builder.sext(va, wt), builder.sext(vb, wt))
            fnty = ir.FunctionType(ir.IntType(32), [wt])
            fn = cgutils.get_or_insert_function(builder.module, fnty, f"llvm.vector.reduce.add.v{n}i32")
            return builder.call(fn, [prod])

        return sig, codegen

    return idot_w16


idot_w16_32 = _make_idot_w16(32)
idot_w16_256 = _make_idot_w16(256)

TILE = 64  # tokens per tile of `tile_dot`: four 16-lane int32 accumulators


@intrinsic
def tile_dot(typingctx: Any, w: Any, wo: Any, npairs: Any, x: Any, xo: Any, tp: Any, out: Any) -> Any:
    """For TILE tokens t: out[t] = sum over i < 2 * npairs of w[wo + i] * xcode(t, i), exact int32.

    w: int16 weight codes (scales folded in); x: int16 activation codes laid out (pairs, tp, 2),
    x[xo + (p * tp + t) * 2 + e] = code of element 2p + e of token t; out: int32 (TILE,).
    Each step multiplies one broadcast pair of weights with a pair of codes of 16 tokens and
    adds the two products into 32-bit lanes (the vpmaddwd pattern; vpdpwssd with VNNI)."""
    sig = types.void(w, wo, npairs, x, xo, tp, out)
    nv = TILE // 16

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
