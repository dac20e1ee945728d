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
result from libm's `fma`. (The encoders' float32 attention passes operands whose products are
not exact: there each product is rounded once inside its fused multiply-add, the same on every
CPU, since `llvm.fma` is exactly rounded everywhere.)

Beside the tile: `pairwise_sum` (a vector's lanes added in _mm512_reduce_add_ps's order),
`scale_add_max` (a soft max's first pass, sixteen scores at a time) and `wide_registers` (the
larger tiles' choice, never a result's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from llamacli.core.model.kernels.qmm.isa import features
from llamacli.core.model.kernels.qmm.simd import kernel_intrinsic


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
            undef = ir.Constant(vt, ir.Undefined)
            splat_mask = ir.Constant(ir.VectorType(ir.IntType(32), 16), [0] * 16)
            arow = [builder.gep(pa, [builder.add(ao_, builder.mul(ir.Constant(i64, r), ars_))]) for r in range(rows)]
            bbase = builder.gep(pb, [bo_])

            def operands(k: Any) -> tuple[list[Any], list[Any]]:  # a[r][k] broadcast, b's row k
                brow = builder.gep(bbase, [builder.mul(k, bks_)])
                bv = [
                    builder.load(builder.bitcast(builder.gep(brow, [ir.Constant(i64, 16 * v)]), vt.as_pointer()), align=4)
                    for v in range(nvec)
                ]
                av = [builder.shuffle_vector(builder.insert_element(undef, builder.load(builder.gep(arow[r], [k]), align=4),
                                                                    ir.Constant(ir.IntType(32), 0)), undef, splat_mask)
                      for r in range(rows)]
                return av, bv

            res = fma_loop(builder, n_, 1, rows, nvec, operands, "fma_tile")
            for r in range(rows):
                crow = builder.gep(pc, [builder.add(co_, builder.mul(ir.Constant(i64, r), crs_))])
                for v in range(nvec):
                    ptr = builder.bitcast(builder.gep(crow, [ir.Constant(i64, 16 * v)]), vt.as_pointer())
                    builder.store(res[r][v], ptr, align=4)
            return context.get_dummy_value()

        return sig, codegen

    return fma_tile


def fma_loop(builder: Any, n: Any, step: int, rows: int, nvec: int,
             operands: Callable[[Any], tuple[list[Any], list[Any]]], name: str) -> list[list[Any]]:
    """Emit, at the builder's position, the loop k = 0, step, ... (< n, an i64) of
    acc[r][v] = fma(x[r], y[v], acc[r][v]) for r < rows, v < nvec, on <16 x float>
    accumulators starting at +0, where (x, y) = operands(k) emits the loads of step k. Returns
    the accumulators after the loop (+0 when n <= 0): the register-blocked loop that the tiles
    of this module and float_gemm share."""
    i64 = ir.IntType(64)
    vt = ir.VectorType(ir.FloatType(), 16)
    fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt, vt, vt]), "llvm.fma.v16f32")
    zero = ir.Constant(vt, [0.0] * 16)
    fn = builder.function
    pre = builder.block
    loop = fn.append_basic_block(f"{name}_loop")
    done = fn.append_basic_block(f"{name}_done")
    builder.cbranch(builder.icmp_signed(">", n, ir.Constant(i64, 0)), loop, done)
    builder.position_at_end(loop)
    k = builder.phi(i64)
    k.add_incoming(ir.Constant(i64, 0), pre)
    accs = [[builder.phi(vt) for _ in range(nvec)] for _ in range(rows)]
    for row in accs:
        for acc in row:
            acc.add_incoming(zero, pre)
    xs, ys = operands(k)
    new = [[builder.call(fma, [xs[r], ys[v], accs[r][v]]) for v in range(nvec)] for r in range(rows)]
    k1 = builder.add(k, ir.Constant(i64, step))
    k.add_incoming(k1, loop)
    for r in range(rows):
        for v in range(nvec):
            accs[r][v].add_incoming(new[r][v], loop)
    builder.cbranch(builder.icmp_signed("<", k1, n), loop, done)
    builder.position_at_end(done)
    res = [[builder.phi(vt) for _ in range(nvec)] for _ in range(rows)]  # phis first in the block
    for r in range(rows):
        for v in range(nvec):
            res[r][v].add_incoming(zero, pre)
            res[r][v].add_incoming(new[r][v], loop)
    return res


def pairwise_sum(builder: Any, v: Any) -> Any:
    """The lanes of a float vector (16 lanes: <16 x float>) added pairwise: lane i + lane i + h
    for h = 8, 4, 2, 1 (each step's halves added as vectors), which is _mm512_reduce_add_ps's
    order and block_dots.mm_float's lane reduction."""
    n = v.type.count
    while n > 1:
        h = n // 2
        lo = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), h), list(range(h))))
        hi = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), h), list(range(h, n))))
        v, n = builder.fadd(lo, hi), h
    return builder.extract_element(v, ir.Constant(ir.IntType(32), 0))


