"""Q4_K and Q6_K stored, one activation row (decoding): the 16 rows streamed, each row's codes
multiplied where they are unpacked.

The 16-row kernels of several activation rows (core/model/kernels/qmm/rows.py) unpack a block
of all 16 rows first, then multiply it with each activation row. With one activation row that
order only costs: the 16 rows' unpacked codes and scales (16 to 32 vectors per row) wait for
their products in the stack (AVX2 has 16 vector registers). Here each row is unpacked, scaled
and multiplied at once, in 256-bit vectors, much as llama.cpp's ggml_vec_dot_q4_K_q8_K and
ggml_vec_dot_q6_K_q8_K do for their one row (ggml-cpu/arch/x86/quants.c):

  per row: 8 vectors of 32 codes (unsigned) times the activation's 32 codes of their
  sub-block (vpmaddubsw: int16 pair sums), times the sub-block's scale in int16 pairs
  (vpmaddwd): <8 x i32> partial sums of isum; Q4_K also <4 x i32> of msum (its 8 mins times
  the activation's 8 code sums per sub-block, vpmaddwd).

Each 4 rows' partial sums are reduced together by horizontal pair sums (vphaddd's pattern:
three for the 4 rows' <8 x i32>, their halves added; three for Q4_K's <4 x i32>), which leaves
lane r of a <4 x i32> the exact isum (msum) of row r. The float terms are then those of the
other kernels, lane by lane (block_dots.py's order: (d_x * d) * float(isum) - (d_x * dmin) *
float(msum), every operation rounded to float32, blocks added in order): the same bits.

Order: a quad of rows goes through all its blocks, its 4 accumulators in a register, then the
next quad (a row's float terms are added in block order whichever rows are beside it). Its 4
rows are a loop LLVM cannot unroll (`_quad_term`): unrolled, the scheduler interleaved them and
spilled the partial sums. Each block step prefetches the bytes of the quad AHEAD rows on at the
same pace (`_prefetch`): 4 or 16 rows read side by side are short streams that the hardware
prefetchers follow too late (one Q6_K row, 768 x 2048 matrices that do not fit in the cache:
9 G MAC/s without, 37 with).

Q4_K (ggml's get_scale_min_k4 on the 12 scale bytes as three u32, u0 u1 u2, as its AVX2 kernel
does): sc0..3 = u0 & 0x3f3f3f3f, sc4..7 = (u2 & 0x0f0f0f0f) | ((u0 >> 2) & 0x30303030),
m0..3 = u1 & 0x3f3f3f3f, m4..7 = ((u2 >> 4) & 0x0f0f0f0f) | ((u1 >> 2) & 0x30303030): one
<4 x i32> of two lane shuffles, shifts, masks and an or per row.

Q6_K: codes u = 0..63 as stored (|pair| <= 2 * 63 * 128), isum = sum_g sc_g * (dot(u_g, x_g)
- 32 * xsum_g) over its 16 groups of 16 values (rows.py's `_q6_k_byte_terms`): the offset term
one vpmaddwd of the 16 scales and the activation's 16 code sums per row. A 32-value chunk
spans two groups, whose scales the chunk's int16 pair sums take from one vector: the scales
as int16, even groups in the low 128-bit lane and odd in the high, picked per lane (vpshufb).
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba.core import cgutils

from llamacli.core.model.kernels.qmm import isa
from llamacli.core.model.kernels.qmm.isa import const_vec, vec

QUAD = 4  # rows reduced together
ROWS = 16  # rows per call (rows.py's 16-row kernels)

_I8, _I16, _I32, _I64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
_F32 = ir.FloatType()


def _load(builder: Any, base: Any, at: int, vt: ir.Type) -> Any:
    return builder.load(builder.bitcast(builder.gep(base, [ir.Constant(_I64, at)]), vt.as_pointer()), align=1)


def _shuf(builder: Any, a: Any, b: Any, idx: list[int]) -> Any:
    return builder.shuffle_vector(a, b, const_vec(_I32, idx))


def _hadd(builder: Any, a: Any, b: Any) -> Any:
    """vphaddd's pattern on <n x i32> (n = 4 or 8): per 128-bit lane, a's adjacent pairs added,
    then b's."""
    n = a.type.count
    lanes = [(k, k + n) for k in range(0, n, 4)]  # each 128-bit lane's first element in a, b
    even = [v for k, kb in lanes for v in (k, k + 2, kb, kb + 2)]
    return builder.add(_shuf(builder, a, b, even), _shuf(builder, a, b, [v + 1 for v in even]))


