"""A float32 multiply-add tile, emitted as LLVM vector IR (the attention products' inner loop).

`fma_tile_RxV(a, ao, ars, b, bo, bks, n, c, co, crs)` computes, for r < R rows and the
16 * V columns j of one tile,

    c[co + r * crs + j] = sum over k < n of a[ao + r * ars + k] * b[bo + k * bks + j]

with one float32 accumulator per (r, j), starting at +0 and updated for k = 0, 1, ..., n - 1
in that order by a fused multiply-add. The accumulators stay in vector registers (R * V
vectors of 16 floats), each step loads V vectors of b and broadcasts R values of a: the
register-blocked loop that numba's own loops do not give (they keep the sums in memory).

The order of the additions is the same for every (r, j), every tile shape and every CPU, so
the result of an element depends only on its own n terms. Callers pass operands whose
products are exact in float32 (two fp16 values: 11 x 11 significant bits), where the fused
multiply-add and a multiply then add give the same bits; machines without FMA get the same
result from libm's `fma`.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic


def _make_fma_tile(rows: int, nvec: int) -> Any:
    @intrinsic
    def fma_tile(typingctx: Any, a: Any, ao: Any, ars: Any, b: Any, bo: Any, bks: Any, n: Any, c: Any, co: Any, crs: Any) -> Any:
        """See the module: rows x (16 * nvec) sums of n products, a, b, c float32 arrays (any
        layout: offsets and strides are in elements from each array's data pointer)."""
        sig = types.void(a, ao, ars, b, bo, bks, n, c, co, crs)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            f32, i64 = ir.FloatType(), ir.IntType(64)
            vt = ir.VectorType(f32, 16)
            sargs = signature.args

            def i64_of(v: Any, ty: Any) -> Any:
                return context.cast(builder, v, ty, types.int64)

            pa = context.make_array(sargs[0])(context, builder, args[0]).data
            pb = context.make_array(sargs[3])(context, builder, args[3]).data
            pc = context.make_array(sargs[7])(context, builder, args[7]).data
            ao_, ars_ = i64_of(args[1], sargs[1]), i64_of(args[2], sargs[2])
            bo_, bks_ = i64_of(args[4], sargs[4]), i64_of(args[5], sargs[5])
            n_ = i64_of(args[6], sargs[6])
            co_, crs_ = i64_of(args[8], sargs[8]), i64_of(args[9], sargs[9])
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt, vt, vt]), "llvm.fma.v16f32")
            zero = ir.Constant(vt, [0.0] * 16)
            undef = ir.Constant(vt, ir.Undefined)
            splat_mask = ir.Constant(ir.VectorType(ir.IntType(32), 16), [0] * 16)
            arow = [builder.gep(pa, [builder.add(ao_, builder.mul(ir.Constant(i64, r), ars_))]) for r in range(rows)]
            bbase = builder.gep(pb, [bo_])

            fn = builder.function
            pre = builder.block
            loop = fn.append_basic_block("fma_tile_loop")
            done = fn.append_basic_block("fma_tile_done")
            builder.cbranch(builder.icmp_signed(">", n_, ir.Constant(i64, 0)), loop, done)
            builder.position_at_end(loop)
            k = builder.phi(i64)
            k.add_incoming(ir.Constant(i64, 0), pre)
            accs = [[builder.phi(vt) for _ in range(nvec)] for _ in range(rows)]
            for row in accs:
                for acc in row:
                    acc.add_incoming(zero, pre)
            brow = builder.gep(bbase, [builder.mul(k, bks_)])
            bv = [
                builder.load(builder.bitcast(builder.gep(brow, [ir.Constant(i64, 16 * v)]), vt.as_pointer()), align=4)
                for v in range(nvec)
            ]
            new = []
            for r in range(rows):
                s = builder.load(builder.gep(arow[r], [k]), align=4)
                sv = builder.shuffle_vector(builder.insert_element(undef, s, ir.Constant(ir.IntType(32), 0)), undef, splat_mask)
                new.append([builder.call(fma, [sv, bv[v], accs[r][v]]) for v in range(nvec)])
            k1 = builder.add(k, ir.Constant(i64, 1))
            k.add_incoming(k1, loop)
            for r in range(rows):
                for v in range(nvec):
                    accs[r][v].add_incoming(new[r][v], loop)
            builder.cbranch(builder.icmp_signed("<", k1, n_), loop, done)
            builder.position_at_end(done)
            res = [[builder.phi(vt) for _ in range(nvec)] for _ in range(rows)]  # phis first in the block
            for r in range(rows):
                for v in range(nvec):
                    res[r][v].add_incoming(zero, pre)
                    res[r][v].add_incoming(new[r][v], loop)
            for r in range(rows):
                crow = builder.gep(pc, [builder.add(co_, builder.mul(ir.Constant(i64, r), crs_))])
                for v in range(nvec):
                    ptr = builder.bitcast(builder.gep(crow, [ir.Constant(i64, 16 * v)]), vt.as_pointer())
                    builder.store(res[r][v], ptr, align=4)
            return context.get_dummy_value()

        return sig, codegen

    return fma_tile


# 4 rows x 32 columns: 8 accumulators (8 zmm on AVX-512, 16 ymm on AVX2), 2 loads and
# 4 broadcasts per 8 multiply-adds; the 1-row forms finish a block's last rows, the 16-column
# ones a width that is not a multiple of 32.
fma_tile_4x2 = _make_fma_tile(4, 2)
fma_tile_1x2 = _make_fma_tile(1, 2)
fma_tile_4x1 = _make_fma_tile(4, 1)
fma_tile_1x1 = _make_fma_tile(1, 1)