# 4 rows x 32 columns: 8 accumulators (8 zmm on AVX-512, 16 ymm on AVX2), 2 loads and
# 4 broadcasts per 8 multiply-adds; the 1-row forms finish a block's last rows, the 16-column
# ones a width that is not a multiple of 32.
fma_tile_4x2 = _make_fma_tile(4, 2)
fma_tile_1x2 = _make_fma_tile(1, 2)
fma_tile_4x1 = _make_fma_tile(4, 1)
fma_tile_1x1 = _make_fma_tile(1, 1)
# Where the machine has 32 vector registers (AVX-512: `wide_registers`): 8 rows x 32 columns
# and 4 rows x 80 (16 and 20 accumulators), which keep twice the multiply-adds in flight.
fma_tile_8x2 = _make_fma_tile(8, 2)
fma_tile_4x5 = _make_fma_tile(4, 5)


@kernel_intrinsic
def wide_registers(typingctx: Any) -> Any:
    """Whether the machine numba generates code for has AVX-512's 32 vector registers (a
    constant of the compiled code: the larger tiles' loops are chosen on it, never a result)."""
    sig = types.boolean()

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return ir.Constant(ir.IntType(1), int("+avx512f" in features(context)))

    return sig, codegen


@kernel_intrinsic
def scale_add_max(typingctx: Any, s: Any, so: Any, g: Any, scale: Any, mk: Any, mo: Any) -> Any:
    """w = s[so + i] * scale + mk[mo + i], stored back to s[so + i], for i < 16 g (float32
    arrays, offsets in elements from each one's data pointer), sixteen lanes at a time; returns
    the largest w (float32; -inf for g = 0; NaNs are passed over). The maximum is exact, so the
    order of the comparisons does not show in it."""
    sig = types.float32(s, so, g, types.float32, mk, mo)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        f32, i64 = ir.FloatType(), ir.IntType(64)
        vt = ir.VectorType(f32, 16)
        sa = signature.args
        ps = builder.gep(context.make_array(sa[0])(context, builder, args[0]).data, [context.cast(builder, args[1], sa[1], types.int64)])
        pm = builder.gep(context.make_array(sa[4])(context, builder, args[4]).data, [context.cast(builder, args[5], sa[5], types.int64)])
        g_ = context.cast(builder, args[2], sa[2], types.int64)
        undef = ir.Constant(vt, ir.Undefined)
        sc = builder.shuffle_vector(builder.insert_element(undef, args[3], ir.Constant(ir.IntType(32), 0)), undef,
                                    ir.Constant(ir.VectorType(ir.IntType(32), 16), [0] * 16))
        vmax = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt, vt]), "llvm.maxnum.v16f32")
        smax = cgutils.get_or_insert_function(builder.module, ir.FunctionType(f32, [f32, f32]), "llvm.maxnum.f32")
        ninf = ir.Constant(vt, [float("-inf")] * 16)
        fn = builder.function
        pre = builder.block
        loop = fn.append_basic_block("scale_add_max_loop")
        done = fn.append_basic_block("scale_add_max_done")
        builder.cbranch(builder.icmp_signed(">", g_, ir.Constant(i64, 0)), loop, done)
        builder.position_at_end(loop)
        i = builder.phi(i64)
        acc = builder.phi(vt)
        i.add_incoming(ir.Constant(i64, 0), pre)
        acc.add_incoming(ninf, pre)
        off = builder.mul(i, ir.Constant(i64, 16))
        p = builder.bitcast(builder.gep(ps, [off]), vt.as_pointer())
        w = builder.fadd(builder.fmul(builder.load(p, align=4), sc), builder.load(builder.bitcast(builder.gep(pm, [off]), vt.as_pointer()), align=4))
        builder.store(w, p, align=4)
        acc1 = builder.call(vmax, [acc, w])
        i1 = builder.add(i, ir.Constant(i64, 1))
        i.add_incoming(i1, loop)
        acc.add_incoming(acc1, loop)
        builder.cbranch(builder.icmp_signed("<", i1, g_), loop, done)
        builder.position_at_end(done)
        res = builder.phi(vt)
        res.add_incoming(ninf, pre)
        res.add_incoming(acc1, loop)
        m = builder.extract_element(res, ir.Constant(ir.IntType(32), 0))
        for lane in range(1, 16):
            m = builder.call(smax, [m, builder.extract_element(res, ir.Constant(ir.IntType(32), lane))])
        return m

    return sig, codegen