def quad_sums(builder: Any, rows: list[Any]) -> Any:
    """4 rows' <8 x i32> or <4 x i32> partial sums -> <4 x i32>, lane r row r's sum (exact)."""
    ab, cd = _hadd(builder, rows[0], rows[1]), _hadd(builder, rows[2], rows[3])
    s = _hadd(builder, ab, cd)  # <8 x i32>: lanes r and 4 + r, row r's halves
    if s.type.count == 4:
        return s
    return builder.add(_shuf(builder, s, s, [0, 1, 2, 3]), _shuf(builder, s, s, [4, 5, 6, 7]))


def _lane_scales(builder: Any, scales: Any) -> Any:
    """`scales` (<16 x i16>) for `_scale_vec`: on AVX2 targets through an empty inline asm, so
    that LLVM sees no more than a vector in a register (seeing its two lanes equal, it turned
    each vpshufb into a shift and a vpbroadcastw)."""
    if isa.TARGET.madd_bytes >= 32:
        return builder.asm(ir.FunctionType(scales.type, [scales.type]), "", "=x,0", [scales], False)
    return scales


def _scale_vec(builder: Any, scales: Any, k: int) -> Any:
    """<16 x i16>: element k of each 128-bit lane of `scales` (<16 x i16>, from `_lane_scales`)
    across its lane: one vpshufb where the target has AVX2."""
    if isa.TARGET.madd_bytes >= 32:
        fn = builder.module.globals.get("llvm.x86.avx2.pshuf.b") or ir.Function(
            builder.module, ir.FunctionType(vec(_I8, 32), [vec(_I8, 32), vec(_I8, 32)]), "llvm.x86.avx2.pshuf.b")
        picked = builder.call(fn, [builder.bitcast(scales, vec(_I8, 32)), const_vec(_I8, [2 * k, 2 * k + 1] * 16)])
        return builder.bitcast(picked, vec(_I16, 16))
    return _shuf(builder, scales, scales, [k] * 8 + [8 + k] * 8)


def _dot(builder: Any, codes: Any, x: Any, scales: Any) -> Any:
    """<32 x i8> unsigned codes . <32 x i8> activation codes, int16 pair sums times scales
    (<16 x i16>) in pairs -> <8 x i32> (exact: |pair| <= 2 * 63 * 128)."""
    return isa.pmaddwd(builder, isa.madd_u8(builder, codes, x), scales)


def _acc(builder: Any, acc: Any, t: Any) -> Any:
    return t if acc is None else builder.add(acc, t)


def _opaque(builder: Any, v: Any) -> Any:
    """v, through an empty inline asm that LLVM cannot see into (an optimisation barrier on
    every target)."""
    return builder.asm(ir.FunctionType(v.type, [v.type]), "", "=r,0", [v], False)


