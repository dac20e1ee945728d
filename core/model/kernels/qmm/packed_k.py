"""Q4_K and Q6_K with their rows interleaved by eights (packed once, at load, as the 32-value
types in packed.py): llama.cpp's block_q4_Kx8 (ggml-cpu/repack.cpp) for our arithmetic.

Stored, the 16-row kernel (rows.py, `_k4_byte_terms`) spends more instructions per block on
the rows' scales (unpacking each row's 12 bytes of 6-bit scales and mins, gathering the 16
rows' d and dmin, broadcasting each sub-block's scale) and on the transposing tree than on the
byte products. Packed, the 8 rows' scale bytes sit side by side, unpacked for all 8 at once by
a few vector operations, and each 32-byte code chunk holds 4 bytes of every row: its byte
products leave each row's sums in its own lanes.

The integers are those of the stored kernels: isum = sum_j sc_j * dot(q_j, x_j), msum = sum_j
m_j * xsum_j (j the 8 sub-blocks of 32 values), and the block's term (d_x * d) * isum - (d_x *
dmin) * msum in the same float operations, so a packed matrix gives the same bits.

Record of block b of group g (rows 8g .. 8g + 7), 1152 bytes (8 x 144: the same size):
  d[8] fp16 | dmin[8] fp16 | 3 chunks of 32 bytes: chunk s, byte 4r + i = the row's scales
  byte 4s + i | 32 chunks of 32 bytes: chunk c, byte 4r + i = the row's qs byte 4c + i
qs byte 32k + l holds value 64k + l (low nibble) and 64k + 32 + l (high nibble), so the low
nibbles of chunk c are values 64k + 4(c % 8) + 0..3 of sub-block 2k (k = c // 8), the high
ones the same + 32, of sub-block 2k + 1.

Q6_K: isum = sum_g sc_g * (dot(q_g, x_g) - 32 * xsum_g) over its 16 groups of 16 values (the
stored one-row kernel's form, rows.py `_q6_k_byte_terms`), term (d_x * d) * isum. Record,
1680 bytes (8 x 210): d[8] fp16 | scales[16][8] int8 (group g of row r at 16 + 8g + r) | 16
triples of 32-byte chunks, triple g for group g (values 16g .. 16g + 15 of each row): with
c_k (k < 4) the 6-bit codes 16g + 4k + i of row r at byte 4r + i, the triple's chunks hold
c_0, c_1, c_2 in bits 0-5 and bits 0-1, 2-3, 4-5 of c_3 in bits 6-7. So a group's four code
chunks come out of three loads, three masks and c_3's three shifted pieces (11 vector
operations; the file's ql/qh split took 17: each code's nibble and its two high bits from
another byte), and the one-row kernel unpacks each group where it multiplies it (its codes
never wait in the stack: AVX2 has 16 vector registers).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit

from llamacli.core.model.kernels.qmm import isa
from llamacli.core.model.kernels.qmm import unpack as U
from llamacli.core.model.kernels.qmm.isa import const_vec, vec

GROUP = 8
BLOCK = 144  # a stored Q4_K block: d | dmin | scales[12] | qs[128]
RECORD = GROUP * BLOCK
Q6_BLOCK = 210  # a stored Q6_K block: ql[128] | qh[64] | scales[16] | d
KINDS = (U.Q4_K, U.Q6_K)
RECORDS = {U.Q4_K: RECORD, U.Q6_K: GROUP * Q6_BLOCK}
NSUB = {U.Q4_K: 8, U.Q6_K: 16}  # the activation's code sums per block (xsub) each reads

_I8, _I16, _I32, _I64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)


@njit(cache=True, nogil=True)
def pack_q4_k(w, out):  # type: ignore[no-untyped-def]
    """out (N / 8, nb * 1152) = w (N, nb * 144) interleaved (module docstring)."""
    nb = w.shape[1] // BLOCK
    for g in range(out.shape[0]):
        for b in range(nb):
            o = b * RECORD
            s = b * BLOCK
            for r in range(GROUP):
                src = w[g * GROUP + r]
                for i in range(2):
                    out[g, o + 2 * r + i] = src[s + i]
                    out[g, o + 16 + 2 * r + i] = src[s + 2 + i]
                for c in range(3):
                    for i in range(4):
                        out[g, o + 32 + 32 * c + 4 * r + i] = src[s + 4 + 4 * c + i]
                for c in range(32):
                    for i in range(4):
                        out[g, o + 128 + 32 * c + 4 * r + i] = src[s + 16 + 4 * c + i]


@njit(cache=True, nogil=True)
def pack_q6_k(w, out):  # type: ignore[no-untyped-def]
    """out (N / 8, nb * 1680) = w (N, nb * 210) regrouped (module docstring)."""
    nb = w.shape[1] // Q6_BLOCK
    rec = GROUP * Q6_BLOCK
    q = np.empty(256, dtype=np.uint8)  # one row's codes of the block, in order
    for g in range(out.shape[0]):
        for b in range(nb):
            o = b * rec
            s = b * Q6_BLOCK
            for r in range(GROUP):
                src = w[g * GROUP + r]
                for i in range(2):
                    out[g, o + 2 * r + i] = src[s + 208 + i]
                for j in range(16):
                    out[g, o + 16 + 8 * j + r] = src[s + 192 + j]
                for h in range(2):  # ggml's dequantize_row_q6_K
                    for l in range(32):
                        ql0, ql1, qh = src[s + 64 * h + l], src[s + 64 * h + 32 + l], src[s + 128 + 32 * h + l]
                        q[128 * h + l] = (ql0 & 15) | ((qh & 3) << 4)
                        q[128 * h + 32 + l] = (ql1 & 15) | (((qh >> 2) & 3) << 4)
                        q[128 * h + 64 + l] = (ql0 >> 4) | (((qh >> 4) & 3) << 4)
                        q[128 * h + 96 + l] = (ql1 >> 4) | ((qh >> 6) << 4)
                for t in range(16):
                    for i in range(4):
                        top = q[16 * t + 12 + i]
                        for k in range(3):
                            out[g, o + 144 + 32 * (3 * t + k) + 4 * r + i] = q[16 * t + 4 * k + i] | (((top >> (2 * k)) & 3) << 6)


def _load(builder: Any, p: Any, at: int, vt: ir.Type) -> Any:
    return builder.load(builder.bitcast(builder.gep(p, [ir.Constant(_I64, at)]), vt.as_pointer()), align=1)


def _ld(builder: Any, recs: list[Any], at: int, vt: ir.VectorType) -> Any:
    """The vector at byte `at` of each record, side by side (rows 8k .. 8k + 7 from record k)."""
    vs = [_load(builder, r, at, vt) for r in recs]
    if len(vs) == 1:
        return vs[0]
    return builder.shuffle_vector(vs[0], vs[1], const_vec(_I32, list(range(2 * vt.count))))


def _shr(builder: Any, v: Any, n: int) -> Any:
    return builder.lshr(v, const_vec(_I8, [n] * v.type.count))


def _and(builder: Any, v: Any, m: int) -> Any:
    return builder.and_(v, const_vec(_I8, [m] * v.type.count))


def record(builder: Any, recs: list[Any], eager: bool = True) -> tuple[Any, ...]:
    """What the records of 1 or 2 groups (n = 8 or 16 rows, side by side) give every activation
    row: d, dmin (<n x float>), the 8 sub-blocks' (codes, scales), codes a function giving the
    sub-block's 8 code chunks (eager: unpacked here, once for every activation row; else where
    `terms` multiplies them) and the mins (<4n x i16>, lane 4r + j: m_j of row r, j < 4; then j >= 4).
    Scales (ggml's get_scale_min_k4): bytes 0-3 hold sc_0..3 (low 6 bits) and the top bits of
    sc_4..7, bytes 4-7 m_0..3 and the top bits of m_4..7, bytes 8-11 the low nibbles of sc_4..7
    (low) and m_4..7 (high)."""
    n = GROUP * len(recs)
    vf = vec(ir.FloatType(), n)
    d = builder.fpext(_ld(builder, recs, 0, vec(ir.HalfType(), GROUP)), vf)
    dmin = builder.fpext(_ld(builder, recs, 16, vec(ir.HalfType(), GROUP)), vf)
    v32 = vec(_I8, 32)
    s0, s1, s2 = (_ld(builder, recs, 32 + 32 * c, v32) for c in range(3))
    sc03, m03 = _and(builder, s0, 63), _and(builder, s1, 63)
    sc47 = builder.or_(_and(builder, s2, 15), builder.shl(_shr(builder, s0, 6), const_vec(_I8, [4] * 4 * n)))
    m47 = builder.or_(_shr(builder, s2, 4), builder.shl(_shr(builder, s1, 6), const_vec(_I8, [4] * 4 * n)))
    subs = []
    for j in range(8):
        # the scale of sub-block j for each row r, twice (lanes 2r, 2r + 1: the pair sums')
        src = sc03 if j < 4 else sc47
        # (with vpdpbusd or sdot: once, as int32 lanes r)
        if isa.TARGET.dot4:
            scale = builder.zext(builder.shuffle_vector(src, src, const_vec(_I32, [4 * r + j % 4 for r in range(n)])), vec(_I32, n))
        else:
            pair = builder.shuffle_vector(src, src, const_vec(_I32, [4 * (i // 2) + j % 4 for i in range(2 * n)]))
            scale = builder.zext(pair, vec(_I16, 2 * n))

        def chunks(j: int = j) -> list[Any]:
            qs = [_ld(builder, recs, 128 + 32 * c, v32) for c in range(8 * (j // 2), 8 * (j // 2) + 8)]
            return [_and(builder, q, 15) if j % 2 == 0 else _shr(builder, q, 4) for q in qs]

        if eager:
            subs.append((lambda unpacked=chunks(): unpacked, scale))
        else:
            subs.append((chunks, scale))
    mins = [builder.zext(m, vec(_I16, 4 * n)) for m in (m03, m47)]
    return d, dmin, subs, mins


def terms(builder: Any, state: tuple[Any, ...], xt: Any, dx: Any, xsub: Any) -> Any:
    """<n x float>: the block's terms of the n rows of `state` for one activation row: xt its
    256 codes (i8*), dx its scale (splatted to n), xsub its 8 code sums per sub-block (i32*)."""
    d, dmin, subs, mins = state
    n = d.type.count
    f32v = vec(ir.FloatType(), n)
    xw = builder.bitcast(xt, _I32.as_pointer())
    isum = None
    for j, (codes, scale) in enumerate(subs):
        chunks = codes()
        xqs = []  # values 4i .. 4i + 3 of sub-block j, for every row
        for i in range(8):
            word = builder.load(builder.gep(xw, [ir.Constant(_I64, 16 * (j // 2) + 8 * (j % 2) + i)]), align=1)
            xqs.append(builder.bitcast(_splat(builder, word, n), vec(_I8, 4 * n)))
        if isa.TARGET.dot4:  # <n x i32> the row's dot (codes 0..15), times its scale
            dot = ir.Constant(vec(_I32, n), [0] * n)
            for q, xq in zip(chunks, xqs):
                dot = isa.dot4(builder, dot, q, xq)
            t = builder.mul(dot, scale)
        else:
            s16 = None  # <2n x i16>: lanes 2r, 2r + 1 the row's pair sums (|each| <= 8 * 2 * 15 * 128 < 2^15)
            for q, xq in zip(chunks, xqs):
                p = isa.madd_u8(builder, q, xq)
                s16 = p if s16 is None else builder.add(s16, p)
            t = isa.madd_i16(builder, s16, scale)  # <n x i32>: sc_j * the row's dot
        isum = t if isum is None else builder.add(isum, t)
    # msum: sum_j m_j * xsum_j; |xsum_j| <= 32 * 128 fits int16, as m_j <= 63 does
    xs = builder.trunc(builder.load(builder.bitcast(xsub, vec(_I32, 8).as_pointer()), align=4), vec(_I16, 8))
    m2 = [isa.madd_i16(builder, m, builder.shuffle_vector(xs, xs, const_vec(_I32, [4 * h + i % 4 for i in range(4 * n)])))
          for h, m in enumerate(mins)]
    m16 = builder.add(m2[0], m2[1])  # <2n x i32>: lanes 2r, 2r + 1 of row r
    msum = builder.add(builder.shuffle_vector(m16, m16, const_vec(_I32, list(range(0, 2 * n, 2)))),
                       builder.shuffle_vector(m16, m16, const_vec(_I32, list(range(1, 2 * n, 2)))))
    t1 = builder.fmul(builder.fmul(dx, d), builder.sitofp(isum, f32v))
    t2 = builder.fmul(builder.fmul(dx, dmin), builder.sitofp(msum, f32v))
    return builder.fsub(t1, t2)


def record_q6(builder: Any, recs: list[Any], eager: bool = True) -> tuple[Any, ...]:
    """The Q6_K records of 1 or 2 groups (n = 8 or 16 rows) for every activation row: d (<n x
    float>), the scales (<16n x i8>: group g of row r at 128 (r // 8) + 8g + r % 8) and
    `codes(g)`: group g's 4 code chunks (<4n x i8>, unsigned 6-bit codes), chunk k holding its
    values 4k .. 4k + 3. eager: unpacked here, once for every activation row; else where
    `terms_q6` asks for them (one activation row: each group unpacked where it is multiplied)."""
    n = GROUP * len(recs)
    d = builder.fpext(_ld(builder, recs, 0, vec(ir.HalfType(), GROUP)), vec(ir.FloatType(), n))
    scales = _ld(builder, recs, 16, vec(_I8, 128))
    v32 = vec(_I8, 32)

    def codes(g: int) -> list[Any]:
        c = [_ld(builder, recs, 144 + 32 * (3 * g + k), v32) for k in range(3)]
        top = builder.or_(builder.or_(_shr(builder, c[0], 6), _and(builder, _shr(builder, c[1], 4), 12)),
                          _and(builder, _shr(builder, c[2], 2), 48))
        return [_and(builder, v, 63) for v in c] + [top]

    if eager:
        unpacked = [codes(g) for g in range(16)]
        return d, scales, unpacked.__getitem__
    return d, scales, codes


def terms_q6(builder: Any, state: tuple[Any, ...], xt: Any, dx: Any, xsub: Any) -> Any:
    """<n x float>: a Q6_K block's terms of the n rows of `state` for one activation row (xsub:
    its 16 code sums per 16 values)."""
    d, scales, codes = state
    n = d.type.count

    def at(g: int, r: int) -> int:  # the scale of group g, row r, in `scales`
        return 128 * (r // GROUP) + 8 * g + r % GROUP

    xw = builder.bitcast(xt, _I32.as_pointer())

    def x4(k: int) -> Any:  # activation codes 4k .. 4k + 3, broadcast to the n rows
        return builder.bitcast(_splat(builder, builder.load(builder.gep(xw, [ir.Constant(_I64, k)]), align=1), n), vec(_I8, 4 * n))

    isum = None
    for g in range(16):  # group g: chunks 4g .. 4g + 3, one scale per row
        cg = codes(g)
        if isa.TARGET.dot4:  # codes 0..63
            dot = ir.Constant(vec(_I32, n), [0] * n)
            for k in range(4):
                dot = isa.dot4(builder, dot, cg[k], x4(4 * g + k))
            sc = builder.sext(builder.shuffle_vector(scales, scales, const_vec(_I32, [at(g, r) for r in range(n)])), vec(_I32, n))
            t = builder.mul(dot, sc)
        else:  # two chunks' pair sums fit int16 (|each| <= 2 * 2 * 63 * 128)
            pair = builder.sext(builder.shuffle_vector(scales, scales, const_vec(_I32, [at(g, i // 2) for i in range(2 * n)])), vec(_I16, 2 * n))
            t = None
            for k in (0, 2):
                p = builder.add(isa.madd_u8(builder, cg[k], x4(4 * g + k)), isa.madd_u8(builder, cg[k + 1], x4(4 * g + k + 1)))
                tk = isa.madd_i16(builder, p, pair)
                t = tk if t is None else builder.add(t, tk)
        isum = t if isum is None else builder.add(isum, t)
    # the codes' offset: - 32 * sum_g sc_g * xsum_g (|xsum_g| <= 16 * 128 fits int16)
    xs = builder.trunc(builder.load(builder.bitcast(xsub, vec(_I32, 16).as_pointer()), align=4), vec(_I16, 16))
    off = None
    for g in range(0, 16, 2):
        scp = builder.sext(builder.shuffle_vector(scales, scales, const_vec(_I32, [at(g + i % 2, i // 2) for i in range(2 * n)])), vec(_I16, 2 * n))
        t = isa.madd_i16(builder, scp, builder.shuffle_vector(xs, xs, const_vec(_I32, [g + i % 2 for i in range(2 * n)])))
        off = t if off is None else builder.add(off, t)
    isum = builder.sub(isum, builder.mul(off, const_vec(_I32, [32] * n)))
    return builder.fmul(builder.fmul(dx, d), builder.sitofp(isum, vec(ir.FloatType(), n)))


def _splat(builder: Any, v: Any, n: int) -> Any:
    vt = vec(v.type, n)
    one = builder.insert_element(ir.Constant(vt, ir.Undefined), v, ir.Constant(_I32, 0))
    return builder.shuffle_vector(one, ir.Constant(vt, ir.Undefined), const_vec(_I32, [0] * n))


def pack(data: np.ndarray, kind: int, out: np.ndarray) -> None:
    """Write the packed form of a Q4_K or Q6_K matrix (N, row bytes), N a multiple of 8, into
    out (N / 8, row bytes * 8) (packed.pack)."""
    (pack_q4_k if kind == U.Q4_K else pack_q6_k)(data, out)