@kernel_intrinsic
def dot64_f32(typingctx: Any, x: Any, y: Any, nb: Any) -> Any:
    """ggml_vec_dot_f32's sum (AVX-512 build) over the first 64 nb values of two contiguous
    float32 arrays: four accumulators of 16 lanes, each step one fused multiply-add per
    accumulator on values 64 i + 16 j + lane, then accumulators (0 + 2), (1 + 3), then 0 + 1,
    then `pairwise_sum`; float32 0 for nb = 0 (the caller adds the rest one by one)."""
    sig = types.float32(x, y, nb)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        f32, i64 = ir.FloatType(), ir.IntType(64)
        vt = ir.VectorType(f32, 16)
        sa = signature.args
        px = context.make_array(sa[0])(context, builder, args[0]).data
        py = context.make_array(sa[1])(context, builder, args[1]).data
        nb_ = context.cast(builder, args[2], sa[2], types.int64)
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt, vt, vt]), "llvm.fma.v16f32")
        zero = ir.Constant(vt, [0.0] * 16)
        fn = builder.function
        pre = builder.block
        loop = fn.append_basic_block("dot64_loop")
        done = fn.append_basic_block("dot64_done")
        builder.cbranch(builder.icmp_signed(">", nb_, ir.Constant(i64, 0)), loop, done)
        builder.position_at_end(loop)
        i = builder.phi(i64)
        i.add_incoming(ir.Constant(i64, 0), pre)
        accs = [builder.phi(vt) for _ in range(4)]
        new = []
        for j, acc in enumerate(accs):
            acc.add_incoming(zero, pre)
            off = builder.add(builder.mul(i, ir.Constant(i64, 64)), ir.Constant(i64, 16 * j))
            xv = builder.load(builder.bitcast(builder.gep(px, [off]), vt.as_pointer()), align=4)
            yv = builder.load(builder.bitcast(builder.gep(py, [off]), vt.as_pointer()), align=4)
            new.append(builder.call(fma, [xv, yv, acc]))
        i1 = builder.add(i, ir.Constant(i64, 1))
        i.add_incoming(i1, loop)
        for acc, nv in zip(accs, new):
            acc.add_incoming(nv, loop)
        builder.cbranch(builder.icmp_signed("<", i1, nb_), loop, done)
        builder.position_at_end(done)
        res = [builder.phi(vt) for _ in range(4)]
        for r, nv in zip(res, new):
            r.add_incoming(zero, pre)
            r.add_incoming(nv, loop)
        total = builder.fadd(builder.fadd(res[0], res[2]), builder.fadd(res[1], res[3]))
        s = pairwise_sum(builder, total)
        return builder.select(builder.icmp_signed(">", nb_, ir.Constant(i64, 0)), s, ir.Constant(f32, 0.0))

    return sig, codegen


@kernel_intrinsic
def transpose16(typingctx: Any, src: Any, so: Any, ss: Any, dst: Any, do: Any, ds: Any) -> Any:
    """dst[do + j ds + i] = src[so + i ss + j] for i, j < 16: a 16 x 16 block of float32 values
    transposed in registers (offsets and row strides in elements from each array's data
    pointer; each row's 16 values contiguous). Four stages of two-vector shuffles: at stage s,
    rows i and i + s (i without bit s) trade their s-wide column blocks; the values are moved,
    never changed."""
    sig = types.void(src, so, ss, dst, do, ds)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
        vt = ir.VectorType(f32, 16)
        sa = signature.args

        def base(k: int) -> tuple[Any, Any]:
            p = builder.gep(context.make_array(sa[k])(context, builder, args[k]).data,
                            [context.cast(builder, args[k + 1], sa[k + 1], types.int64)])
            return p, context.cast(builder, args[k + 2], sa[k + 2], types.int64)

        (ps, ss_), (pd, ds_) = base(0), base(3)
        rows = [builder.load(builder.bitcast(builder.gep(ps, [builder.mul(ss_, ir.Constant(i64, i))]), vt.as_pointer()), align=4)
                for i in range(16)]
        for s in (1, 2, 4, 8):
            lo = ir.Constant(ir.VectorType(i32, 16), [j if not j & s else 16 + j - s for j in range(16)])
            hi = ir.Constant(ir.VectorType(i32, 16), [j + s if not j & s else 16 + j for j in range(16)])
            new = list(rows)
            for i in range(16):
                if not i & s:
                    new[i] = builder.shuffle_vector(rows[i], rows[i + s], lo)
                    new[i + s] = builder.shuffle_vector(rows[i], rows[i + s], hi)
            rows = new
        for j in range(16):
            builder.store(rows[j], builder.bitcast(builder.gep(pd, [builder.mul(ds_, ir.Constant(i64, j))]), vt.as_pointer()), align=4)
        return context.get_dummy_value()

    return sig, codegen