def _quad_term(builder: Any, first: Any, row_bytes: Any, dx4: Any, row: Any, parts: list[ir.Type], scale_of: Any) -> Any:
    """<4 x float>: the block terms of the 4 rows whose blocks are at first + r * row_bytes:
    row(p) -> the row's partial sums (one vector per type of `parts`: isum's, and msum's),
    scale_of(blocks) -> the rows' d (and dmin), <4 x float> each.

    The rows are a loop whose count LLVM cannot see (`_opaque`): unrolled, the 4 rows' code was
    interleaved by the scheduler, and their partial sums and unpacked scales spilled to the stack.
    Each row's partial sums go through a small buffer to the reduction after the loop."""
    bufs = [cgutils.alloca_once(builder, ir.ArrayType(t, QUAD)) for t in parts]
    pre = builder.block
    body = builder.function.append_basic_block("k1_row")
    after = builder.function.append_basic_block("k1_rows_done")
    n = _opaque(builder, ir.Constant(_I64, QUAD))
    builder.branch(body)
    builder.position_at_end(body)
    r = builder.phi(_I64)
    r.add_incoming(ir.Constant(_I64, 0), pre)
    for buf, v in zip(bufs, row(builder.gep(first, [builder.mul(r, row_bytes)]))):
        builder.store(v, builder.gep(buf, [ir.Constant(_I32, 0), r]))
    r1 = builder.add(r, ir.Constant(_I64, 1))
    r.add_incoming(r1, builder.block)
    builder.cbranch(builder.icmp_signed("<", r1, n), body, after)
    builder.position_at_end(after)
    sums = [quad_sums(builder, [builder.load(builder.gep(buf, [ir.Constant(_I32, 0), ir.Constant(_I32, i)])) for i in range(QUAD)])
            for buf in bufs]
    scales = scale_of([builder.gep(first, [builder.mul(ir.Constant(_I64, i), row_bytes)]) for i in range(QUAD)])
    t = builder.fmul(builder.fmul(dx4, scales[0]), builder.sitofp(sums[0], vec(_F32, QUAD)))
    if len(sums) > 1:  # - (d_x * dmin) * float(msum)
        t = builder.fsub(t, builder.fmul(builder.fmul(dx4, scales[1]), builder.sitofp(sums[1], vec(_F32, QUAD))))
    return t


def _x32(builder: Any, x: Any) -> list[Any]:
    """The activation's 8 groups of 32 codes of the 256-value block at x, <32 x i8>."""
    return [_load(builder, x, 32 * j, vec(_I8, 32)) for j in range(8)]


def _f16s(builder: Any, ps: list[Any], at: int, n: int) -> Any:
    """The n fp16 at byte `at` of each block in ps, side by side, as <len(ps) n x half>."""
    h = [_load(builder, p, at, vec(ir.HalfType(), n)) for p in ps]
    ab = _shuf(builder, h[0], h[1], list(range(2 * n)))
    cd = _shuf(builder, h[2], h[3], list(range(2 * n)))
    return _shuf(builder, ab, cd, list(range(4 * n)))


def q4_k_term(builder: Any, first: Any, row_bytes: Any, x: Any, dx4: Any, xsub: Any) -> Any:
    """Q4_K (144 bytes: d | dmin | scales[12] | qs[128]; sub-blocks 2g, 2g + 1 = low, high
    nibbles of qs[32g : 32g + 32]): the terms of the blocks at first + r * row_bytes (r < 4)
    for one activation row (x: its block's codes, dx4: its scale, xsub: its 8 code sums)."""
    xsum = builder.trunc(builder.load(builder.bitcast(xsub, vec(_I32, 8).as_pointer()), align=4), vec(_I16, 8))  # |each| <= 32 * 128
    m15 = const_vec(_I8, [15] * 32)

    def row(p: Any) -> list[Any]:
        xs = _x32(builder, x)
        u = _load(builder, p, 0, vec(_I32, 4))  # d|dmin, u0, u1, u2
        pick = _shuf(builder, u, u, [1, 3, 2, 3])  # u0, u2, u1, u2
        top = builder.and_(builder.lshr(_shuf(builder, u, u, [1, 1, 2, 2]), const_vec(_I32, [2] * 4)), const_vec(_I32, [0, 0x30303030] * 2))
        low = builder.and_(builder.lshr(pick, const_vec(_I32, [0, 0, 0, 4])), const_vec(_I32, [0x3F3F3F3F, 0x0F0F0F0F] * 2))
        sm = builder.bitcast(builder.or_(low, top), vec(_I8, 16))  # sc0..7, m0..7
        wide = builder.zext(sm, vec(_I16, 16))
        scales = _lane_scales(builder, _shuf(builder, wide, wide, list(range(8)) * 2))  # sc0..7 in both 128-bit lanes
        msum = isa.pmaddwd(builder, _shuf(builder, wide, wide, list(range(8, 16))), xsum)
        isum = None
        for g in range(4):
            q = _load(builder, p, 16 + 32 * g, vec(_I8, 32))
            for half, codes in enumerate((builder.and_(q, m15), builder.and_(builder.lshr(q, const_vec(_I8, [4] * 32)), m15))):
                j = 2 * g + half
                isum = _acc(builder, isum, _dot(builder, codes, xs[j], _scale_vec(builder, scales, j)))
        return [isum, msum]

    def scale_of(ps: list[Any]) -> list[Any]:
        dd = builder.fpext(_f16s(builder, ps, 0, 2), vec(_F32, 2 * QUAD))  # d, dmin of each row
        return [_shuf(builder, dd, dd, list(range(0, 8, 2))), _shuf(builder, dd, dd, list(range(1, 8, 2)))]

    return _quad_term(builder, first, row_bytes, dx4, row, [vec(_I32, 8), vec(_I32, 4)], scale_of)


