"""The 32-value legacy types with their rows interleaved by eights (packed once, at load), and
the kernel that multiplies them: llama.cpp's repacking (ggml-cpu/repack.cpp) for our arithmetic.

The 16-row kernels (rows.py) read 16 rows as stored, each in its own vector, and pay per block
for a transposing tree that sums each row's lanes and for gathering the 16 rows' scales: on
AVX2 more instructions than the products. Packed, one 32-byte vector holds 4 codes of each of 8
rows side by side; its byte products with 4 activation codes broadcast to every row (vpmaddubsw,
vpdpbusd or sdot) leave each row's partial sum in its own lanes, so a block's 8 exact row sums come
out of 8 products and a few adds, and the 8 scales are one 16-byte load. Demo shapes, one
thread, Haswell target: Q5_0 2048 x 640, one activation row, 23.9 -> 73 G MAC/s.

The arithmetic is the 16-row kernels' (block_dots.py's module docstring): for each row, its
blocks in order, acc = acc + (d_x * d_w) * float(isum) (+ m_w * s_x), isum exact (Q8_0: ggml's
eight FMA lanes per row, lanes.py, in both); so a packed matrix gives every row the same bits as
the stored one (tests/test_qmm.py).

Layout: a matrix of N rows (N a multiple of 8) packed is (N / 8, nb * R) bytes; group g (rows
8g .. 8g + 7) holds, for each block b in order, a record of R bytes (R = 8 * the block's bytes):
  d[8] fp16 (MXFP4: e[8] E8M0 bytes) | m[8] fp16 (Q4_1, Q5_1) | codes
  Q8_0: 8 chunks of 32 bytes: chunk k, byte 4r + i = code 4k + i of row r (int8)
  Q4_x, Q5_x, MXFP4: 4 chunks of 32 bytes: chunk c, byte 4r + i = the row's qs byte 4c + i, whose
      low nibble is code 4c + i and high nibble code 16 + 4c + i (the file's own bytes, regrouped;
      MXFP4's nibbles index kvalues_fp4, looked up as its 16-row kernel does, offset 12)
  Q5_x: then 32 bytes of fifth bits: byte 4r + i, bit k = bit 4k + i of the row's qh (the fifth
      bit of code 4k + i)
Code chunk k (k < 8) is then codes 4k .. 4k + 3 of every row, against activation codes 4k .. 4k + 3.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import cgutils, types
from numba.extending import intrinsic

from llamacli.core.model.kernels.qmm import isa, lanes, packed_k
from llamacli.core.model.kernels.qmm import unpack as U
from llamacli.core.model.kernels.qmm.isa import concat, const_vec, vec
from llamacli.core.model.kernels.qmm.rows import _LUT, LAYOUTS, LUT_LAYOUTS, _layout, e8m0_half

GROUP = 8  # rows interleaved
PAIR_MIN_ROWS = 8  # activation rows from which the K-quants take two groups at a time (`groups` in the kernel)
# Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4 (unpack.py's type ids), and Q4_K, Q6_K (packed_k.py)
KINDS = frozenset(LAYOUTS) | frozenset(LUT_LAYOUTS) | frozenset(packed_k.KINDS)

_I8, _I16, _I32, _I64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)


def record_bytes(kind: int) -> int:
    return packed_k.RECORDS[kind] if kind in packed_k.KINDS else GROUP * _layout(kind)[0]


def _scale_bytes(kind: int) -> int:
    """Bytes of a block's scale: fp16 d, or MXFP4's E8M0 byte."""
    return 1 if kind in LUT_LAYOUTS else 2


def _code_at(kind: int) -> int:
    """Where a record's codes start: after the 8 rows' scales (and mins)."""
    return GROUP * _scale_bytes(kind) * (2 if _layout(kind)[4] >= 0 else 1)


@njit(cache=True, nogil=True)
def _pack(w, bsize, qs_at, qh_at, m_at, eight_bit, scale_bytes, code_at, out):  # type: ignore[no-untyped-def]
    """out (N / 8, nb * 8 * bsize) = w (N, nb * bsize) interleaved (module docstring)."""
    rec = GROUP * bsize
    n_groups = out.shape[0]
    nb = w.shape[1] // bsize
    for g in range(n_groups):
        for b in range(nb):
            o = b * rec
            for r in range(GROUP):
                src = w[g * GROUP + r]
                s = b * bsize
                for i in range(scale_bytes):
                    out[g, o + scale_bytes * r + i] = src[s + i]
                if m_at >= 0:
                    out[g, o + 16 + 2 * r] = src[s + m_at]
                    out[g, o + 16 + 2 * r + 1] = src[s + m_at + 1]
                if eight_bit:  # Q8_0: 32 int8 codes
                    for k in range(8):
                        for i in range(4):
                            out[g, o + code_at + 32 * k + 4 * r + i] = src[s + 2 + 4 * k + i]
                else:
                    for c in range(4):
                        for i in range(4):
                            out[g, o + code_at + 32 * c + 4 * r + i] = src[s + qs_at + 4 * c + i]
                    if qh_at >= 0:
                        qh = np.uint32(src[s + qh_at]) | (np.uint32(src[s + qh_at + 1]) << 8)
                        qh |= (np.uint32(src[s + qh_at + 2]) << 16) | (np.uint32(src[s + qh_at + 3]) << 24)
                        for i in range(4):
                            bits = 0
                            for k in range(8):
                                bits |= ((qh >> np.uint32(4 * k + i)) & np.uint32(1)) << np.uint32(k)
                            out[g, o + code_at + 128 + 4 * r + i] = bits


def pack(data: np.ndarray, kind: int, out: np.ndarray | None = None) -> np.ndarray:
    """The packed form (module docstring) of a matrix (N, row bytes) of type `kind`, N a
    multiple of GROUP, written into `out` ((N / GROUP, row bytes * GROUP) uint8) if given, else
    into a new array; returned read-only, as the mapped file's matrices (one compiled signature)."""
    n, row_bytes = data.shape
    if out is None:
        out = np.empty((n // GROUP, row_bytes * GROUP), dtype=np.uint8)
    assert out.shape == (n // GROUP, row_bytes * GROUP) and out.dtype == np.uint8
    if kind in packed_k.KINDS:
        packed_k.pack(data, kind, out)
    else:
        bsize, qs_at, qh_at, _, m_at = _layout(kind)
        _pack(data, bsize, qs_at, qh_at, m_at, kind == 4, _scale_bytes(kind), _code_at(kind), out)
    res = out.view(np.ndarray)
    res.flags.writeable = False
    return res


def _splat(builder: Any, v: Any, n: int) -> Any:
    vt = vec(v.type, n)
    one = builder.insert_element(ir.Constant(vt, ir.Undefined), v, ir.Constant(_I32, 0))
    return builder.shuffle_vector(one, ir.Constant(vt, ir.Undefined), const_vec(_I32, [0] * n))


def _load(builder: Any, p: Any, at: int, vt: ir.Type) -> Any:
    return builder.load(builder.bitcast(builder.gep(p, [ir.Constant(_I64, at)]), vt.as_pointer()), align=1)


def _codes(builder: Any, rec: Any, kind: int) -> list[Any]:
    """The 8 code chunks (<32 x i8>) of a record: Q8_0's signed codes, the others' unsigned
    (0..31, before their offset; MXFP4's table entries plus 12)."""
    qh_at = _layout(kind)[2]
    at = _code_at(kind)
    v32 = vec(_I8, 32)
    if kind == 4:
        return [_load(builder, rec, at + 32 * k, v32) for k in range(8)]
    m15 = const_vec(_I8, [15] * 32)
    nib = [_load(builder, rec, at + 32 * c, v32) for c in range(4)]
    codes = [builder.and_(v, m15) for v in nib] + [builder.and_(builder.lshr(v, const_vec(_I8, [4] * 32)), m15) for v in nib]
    if kind in _LUT:
        codes = [isa.lookup16(builder, _LUT[kind], c) for c in codes]
    if qh_at >= 0:  # bit k of each byte to bit 4: a shift of 16-bit words (a bit moved by less
        # than 8 stays in its byte: the mask keeps bit 4 of each), an and, an or
        bits = builder.bitcast(_load(builder, rec, at + 128, v32), vec(_I16, 16))
        for k in range(8):
            moved = bits if k == 4 else builder.shl(bits, const_vec(_I16, [4 - k] * 16)) if k < 4 else builder.lshr(bits, const_vec(_I16, [k - 4] * 16))
            codes[k] = builder.or_(codes[k], builder.and_(builder.bitcast(moved, v32), const_vec(_I8, [16] * 32)))
    return codes


def _row_sums(builder: Any, codes: list[Any], xq: list[Any]) -> Any:
    """<8 x i32>: each row's sum over the 8 chunks of code * activation code (exact), for the
    unsigned codes (the nibble types)."""
    acc8 = ir.Constant(vec(_I32, 8), [0] * 8)
    if isa.TARGET.dot4:  # codes 0..31 (MXFP4's 0..24): vpdpbusd or sdot
        for u, s in zip(codes, xq):
            acc8 = isa.dot4(builder, acc8, u, s)
        return acc8
    pairs = [isa.madd_u8(builder, u, s) for u, s in zip(codes, xq)]
    # unsigned codes < 32: |pair| <= 2 * 31 * 128, four of them fit int16
    for h in range(2):
        s16 = pairs[4 * h]
        for p in pairs[4 * h + 1 : 4 * h + 4]:
            s16 = builder.add(s16, p)
        acc8 = builder.add(acc8, isa.quad_sums(builder, s16))
    return acc8


def _chunk_sums(builder: Any, codes: list[Any], xq: list[Any]) -> Any:
    """Q8_0: <64 x i32>, lane 8k + r the sum of chunk k's 4 products of row r: ggml's lane k
    of the row (core/model/kernels/qmm/lanes.py). ggml's sign trick: |q| times x with q's sign
    (rows.py, `_legacy_terms_bytes`), |pair| <= 2 * 128 * 127; sdot takes the signed codes as
    they are (exact for every code)."""
    zero8 = ir.Constant(vec(_I32, 8), [0] * 8)
    if isa.TARGET.sdot_bytes:
        return concat(builder, [isa.sdot(builder, zero8, q, x) for q, x in zip(codes, xq)])
    zero = ir.Constant(vec(_I8, 32), [0] * 32)
    parts = [(builder.select(builder.icmp_signed("<", q, zero), builder.sub(zero, q), q), isa.sign_i8(builder, x, q))
             for q, x in zip(codes, xq)]
    if isa.TARGET.dpbusd_bytes:
        return concat(builder, [isa.dpbusd(builder, zero8, u, s) for u, s in parts])
    return concat(builder, [isa.quad_sums(builder, isa.madd_u8(builder, u, s)) for u, s in parts])


def _make_packed_dot(kind: int) -> Any:
    k_quant = kind in packed_k.KINDS
    _, _, _, offset, m_at = (0, 0, 0, 0, -1) if k_quant else _layout(kind)
    rec_bytes = record_bytes(kind)
    n_acc = lanes.LANES if kind == 4 else 1  # Q8_0: ggml's 8 lanes per row (lanes.py)

    @intrinsic
    def packed_dot(typingctx: Any, w: Any, g0: Any, g1: Any, x: Any, xd: Any, xs: Any, xb: Any, out: Any, acc: Any) -> Any:
        """out[t, 8g .. 8g + 7] for groups g0 <= g < g1 of the packed w (N / 8, nb * R) and every
        activation row t: x (T, K) int8 codes, xd (T, nb) scales, xs (T, nb) Q8_1 sums (Q4_1,
        Q5_1), xb (T, nb, 1) the codes' sums per block (Q4_0, Q5_0: the offset's share; K-quants:
        (T, nb, 8 or 16) per sub-block), out (T, N); acc (>= T, 16) float32 scratch for several
        rows (one row, and Q8_0's rows, keep their accumulators in registers)."""
        sig = types.void(w, g0, g1, x, xd, xs, xb, out, acc)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            isa.set_target(context)
            f32 = ir.FloatType()
            vf = vec(f32, GROUP)
            wa, xa, xda, xsa, xba, oa, aa = (context.make_array(signature.args[i])(context, builder, args[i]) for i in (0, 3, 4, 5, 6, 7, 8))
            i64 = [builder.sext(a, _I64) if a.type != _I64 else a for a in (args[1], args[2])]
            g0_, g1_ = i64
            row_bytes = builder.extract_value(wa.strides, 0)
            nb = builder.udiv(builder.extract_value(wa.shape, 1), ir.Constant(_I64, rec_bytes))
            n_tok = builder.extract_value(xa.shape, 0)
            k_len = builder.extract_value(xa.shape, 1)
            xd_len = builder.extract_value(xda.shape, 1)
            xs_len = builder.extract_value(xsa.shape, 1)
            xb_len = builder.mul(builder.extract_value(xba.shape, 1), builder.extract_value(xba.shape, 2))
            n_out = builder.extract_value(oa.shape, 1)
            pf = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [_I8.as_pointer(), _I32, _I32, _I32]), "llvm.prefetch.p0i8")

            def loop(lo: Any, hi: Any, body: Any, name: str, init: Any = None) -> Any:
                """for i in lo .. hi - 1: v = body(i, v) (v from init; without init, body(i)),
                from the current block; returns the last v (init when there was none)."""
                pre = builder.block
                head = builder.function.append_basic_block(name)
                after = builder.function.append_basic_block(name + "_end")
                builder.cbranch(builder.icmp_signed("<", lo, hi), head, after)
                builder.position_at_end(head)
                i = builder.phi(_I64)
                i.add_incoming(lo, pre)
                v: Any = builder.phi(init.type) if init is not None else None
                if v is not None:
                    v.add_incoming(init, pre)
                v1 = body(i) if v is None else body(i, v)
                i1 = builder.add(i, ir.Constant(_I64, 1))
                last = builder.block
                i.add_incoming(i1, last)
                if v is not None:
                    v.add_incoming(v1, last)
                builder.cbranch(builder.icmp_signed("<", i1, hi), head, after)
                builder.position_at_end(after)
                if init is None:
                    return None
                out_v = builder.phi(init.type)
                out_v.add_incoming(init, pre)
                out_v.add_incoming(v1, last)
                return out_v

            def record(gbases: list[Any], b: Any, once: bool = False) -> Any:
                """Block b of 1 group (2 for the K-quants' 16-row pass): its scales, mins (or None)
                and 8 code chunks; once: for one activation row (the K-quants then unpack each
                group of codes where it is multiplied)."""
                recs = []
                for gbase in gbases:
                    rec = builder.gep(gbase, [builder.mul(b, ir.Constant(_I64, rec_bytes))])
                    for k in range(0, rec_bytes, 64):  # the records ahead (a group's are contiguous)
                        builder.call(pf, [builder.gep(rec, [ir.Constant(_I64, 8 * rec_bytes + k)]),
                                          ir.Constant(_I32, 0), ir.Constant(_I32, 3), ir.Constant(_I32, 1)])
                    recs.append(rec)
                if k_quant:
                    return (packed_k.record if kind == U.Q4_K else packed_k.record_q6)(builder, recs, eager=not once)
                rec = recs[0]
                if kind in LUT_LAYOUTS:
                    d = e8m0_half(builder, _load(builder, rec, 0, vec(_I8, GROUP)))
                else:
                    d = builder.fpext(_load(builder, rec, 0, vec(ir.HalfType(), GROUP)), vf)
                mins = builder.fpext(_load(builder, rec, 16, vec(ir.HalfType(), GROUP)), vf) if m_at >= 0 else None
                return d, mins, _codes(builder, rec, kind)

            def x_chunks(t: Any, b: Any) -> list[Any]:
                """Activation row t's codes of block b: 8 chunks of 4, each broadcast to the 8 rows."""
                xt = builder.bitcast(builder.gep(xa.data, [builder.add(builder.mul(t, k_len), builder.mul(b, ir.Constant(_I64, 32)))]),
                                     _I32.as_pointer())
                return [builder.bitcast(_splat(builder, builder.load(builder.gep(xt, [ir.Constant(_I64, k)]), align=1), GROUP),
                                        vec(_I8, 32)) for k in range(8)]

            def x_scale(t: Any, b: Any, n: int) -> Any:
                """Activation row t's scale of block b, splatted to n lanes."""
                return _splat(builder, builder.load(builder.gep(xda.data, [builder.add(builder.mul(t, xd_len), b)])), n)

            def terms(state: tuple[Any, Any, Any], b: Any, t: Any) -> Any:
                """<n x float>: block b's terms of the n rows of `state` for activation row t."""
                if k_quant:  # xb: (T, nb, 8 or 16) the codes' sums per sub-block
                    xt8 = builder.gep(xa.data, [builder.add(builder.mul(t, k_len), builder.mul(b, ir.Constant(_I64, 256)))])
                    dx = x_scale(t, b, state[0].type.count)
                    xsub = builder.gep(xba.data, [builder.add(builder.mul(t, xb_len), builder.mul(b, ir.Constant(_I64, packed_k.NSUB[kind])))])
                    return (packed_k.terms if kind == U.Q4_K else packed_k.terms_q6)(builder, state, xt8, dx, xsub)
                d, mins, codes = state
                isum = _row_sums(builder, codes, x_chunks(t, b))
                if offset:  # codes stored before their offset: - offset * sum(x)
                    xsum = builder.load(builder.gep(xba.data, [builder.add(builder.mul(t, xb_len), b)]))
                    isum = builder.sub(isum, _splat(builder, builder.mul(xsum, ir.Constant(_I32, offset)), GROUP))
                term = builder.fmul(builder.fmul(x_scale(t, b, GROUP), d), builder.sitofp(isum, vf))
                if mins is not None:
                    sx = _splat(builder, builder.load(builder.gep(xsa.data, [builder.add(builder.mul(t, xs_len), b)])), GROUP)
                    term = builder.fadd(term, builder.fmul(mins, sx))
                return term

            def add(state: tuple[Any, Any, Any], b: Any, t: Any, acc: Any) -> Any:
                """acc with block b of the rows of `state` for activation row t added: <n x float>
                (block_dots.py's order) or Q8_0's <64 x float>, lane 8k + r row r's lane k."""
                if kind != 4:
                    return builder.fadd(acc, terms(state, b, t))
                d, _, codes = state  # acc[k] = fma(d_w * d_x, float(lane k), acc[k])
                dd = builder.fmul(x_scale(t, b, GROUP), d)
                dd64 = builder.shuffle_vector(dd, dd, const_vec(_I32, list(range(GROUP)) * n_acc))
                return lanes.fma(builder, dd64, lanes.as_float(builder, _chunk_sums(builder, codes, x_chunks(t, b))), acc)

            def finish(acc: Any) -> Any:
                """The rows' results (<n x float>) from their accumulators."""
                if kind != 4:
                    return acc
                return lanes.sum_columns(builder, [builder.shuffle_vector(acc, acc, const_vec(_I32, list(range(GROUP * k, GROUP * (k + 1)))))
                                                   for k in range(n_acc)])

            def out_ptr(t: Any, g: Any, n: int) -> Any:
                return builder.bitcast(builder.gep(oa.data, [builder.add(builder.mul(t, n_out), builder.mul(g, ir.Constant(_I64, GROUP)))]),
                                       vec(f32, n).as_pointer())

            def acc_ptr(t: Any, n: int) -> Any:
                return builder.bitcast(builder.gep(aa.data, [builder.mul(t, ir.Constant(_I64, 2 * GROUP))]), vec(f32, n).as_pointer())

            def bases(g: Any, n_groups: int) -> list[Any]:
                return [builder.gep(wa.data, [builder.mul(builder.add(g, ir.Constant(_I64, i)), row_bytes)]) for i in range(n_groups)]

            def group_row(g: Any, n_groups: int, t: Any) -> None:
                """Activation row t: the accumulators in registers (Q8_0: 8 per row)."""
                gb = bases(g, n_groups)
                n = GROUP * n_groups
                zero = ir.Constant(vec(f32, n * n_acc), [0.0] * (n * n_acc))
                acc = loop(ir.Constant(_I64, 0), nb, lambda b, a: add(record(gb, b, once=True), b, t, a), "packed_block1", zero)
                builder.store(finish(acc), out_ptr(t, g, n), align=4)

            def group_one(g: Any, n_groups: int) -> None:
                """One activation row."""
                group_row(g, n_groups, ir.Constant(_I64, 0))

            def group_rows(g: Any, n_groups: int) -> None:
                """Q8_0, several rows: one at a time, its 64 accumulators in registers (its
                codes need no unpacking; the group's records stay in cache): 1.7x the
                scratch version's speed on 64 rows of 2880."""
                loop(ir.Constant(_I64, 0), n_tok, lambda t: group_row(g, n_groups, t), "packed_rows")

            def group_many(g: Any, n_groups: int) -> None:
                """Several: each block's codes unpacked once for all of them, their accumulators
                in contiguous scratch (as rows.py's)."""
                gb = bases(g, n_groups)
                n = GROUP * n_groups
                zero_i = ir.Constant(_I64, 0)
                loop(zero_i, n_tok, lambda t: builder.store(ir.Constant(vec(f32, n), [0.0] * n), acc_ptr(t, n), align=4), "packed_init")

                def block(b: Any) -> None:
                    state = record(gb, b)

                    def token(t: Any) -> None:
                        p = acc_ptr(t, n)
                        builder.store(builder.fadd(builder.load(p, align=4), terms(state, b, t)), p, align=4)

                    loop(zero_i, n_tok, token, "packed_token")

                loop(zero_i, nb, block, "packed_block")
                loop(zero_i, n_tok, lambda t: builder.store(builder.load(acc_ptr(t, n), align=4), out_ptr(t, g, n), align=4), "packed_copy")

            def groups(body: Any, name: str, pairs: bool) -> None:
                """body(g, 1) for each group g0 <= g < g1; with `pairs`, where 512-bit vpdpbusd
                is, the K-quants take groups two at a time (16 rows side by side in one vector:
                each activation broadcast serves both), the last one alone when their count is
                odd. Fewer than PAIR_MIN_ROWS activation rows take them one at a time: two
                groups read as two streams of records, and the matrices stream from memory
                (AMD EPYC, AVX-512 VNNI, one thread, one activation row: Q4_K 14336 x 4096 42 ->
                67 G MAC/s, Q6_K 27 -> 45; 4096 x 4096, in cache, 98 -> 113 and 54 -> 57; Q4_K
                14336 x 4096, 2 rows 47 -> 77, 4 rows 71 -> 92, 8 rows 107 -> 100, 16 rows
                129 -> 105)."""
                if not (pairs and k_quant and isa.TARGET.dpbusd_bytes == 64):
                    loop(g0_, g1_, lambda g: body(g, 1), name)
                    return
                two = ir.Constant(_I64, 2)
                n_pairs = builder.sdiv(builder.sub(g1_, g0_), two)
                loop(ir.Constant(_I64, 0), n_pairs, lambda p: body(builder.add(g0_, builder.mul(p, two)), 2), name + "_pairs")
                with builder.if_then(builder.icmp_signed("<", builder.add(g0_, builder.mul(n_pairs, two)), g1_)):
                    body(builder.sub(g1_, ir.Constant(_I64, 1)), 1)

            with builder.if_else(builder.icmp_signed("==", n_tok, ir.Constant(_I64, 1))) as (one, many):
                with one:
                    groups(group_one, "packed_group1", pairs=False)
                with many:
                    body = group_rows if kind == 4 else group_many
                    if k_quant and isa.TARGET.dpbusd_bytes == 64:
                        with builder.if_else(builder.icmp_signed("<", n_tok, ir.Constant(_I64, PAIR_MIN_ROWS))) as (few, more):
                            with few:
                                groups(body, "packed_group_few", pairs=False)
                            with more:
                                groups(body, "packed_group", pairs=True)
                    else:
                        groups(body, "packed_group", pairs=False)
            return context.get_dummy_value()

        return sig, codegen

    return packed_dot


packed_q4_0 = _make_packed_dot(0)
packed_q4_1 = _make_packed_dot(1)
packed_q5_0 = _make_packed_dot(2)
packed_q5_1 = _make_packed_dot(3)
packed_q8_0 = _make_packed_dot(4)
packed_mxfp4 = _make_packed_dot(U.MXFP4)
packed_q4_k = _make_packed_dot(U.Q4_K)
packed_q6_k = _make_packed_dot(U.Q6_K)
PACKED_DOTS = {0: packed_q4_0, 1: packed_q4_1, 2: packed_q5_0, 3: packed_q5_1, 4: packed_q8_0, U.MXFP4: packed_mxfp4,
               U.Q4_K: packed_q4_k, U.Q6_K: packed_q6_k}