def q6_k_term(builder: Any, first: Any, row_bytes: Any, x: Any, dx4: Any, xsub: Any) -> Any:
    """Q6_K (210 bytes: ql[128] | qh[64] | scales[16] int8 | d): value 128h + 32k + l has low
    bits nibble k // 2 of ql[64h + 32(k % 2) + l], high bits (qh[32h + l] >> 2k) & 3: as
    `q4_k_term` (xsub: the activation block's 16 code sums)."""
    even_odd = [2 * i for i in range(8)] + [2 * i + 1 for i in range(8)]
    sums = builder.trunc(builder.load(builder.bitcast(xsub, vec(_I32, 16).as_pointer()), align=4), vec(_I16, 16))  # |each| <= 16 * 128
    xsum = _shuf(builder, sums, sums, even_odd)
    m15, m48 = const_vec(_I8, [15] * 32), const_vec(_I8, [0x30] * 32)

    def shift(v: Any, n: int) -> Any:
        return builder.shl(v, const_vec(_I8, [n] * 32)) if n > 0 else builder.lshr(v, const_vec(_I8, [-n] * 32)) if n < 0 else v

    def row(p: Any) -> list[Any]:
        xs = _x32(builder, x)
        raw = _load(builder, p, 192, vec(_I8, 16))
        scales = _lane_scales(builder, builder.sext(_shuf(builder, raw, raw, even_odd), vec(_I16, 16)))  # even groups' scales, then odd
        # the codes' offset: - 32 * sum_g sc_g * xsum_g
        isum = builder.mul(isa.pmaddwd(builder, scales, xsum), const_vec(_I32, [-32] * 8))
        for h in range(2):
            qh = _load(builder, p, 128 + 32 * h, vec(_I8, 32))
            for k in range(4):
                ql = _load(builder, p, 64 * h + 32 * (k % 2), vec(_I8, 32))
                lo = builder.and_(ql, m15) if k < 2 else builder.lshr(ql, const_vec(_I8, [4] * 32))
                codes = builder.or_(lo, builder.and_(shift(qh, 4 - 2 * k), m48))
                c = 4 * h + k  # values 32c .. 32c + 31: groups 2c, 2c + 1
                isum = builder.add(isum, _dot(builder, codes, xs[c], _scale_vec(builder, scales, c)))
        return [isum]

    def scale_of(ps: list[Any]) -> list[Any]:
        return [builder.fpext(_f16s(builder, ps, 208, 1), vec(_F32, QUAD))]

    return _quad_term(builder, first, row_bytes, dx4, row, [vec(_I32, 8)], scale_of)


AHEAD = 8  # rows ahead of the quad being read that `_prefetch` fetches


def _prefetch(builder: Any, first: Any, row_bytes: Any, boff: Any, block_bytes: int) -> None:
    """Prefetch the quad AHEAD rows on: the bytes [QUAD * boff, QUAD * (boff + block_bytes)) from
    its first row, so that over the blocks of a quad the whole of that quad's rows are fetched,
    in order, at the pace they are read. A prefetch past the end of the matrix is harmless."""
    fnty = ir.FunctionType(ir.VoidType(), [_I8.as_pointer(), _I32, _I32, _I32])
    fn = builder.module.globals.get("llvm.prefetch.p0i8") or ir.Function(builder.module, fnty, "llvm.prefetch.p0i8")
    nxt = builder.gep(first, [builder.add(builder.mul(row_bytes, ir.Constant(_I64, AHEAD)), builder.mul(boff, ir.Constant(_I64, QUAD)))])
    for k in range(0, QUAD * block_bytes, 64):
        builder.call(fn, [builder.gep(nxt, [ir.Constant(_I64, k)]), ir.Constant(_I32, 0), ir.Constant(_I32, 3), ir.Constant(_I32, 1)])


def _one_row(block_bytes: int, quad_term: Any) -> Any:
    """The code of one activation row against 16 weight rows: 4 rows at a time, all blocks in
    order (each quad's accumulators in registers), then the next 4 (module docstring)."""

    def emit(builder: Any, wbase: Any, row_bytes: Any, nb: Any, x: Any, xd: Any, xsub: Any, nsub: Any, out: Any) -> None:
        """out[0:16] = rows 0..15 at wbase (row_bytes apart, nb blocks) . the activation row
        (x: its codes, i8*; xd: its nb scales, float*; xsub: its code sums, nsub per block, i32*;
        out: float*)."""
        fn = builder.function
        pre = builder.block
        quad, blk, quad_end, done = (fn.append_basic_block(f"k1_{n}") for n in ("quad", "block", "quad_end", "done"))
        zero = ir.Constant(vec(_F32, QUAD), [0.0] * QUAD)
        one = ir.Constant(_I64, 1)
        builder.branch(quad)
        builder.position_at_end(quad)
        q = builder.phi(_I64)
        q.add_incoming(ir.Constant(_I64, 0), pre)
        first = builder.gep(wbase, [builder.mul(builder.mul(q, ir.Constant(_I64, QUAD)), row_bytes)])  # the quad's first row
        builder.cbranch(builder.icmp_signed(">", nb, ir.Constant(_I64, 0)), blk, quad_end)
        builder.position_at_end(blk)
        b = builder.phi(_I64)
        acc = builder.phi(vec(_F32, QUAD))
        b.add_incoming(ir.Constant(_I64, 0), quad)
        acc.add_incoming(zero, quad)
        boff = builder.mul(b, ir.Constant(_I64, block_bytes))
        _prefetch(builder, first, row_bytes, boff, block_bytes)
        dx = builder.load(builder.gep(xd, [b]))
        dx4 = builder.shuffle_vector(builder.insert_element(ir.Constant(vec(_F32, QUAD), ir.Undefined), dx, ir.Constant(_I32, 0)),
                                     ir.Constant(vec(_F32, QUAD), ir.Undefined), const_vec(_I32, [0] * QUAD))
        term = quad_term(builder, builder.gep(first, [boff]), row_bytes, builder.gep(x, [builder.mul(b, ir.Constant(_I64, 256))]),
                         dx4, builder.gep(xsub, [builder.mul(b, nsub)]))
        acc1 = builder.fadd(acc, term)
        b1 = builder.add(b, one)
        latch = builder.block  # (the rows' loop is in between)
        b.add_incoming(b1, latch)
        acc.add_incoming(acc1, latch)
        builder.cbranch(builder.icmp_signed("<", b1, nb), blk, quad_end)
        builder.position_at_end(quad_end)
        res = builder.phi(vec(_F32, QUAD))
        res.add_incoming(zero, quad)
        res.add_incoming(acc1, latch)
        builder.store(res, builder.bitcast(builder.gep(out, [builder.mul(q, ir.Constant(_I64, QUAD))]), vec(_F32, QUAD).as_pointer()), align=4)
        q1 = builder.add(q, one)
        q.add_incoming(q1, quad_end)
        builder.cbranch(builder.icmp_signed("<", q1, ir.Constant(_I64, ROWS // QUAD)), quad, done)
        builder.position_at_end(done)

    return emit


one_row_q4_k = _one_row(144, q4_k_term)
one_row_q6_k = _one_row(210, q6_k_term)
