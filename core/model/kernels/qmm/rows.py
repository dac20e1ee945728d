"""The 16-row kernels: 16 weight rows against one or more activation rows.

For each block b, in order, the 16 rows' exact integer dots are formed as vectors of int32
partial sums (one row, or two rows side by side, per vector: byte products, vpdpbusd, sdot or
vpmaddubsw, or int16 products, vpmaddwd; each type's instructions chosen from the target's
features, core/model/kernels/qmm/isa.py), and reduced together by a transposing shuffle tree
(2 shuffles and an add per pair of vectors and level) into one vector holding the 16 rows' sums. The float terms of the 16 rows are then one vector
operation each:

    acc[i] = acc[i] + (d_x[b] * d_w[i, b]) * float(isum[i, b])          (+ m_w[i, b] * s_x[b])

which is exactly core/model/kernels/qmm/block_dots.py's arithmetic for each row (every operation rounded to
float32, blocks added in order, no FMA contraction), so the result is the same bits as the
one-row path on every CPU. The per-block horizontal sums of the one-row path cost more than
the multiplications; here they cost 2 shuffles and an add per row and block, in registers.

Q8_0 keeps ggml's order instead (core/model/kernels/qmm/lanes.py, `Q8_LANES`): the vectors of
two rows' lane sums are not reduced per block but multiplied into 8 lanes per row with an FMA
each, and summed as hsum_float_8 once, after the last block: a Q8_0 matmul gives libggml's
bits, and with no tree per block 64 activation rows ran 1.5x as fast (2880 wide, AVX-512).

Per type (ggml-common.h layouts; d and m are fp16):
  Q8_0  d | qs[32] int8                      code = qs
  Q4_0  d | qs[16]                           code = nibble - 8 (low nibbles first)
  Q4_1  d | m | qs[16]                       code = nibble, + m * s_x
  Q5_0  d | qh u32 | qs[16]                  code = nibble | bit << 4, - 16
  Q5_1  d | m | qh u32 | qs[16]              code = nibble | bit << 4, + m * s_x
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from llamacli.core.model.kernels.grids import KVALUES_FP4
from llamacli.core.model.kernels.qmm import isa, lanes, rows_k1
from llamacli.core.model.kernels.qmm.isa import concat, const_vec as _const_vec, vec as _vec
from llamacli.core.model.kernels.qmm.unpack import MXFP4

ROWS = 16  # weight rows per call: one vector of 16 float32 accumulators

# (block bytes, offset of qs, offset of qh or -1, code offset, offset of m or -1) per type id
# of core/model/kernels/qmm/unpack.py (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 = 0, 1, 2, 3, 4).
LAYOUTS: dict[int, tuple[int, int, int, int, int]] = {
    0: (18, 2, -1, 8, -1),
    1: (20, 4, -1, 0, 2),
    2: (22, 6, 2, 16, -1),
    3: (24, 8, 4, 0, 2),
    4: (34, 2, -1, 0, -1),
}

# The 32-value types whose codes are table entries, looked up from each nibble (isa.lookup16):
# MXFP4 (e u8 | qs[16]), code = kvalues_fp4[nibble], low nibbles first; the table shifted by
# its offset 12 (0..24, unsigned: the byte products' operand) and the E8M0 byte as its scale.
LUT_LAYOUTS: dict[int, tuple[int, int, int, int, int]] = {MXFP4: (17, 1, -1, 12, -1)}
_LUT = {MXFP4: [int(v) + 12 for v in KVALUES_FP4]}


def _layout(kind: int) -> tuple[int, int, int, int, int]:
    return LAYOUTS[kind] if kind in LAYOUTS else LUT_LAYOUTS[kind]


_I8, _I16, _I32, _I64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)


def _splat(builder: Any, v: Any, n: int) -> Any:
    vt = _vec(v.type, n)
    one = builder.insert_element(ir.Constant(vt, ir.Undefined), v, ir.Constant(_I32, 0))
    return builder.shuffle_vector(one, ir.Constant(vt, ir.Undefined), _const_vec(_I32, [0] * n))


def block_codes(builder: Any, base: Any, kind: int, signed: bool = True) -> Any:
    """The 32 int8 codes of the block at byte pointer `base`, as <32 x i8>; signed=False: the
    nibble types' codes as stored (0..31, before their offset is subtracted; MXFP4's table
    entries plus 12)."""
    _, qs_at, qh_at, offset, _ = _layout(kind)
    qs_ptr = builder.gep(base, [ir.Constant(_I64, qs_at)])
    if kind == 4:
        return builder.load(builder.bitcast(qs_ptr, _vec(_I8, 32).as_pointer()), align=1)
    qs = builder.load(builder.bitcast(qs_ptr, _vec(_I8, 16).as_pointer()), align=1)
    lo = builder.and_(qs, _const_vec(_I8, [15] * 16))
    hi = builder.lshr(qs, _const_vec(_I8, [4] * 16))
    q = builder.shuffle_vector(lo, hi, _const_vec(_I32, list(range(32))))
    if kind in _LUT:
        q = isa.lookup16(builder, _LUT[kind], q)
    if qh_at >= 0:
        qh_ptr = builder.gep(base, [ir.Constant(_I64, qh_at)])
        # bit j of the little-endian u32 = bit j % 8 of byte j // 8: each byte copied to 8
        # lanes, tested against its lane's bit (a byte shuffle, an and, a compare)
        qh = builder.load(builder.bitcast(qh_ptr, _vec(_I8, 4).as_pointer()), align=1)
        spread = builder.shuffle_vector(qh, qh, _const_vec(_I32, [j // 8 for j in range(32)]))
        lane_bit = _const_vec(_I8, [1 << (j % 8) for j in range(32)])
        set_ = builder.icmp_unsigned("!=", builder.and_(spread, lane_bit), ir.Constant(_vec(_I8, 32), [0] * 32))
        q = builder.or_(q, builder.select(set_, _const_vec(_I8, [16] * 32), ir.Constant(_vec(_I8, 32), [0] * 32)))
    if offset and signed:
        q = builder.sub(q, _const_vec(_I8, [offset] * 32))
    return q


def _tree_plan(start: list[list[int]], width: int) -> tuple[list[tuple[list[int], list[int]]], list[int]]:
    """The shuffle masks of a transposing reduction of vectors of 16 lanes whose lanes hold
    partial sums of the rows named in `start` (start[k][lane]: the row; groups of `width`
    lanes hold one row each), and the final permutation that puts row i's sum in lane i. At
    level L (group width w), each pair (a, b) becomes (first halves of a's and b's groups) +
    (second halves)."""
    levels = []
    rows = start
    while len(rows) > 1:
        half = width // 2
        # lanes of the result: group by group, the first (mask_lo) or second (mask_hi) half of
        # a's group, then of b's (b's lanes are 16..31 of the shuffle's input)
        mask_lo = [v for g in range(16 // width) for v in ([g * width + j for j in range(half)] + [16 + g * width + j for j in range(half)])]
        mask_hi = [v + half for v in mask_lo]
        nxt = []
        for k in range(0, len(rows), 2):
            both = rows[k] + rows[k + 1]
            la = [both[m] for m in mask_lo]
            lb = [both[m] for m in mask_hi]
            assert la == lb
            nxt.append(la)
        levels.append((mask_lo, mask_hi))
        rows = nxt
        width = half
    assert width == 1
    final = rows[0]
    perm = [final.index(i) for i in range(16)]
    return levels, perm


# 16 vectors, one row each (16 lanes of a row's partial sums)
_LEVELS, _PERM = _tree_plan([[i] * 16 for i in range(16)], 16)
# 8 vectors of two rows each (lanes 0-7: row 2k, lanes 8-15: row 2k + 1)
_LEVELS2, _PERM2 = _tree_plan([[2 * k] * 8 + [2 * k + 1] * 8 for k in range(8)], 8)


def _reduce16(builder: Any, vecs: list[Any], plan: tuple[list[tuple[list[int], list[int]]], list[int]] = (_LEVELS, _PERM)) -> Any:
    """16 vectors <16 x i32> -> <16 x i32> whose lane i is the sum of vecs[i]'s lanes (exact);
    with plan (_LEVELS2, _PERM2): 8 vectors of two rows' partial sums each."""
    levels, perm = plan
    for mask_lo, mask_hi in levels:
        nxt = []
        for k in range(0, len(vecs), 2):
            a = builder.shuffle_vector(vecs[k], vecs[k + 1], _const_vec(_I32, mask_lo))
            b = builder.shuffle_vector(vecs[k], vecs[k + 1], _const_vec(_I32, mask_hi))
            nxt.append(builder.add(a, b))
        vecs = nxt
    return builder.shuffle_vector(vecs[0], vecs[0], _const_vec(_I32, perm))


def _gather_f16(builder: Any, ptrs: list[Any], at: int) -> Any:
    """The fp16 fields at byte `at` of each of the 16 blocks, as <16 x float> (exact)."""
    v = ir.Constant(_vec(ir.HalfType(), ROWS), ir.Undefined)
    for i, p in enumerate(ptrs):
        h = builder.load(builder.bitcast(builder.gep(p, [ir.Constant(_I64, at)]), ir.HalfType().as_pointer()), align=1)
        v = builder.insert_element(v, h, ir.Constant(_I32, i))
    return builder.fpext(v, _vec(ir.FloatType(), ROWS))


def _gather_scales(builder: Any, ptrs: list[Any], kind: int) -> Any:
    """The 16 blocks' scales as <16 x float> (exact): the fp16 d at byte 0, or MXFP4's E8M0
    byte e as GGML_E8M0_TO_FP32_HALF (2^(e - 128): bits (e - 1) << 23, 0x00200000 << e for e < 2)."""
    if kind != MXFP4:
        return _gather_f16(builder, ptrs, 0)
    v = ir.Constant(_vec(_I8, ROWS), ir.Undefined)
    for i, p in enumerate(ptrs):
        v = builder.insert_element(v, builder.load(p), ir.Constant(_I32, i))
    return e8m0_half(builder, v)


def e8m0_half(builder: Any, v: Any) -> Any:
    """<n x i8> E8M0 bytes e -> <n x float> GGML_E8M0_TO_FP32_HALF(e) (exact)."""
    n = v.type.count
    e = builder.zext(v, _vec(_I32, n))
    normal = builder.shl(builder.sub(e, _const_vec(_I32, [1] * n)), _const_vec(_I32, [23] * n))
    sub = builder.shl(_const_vec(_I32, [0x00200000] * n), e)
    bits = builder.select(builder.icmp_unsigned("<", e, _const_vec(_I32, [2] * n)), sub, normal)
    return builder.bitcast(bits, _vec(ir.FloatType(), n))


def _prefetch_next(builder: Any, wbase: Any, row_bytes: Any, boff: Any, bsize: int) -> None:
    """Prefetch the next 16-row group's bytes [16 * boff, 16 * (boff + bsize)) (its 16 * bsize
    bytes per block step, in cache lines): the 16 rows are read as 16 interleaved streams,
    which the hardware prefetchers follow too late for a matrix that does not fit in cache.
    A prefetch past the end of the matrix is harmless (no fault)."""
    fnty = ir.FunctionType(ir.VoidType(), [_I8.as_pointer(), _I32, _I32, _I32])
    fn = builder.module.globals.get("llvm.prefetch.p0i8") or ir.Function(builder.module, fnty, "llvm.prefetch.p0i8")
    nxt = builder.gep(wbase, [builder.add(builder.mul(row_bytes, ir.Constant(_I64, ROWS)), builder.mul(boff, ir.Constant(_I64, ROWS)))])
    for k in range(0, ROWS * bsize, 64):
        p = builder.gep(nxt, [ir.Constant(_I64, k)])
        builder.call(fn, [p, ir.Constant(_I32, 0), ir.Constant(_I32, 3), ir.Constant(_I32, 1)])


def _legacy_x(builder: Any, x: Any, b: Any) -> Any:
    """The activation's 32 codes of block b, <32 x i8>."""
    return builder.load(builder.bitcast(builder.gep(x, [builder.mul(b, ir.Constant(_I64, 32))]), _vec(_I8, 32).as_pointer()), align=1)


def _legacy_float_terms(builder: Any, isum: Any, dx: Any, d: Any, mins: Any, sx: Any) -> Any:
    """The 16 rows' float terms of a block: (d_x * d_w) * float(isum) (+ m_w * s_x)."""
    term = builder.fmul(builder.fmul(dx, d), builder.sitofp(isum, _vec(ir.FloatType(), ROWS)))
    if mins is not None:
        term = builder.fadd(term, builder.fmul(mins, sx))
    return term


def _row_pairs(builder: Any, codes: list[Any]) -> list[Any]:
    """16 rows' <32 x i8> codes -> 8 <64 x i8>: rows 2k and 2k + 1 side by side."""
    return [builder.shuffle_vector(codes[2 * k], codes[2 * k + 1], _const_vec(_I32, list(range(64)))) for k in range(ROWS // 2)]


def _legacy_terms_vnni(kind: int) -> tuple[int, Any, Any]:
    """A 32-value type on CPUs with vpdpbusd (AVX512-VNNI, AVX-VNNI): `prepare` unpacks the 16
    rows' codes and fp16 fields of a block once, `terms` dots them with one activation row.

    Rows 2k and 2k + 1 share a vector (<64 x i8>: their 32 signed codes side by side), so a
    block of 16 rows is 8 vpdpbusd per activation row (16 on 256-bit vectors) and a 3-level
    tree. vpdpbusd takes one unsigned operand: the activation's codes are offset by 128
    (x ^ 0x80 = x + 128 as an unsigned byte), and each lane's accumulator starts at -128 * (the
    sum of its 4 weight codes), prepared once per block, so that every lane holds the exact sum
    of its 4 products x * q. On aarch64 with the dot product (sdot, signed times signed) the
    same lanes come from the codes as they are: no offset, the accumulators start at 0."""
    bsize, _, _, _, m_at = _layout(kind)

    def prepare(builder: Any, blocks: list[Any]) -> Any:
        pairs = _row_pairs(builder, [block_codes(builder, p, kind) for p in blocks])
        zero = ir.Constant(_vec(_I32, ROWS), [0] * ROWS)
        m128 = _const_vec(_I8, [-128] * 64)  # 0x80: 128 as the unsigned operand
        # 128 * quad sums of the codes, negated: -(128 * sum) as the accumulators' start
        starts = [zero if isa.TARGET.sdot_bytes else builder.sub(zero, isa.dpbusd(builder, zero, m128, p)) for p in pairs]
        mins = _gather_f16(builder, blocks, m_at) if m_at >= 0 else None
        return pairs, starts, _gather_scales(builder, blocks, kind), mins

    def terms(builder: Any, state: Any, blocks: list[Any], x: Any, b: Any, dx: Any, sx: Any, xsub: Any) -> Any:
        pairs, starts, d, mins = state
        xv = _legacy_x(builder, x, b)
        if isa.TARGET.sdot_bytes:
            x2 = builder.shuffle_vector(xv, xv, _const_vec(_I32, list(range(32)) * 2))
            quads = [isa.sdot(builder, st, p, x2) for st, p in zip(starts, pairs)]
        else:
            xu = builder.xor(xv, _const_vec(_I8, [-128] * 32))  # x + 128, unsigned
            x2 = builder.shuffle_vector(xu, xu, _const_vec(_I32, list(range(32)) * 2))
            quads = [isa.dpbusd(builder, st, x2, p) for st, p in zip(starts, pairs)]
        if kind == 4:  # Q8_0: ggml's lanes (Q8_LANES)
            return builder.fmul(dx, d), quads
        return _legacy_float_terms(builder, _reduce16(builder, quads, (_LEVELS2, _PERM2)), dx, d, mins, sx)

    return bsize, prepare, terms


def _legacy_terms_bytes(kind: int) -> tuple[int, Any, Any]:
    """As `_legacy_terms_vnni`, for CPUs without vpdpbusd (AVX2, AVX512-BW, the generic path):
    the same block sums, rows 2k and 2k + 1 side by side in a vector.

    The nibble types (Q4_0, Q4_1, Q5_0, Q5_1): their codes as stored, u = 0..31, times the
    activation's codes with byte products (vpmaddubsw: |pair| <= 2 * 31 * 128, no saturation),
    the pairs added into int32 (vpmaddwd with ones); the codes' offset comes back once per
    block for the 16 rows: isum = sum(u * x) - offset * sum(x).

    Q8_0's codes span the whole int8 range (u * x would saturate): ggml's sign trick, |q| (0..128,
    unsigned) times x with q's sign (vpsignb), |pair| <= 2 * 128 * 127. Exact for every weight
    code and every activation code but -128, whose negation wraps; the activation quantizer
    (acts.py) writes -128 only in a block whose scale overflowed, and that block's d is 0: its
    term (0 * d) * isum is a zero whatever isum is, and adding a zero to an accumulator that
    started at +0 never changes it (it is never -0), so the bits are those of the exact sum.
    (Widening to int16 and vpmaddwd, exact for every code, took ~8% longer on the vocabulary
    projection.)"""
    bsize, _, _, offset, m_at = _layout(kind)
    signed = kind == 4

    def prepare(builder: Any, blocks: list[Any]) -> Any:
        if signed:  # (|q|, q) per pair of rows
            q = _row_pairs(builder, [block_codes(builder, p, kind) for p in blocks])
            zero = ir.Constant(_vec(_I8, 64), [0] * 64)
            codes = [(builder.select(builder.icmp_signed("<", c, zero), builder.sub(zero, c), c), c) for c in q]
        else:
            codes = _row_pairs(builder, [block_codes(builder, p, kind, signed=False) for p in blocks])
        mins = _gather_f16(builder, blocks, m_at) if m_at >= 0 else None
        return codes, _gather_scales(builder, blocks, kind), mins

    def terms(builder: Any, state: Any, blocks: list[Any], x: Any, b: Any, dx: Any, sx: Any, xsub: Any) -> Any:
        codes, d, mins = state
        xv = _legacy_x(builder, x, b)
        x2 = builder.shuffle_vector(xv, xv, _const_vec(_I32, list(range(32)) * 2))  # for both rows of a pair
        if signed:
            pairs = [isa.madd_u8(builder, a, isa.sign_i8(builder, x2, q)) for a, q in codes]
        else:
            pairs = [isa.madd_u8(builder, p, x2) for p in codes]
        quads = [isa.quad_sums(builder, p) for p in pairs]
        if signed:  # Q8_0: ggml's lanes (Q8_LANES)
            return builder.fmul(dx, d), quads
        isum = _reduce16(builder, quads, (_LEVELS2, _PERM2))
        if offset:  # the nibble types' - offset * sum(x), the sum from byte products with ones (exact)
            quads = isa.quad_sums(builder, isa.madd_u8(builder, _const_vec(_I8, [1] * 32), xv))
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I32, [quads.type]), "llvm.vector.reduce.add.v8i32")
            xsum = builder.mul(builder.call(fn, [quads]), ir.Constant(_I32, offset))
            isum = builder.sub(isum, _splat(builder, xsum, ROWS))
        return _legacy_float_terms(builder, isum, dx, d, mins, sx)

    return bsize, prepare, terms


def _load(builder: Any, base: Any, at: int, vt: ir.Type) -> Any:
    return builder.load(builder.bitcast(builder.gep(base, [ir.Constant(_I64, at)]), vt.as_pointer()), align=1)


def _sum_pairs(builder: Any, codes: list[Any], x16: list[Any]) -> Any:
    """sum_j pairs(codes[j] . x16[j]) -> <16 x i32> (the row's block dot in 16 partial sums)."""
    acc = isa.madd_i16(builder, codes[0], x16[0])
    for c, x in zip(codes[1:], x16[1:]):
        acc = builder.add(acc, isa.madd_i16(builder, c, x))
    return acc


def _x16_groups(builder: Any, x: Any, b: Any) -> list[Any]:
    """The 8 groups of 32 activation codes of 256-value block b, as <32 x i16>."""
    base = builder.gep(x, [builder.mul(b, ir.Constant(_I64, 256))])
    return [builder.sext(_load(builder, base, 32 * j, _vec(_I8, 32)), _vec(_I16, 32)) for j in range(8)]


def _shuf(builder: Any, v: Any, idx: list[int]) -> Any:
    return builder.shuffle_vector(v, v, _const_vec(_I32, idx))


def _k4_scales_mins(builder: Any, p: Any) -> tuple[Any, Any]:
    """get_scale_min_k4 for j < 8 on the 12 bytes at p + 4: (sc, m) as <8 x i16>.
    j < 4: sc = s[j] & 63, m = s[j + 4] & 63;
    j >= 4: sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4, m = s[j + 4] >> 4 | (s[j] >> 6) << 4."""
    s = builder.zext(_load(builder, p, 4, _vec(_I8, 16)), _vec(_I16, 16))  # 12 scale bytes + 4 unused
    low = _const_vec(_I16, [63] * 4 + [15] * 4)
    top = _const_vec(_I16, [0] * 4 + [0x30] * 4)  # (v >> 6) << 4 == (v >> 2) & 0x30 on a byte
    two = _const_vec(_I16, [2] * 8)
    sc = builder.or_(
        builder.and_(_shuf(builder, s, [0, 1, 2, 3, 8, 9, 10, 11]), low),
        builder.and_(builder.lshr(_shuf(builder, s, [0, 0, 0, 0, 0, 1, 2, 3]), two), top),
    )
    r = builder.lshr(_shuf(builder, s, [4, 5, 6, 7, 8, 9, 10, 11]), _const_vec(_I16, [0] * 4 + [4] * 4))
    m = builder.or_(builder.and_(r, low), builder.and_(builder.lshr(_shuf(builder, s, [0, 0, 0, 0, 4, 5, 6, 7]), two), top))
    return sc, m


def _columns(builder: Any, per_row: list[Any]) -> list[Any]:
    """16 rows' <8 x i16> vectors -> 8 columns <16 x i32> (column j, lane i: row i's value j)."""
    v = concat(builder, per_row)  # <128 x i16>, row-major (16, 8)
    return [builder.sext(_shuf(builder, v, [8 * i + j for i in range(ROWS)]), _vec(_I32, ROWS)) for j in range(8)]


def _splat_lane(builder: Any, v: Any, j: int, n: int) -> Any:
    return builder.shuffle_vector(v, v, _const_vec(_I32, [j] * n))


def _k_min_terms(with_qh: bool) -> Any:
    """Q4_K (144 bytes: d | dmin | scales[12] | qs[128]) and Q5_K (176: ... | qh[32] | qs[128]):
    sub-blocks 2g, 2g + 1 = low, high nibbles of qs[32g : 32g + 32] (| bit 2g, 2g + 1 of qh << 4);
    term = (d_x * d) * isum - (d_x * dmin) * msum, isum = sum_j sc_j dot(q_j, x_j),
    msum = sum_j m_j * (code sum of sub-block j)."""
    qs_at = 48 if with_qh else 16
    # The codes are multiplied centred (q - centre, signed), which is what lets LLVM multiply
    # them with vpmaddwd (known non-negative codes made it widen to 32-bit multiplies); the
    # centre's share, centre * sum_j sc_j * xsum_j, is added back to the exact integer sum.
    centre = 16 if with_qh else 8

    def prepare(builder: Any, blocks: list[Any]) -> Any:
        """Per row: the 8 sub-blocks' codes with their scales folded in (<32 x i16>), the mins."""
        codes, scs, mins = [], [], []
        for p in blocks:
            sc, m = _k4_scales_mins(builder, p)
            qh = _load(builder, p, 16, _vec(_I8, 32)) if with_qh else None
            row = []
            for g in range(4):
                q = _load(builder, p, qs_at + 32 * g, _vec(_I8, 32))
                for half in range(2):
                    j = 2 * g + half
                    c = builder.and_(q, _const_vec(_I8, [15] * 32)) if half == 0 else builder.lshr(q, _const_vec(_I8, [4] * 32))
                    if qh is not None:
                        bit = builder.and_(builder.lshr(qh, _const_vec(_I8, [j] * 32)), _const_vec(_I8, [1] * 32))
                        c = builder.or_(c, builder.shl(bit, _const_vec(_I8, [4] * 32)))
                    centred = builder.sub(builder.zext(c, _vec(_I16, 32)), _const_vec(_I16, [centre] * 32))
                    row.append(builder.mul(centred, _splat_lane(builder, sc, j, 32)))
            codes.append(row)
            scs.append(sc)
            mins.append(m)
        return codes, _columns(builder, scs), _columns(builder, mins), _gather_f16(builder, blocks, 0), _gather_f16(builder, blocks, 2)

    def terms(builder: Any, state: Any, blocks: list[Any], x: Any, b: Any, dx: Any, sx: Any, xsub: Any) -> Any:
        codes, sccols, mcols, d, dmin = state
        f32v = _vec(ir.FloatType(), ROWS)
        x16 = _x16_groups(builder, x, b)
        isum = _reduce16(builder, [_sum_pairs(builder, row, x16) for row in codes])
        msum = corr = None
        for j in range(8):  # msum = sum_j m_j * xsum_j; corr = sum_j sc_j * xsum_j
            xj = _splat(builder, builder.load(builder.gep(xsub, [ir.Constant(_I64, j)]), align=4), ROWS)
            mt, ct = builder.mul(mcols[j], xj), builder.mul(sccols[j], xj)
            msum = mt if msum is None else builder.add(msum, mt)
            corr = ct if corr is None else builder.add(corr, ct)
        isum = builder.add(isum, builder.mul(corr, _const_vec(_I32, [centre] * ROWS)))  # exact: the codes' centre back
        t1 = builder.fmul(builder.fmul(dx, d), builder.sitofp(isum, f32v))
        t2 = builder.fmul(builder.fmul(dx, dmin), builder.sitofp(msum, f32v))
        return builder.fsub(t1, t2)

    return (176 if with_qh else 144), prepare, terms


def _k4_byte_terms() -> Any:
    """Q4_K for several activation rows on targets without vpdpwssd: the same integers isum
    and msum as `_k_min_terms(False)`, formed from the stored unsigned codes with byte products
    (vpmaddubsw) and the scales applied to the int16 pair sums (vpmaddwd): about half the
    unpacking work per block. Targets with vpdpwssd take `_k_min_terms`: its codes are widened
    once per block for every activation row, whose loop is then one vpdpwssd per 32 values, as
    many instructions as the byte products. (One activation row: rows_k1.py.)"""

    def prepare(builder: Any, blocks: list[Any]) -> Any:
        """Per row: for each half h of the block (qs bytes 64h .. 64h + 63, groups 2h and 2h + 1)
        its low nibbles (sub-blocks 4h and 4h + 2) and its high nibbles (4h + 1 and 4h + 3), as
        stored: unsigned <64 x i8>, each with its two scales ([sc] * 16 per sub-block, matching
        the pair sums, <32 x i16>); the mins. One 64-byte load and a mask (or a shift) per 64
        codes: the activation is arranged to match instead (`terms`), once for all 16 rows."""
        codes, mins = [], []
        m15 = _const_vec(_I8, [15] * 64)
        for p in blocks:
            sc, m = _k4_scales_mins(builder, p)
            row = []
            for h in range(2):
                q = _load(builder, p, 16 + 64 * h, _vec(_I8, 64))
                row.append((builder.and_(q, m15), _shuf(builder, sc, [4 * h] * 16 + [4 * h + 2] * 16)))
                row.append((builder.lshr(q, _const_vec(_I8, [4] * 64)), _shuf(builder, sc, [4 * h + 1] * 16 + [4 * h + 3] * 16)))
            codes.append(row)
            mins.append(m)
        return codes, _columns(builder, mins), _gather_f16(builder, blocks, 0), _gather_f16(builder, blocks, 2)

    def terms(builder: Any, state: Any, blocks: list[Any], x: Any, b: Any, dx: Any, sx: Any, xsub: Any) -> Any:
        codes, mcols, d, dmin = state
        f32v = _vec(ir.FloatType(), ROWS)
        base = builder.gep(x, [builder.mul(b, ir.Constant(_I64, 256))])
        # sub-block j holds values 32j .. 32j + 31: the low nibbles of half h pair with values
        # 128h + 0..31 and 128h + 64..95, the high nibbles with 128h + 32..63 and 128h + 96..127
        x64 = []
        for h in range(2):
            v = _load(builder, base, 128 * h, _vec(_I8, 128))
            x64.append(builder.shuffle_vector(v, v, _const_vec(_I32, list(range(0, 32)) + list(range(64, 96)))))
            x64.append(builder.shuffle_vector(v, v, _const_vec(_I32, list(range(32, 64)) + list(range(96, 128)))))
        per_row = []
        for row in codes:
            # the 8 sub-blocks' dots, each times its scale: pairs of products (int16), then
            # pairs of those times the scale (vpmaddwd), 16 int32 partial sums per row
            acc = None
            for (pair, scv), xg in zip(row, x64):
                t = isa.madd_i16(builder, isa.madd_u8(builder, pair, xg), scv)
                acc = t if acc is None else builder.add(acc, t)
            per_row.append(acc)
        isum = _reduce16(builder, per_row)
        msum = None
        for j in range(8):  # msum = sum_j m_j * xsum_j
            xj = _splat(builder, builder.load(builder.gep(xsub, [ir.Constant(_I64, j)]), align=4), ROWS)
            mt = builder.mul(mcols[j], xj)
            msum = mt if msum is None else builder.add(msum, mt)
        t1 = builder.fmul(builder.fmul(dx, d), builder.sitofp(isum, f32v))
        t2 = builder.fmul(builder.fmul(dx, dmin), builder.sitofp(msum, f32v))
        return builder.fsub(t1, t2)

    return 144, prepare, terms


def _q6_k_terms() -> Any:
    """Q6_K (210 bytes: ql[128] | qh[64] | scales[16] int8 | d): value 128h + 32k + l has low
    bits nibble k // 2 of ql[64h + 32(k % 2) + l], high bits (qh[32h + l] >> 2k) & 3, code - 32,
    and the scale of its 16; term = (d_x * d) * isum."""

    def prepare(builder: Any, blocks: list[Any]) -> Any:
        """Per row: the 8 groups' codes - 32 with their scales folded in (<32 x i16>)."""
        codes = []
        for p in blocks:
            scales = builder.sext(_load(builder, p, 192, _vec(_I8, 16)), _vec(_I16, 16))
            row = []
            for h in range(2):
                qh = _load(builder, p, 128 + 32 * h, _vec(_I8, 32))
                for k in range(4):
                    ql = _load(builder, p, 64 * h + 32 * (k % 2), _vec(_I8, 32))
                    lo = builder.and_(builder.lshr(ql, _const_vec(_I8, [4 * (k // 2)] * 32)), _const_vec(_I8, [15] * 32))
                    hi = builder.and_(builder.lshr(qh, _const_vec(_I8, [2 * k] * 32)), _const_vec(_I8, [3] * 32))
                    q = builder.or_(lo, builder.shl(hi, _const_vec(_I8, [4] * 32)))
                    q16 = builder.sub(builder.zext(q, _vec(_I16, 32)), _const_vec(_I16, [32] * 32))
                    s = 8 * h + 2 * k
                    row.append(builder.mul(q16, _shuf(builder, scales, [s] * 16 + [s + 1] * 16)))
            codes.append(row)
        return codes, _gather_f16(builder, blocks, 208)

    def terms(builder: Any, state: Any, blocks: list[Any], x: Any, b: Any, dx: Any, sx: Any, xsub: Any) -> Any:
        codes, d = state
        x16 = _x16_groups(builder, x, b)
        isum = _reduce16(builder, [_sum_pairs(builder, row, x16) for row in codes])
        return builder.fmul(builder.fmul(dx, d), builder.sitofp(isum, _vec(ir.FloatType(), ROWS)))

    return 210, prepare, terms


def _q6_k_byte_terms() -> Any:
    """Q6_K for several activation rows on targets without vpdpwssd (one row: rows_k1.py): the
    same integers isum as `_q6_k_terms`, formed from the stored unsigned 6-bit codes with byte
    products (vpmaddubsw: |pair| <= 2 * 63 * 127, no saturation) and the scales applied to the
    int16 pair sums (vpmaddwd); the codes' offset 32 comes back through the activation's code
    sums per 16 (xsub): isum = sum_g sc_g * (dot(q_g, x_g) - 32 * xsum_g), summed in each
    row's 16 lanes before the tree (exact)."""

    def prepare(builder: Any, blocks: list[Any]) -> Any:
        """Per row: the codes of values 128h + 64p .. + 63 (<64 x i8>, unsigned) with their 4
        scales as <32 x i16> ([sc] * 8 per 16 values, matching the pair sums), and -32 * the
        16 scales (<16 x i32>)."""
        codes, negs = [], []
        m15, m30 = _const_vec(_I8, [15] * 64), _const_vec(_I8, [0x30] * 64)
        for p in blocks:
            sc = builder.sext(_load(builder, p, 192, _vec(_I8, 16)), _vec(_I16, 16))
            row = []
            for h in range(2):
                ql = _load(builder, p, 64 * h, _vec(_I8, 64))  # low nibbles: k = 2p (bytes 0-31), 2p + 1 (32-63)
                qh = _load(builder, p, 128 + 32 * h, _vec(_I8, 32))
                # high bits of k = 2p at (qh >> 4p) & 3, of k = 2p + 1 at (qh >> 4p + 2) & 3: side by
                # side as qh2 = [qh, qh >> 2], then moved to bits 4-5
                qh2 = builder.shuffle_vector(qh, builder.lshr(qh, _const_vec(_I8, [2] * 32)), _const_vec(_I32, list(range(64))))
                for half in range(2):
                    lo = builder.and_(ql, m15) if half == 0 else builder.and_(builder.lshr(ql, _const_vec(_I8, [4] * 64)), m15)
                    hi = builder.and_(builder.shl(qh2, _const_vec(_I8, [4] * 64)), m30) if half == 0 else builder.and_(qh2, m30)
                    s0 = 8 * h + 4 * half
                    scv = _shuf(builder, sc, [s0] * 8 + [s0 + 1] * 8 + [s0 + 2] * 8 + [s0 + 3] * 8)
                    row.append((builder.or_(lo, hi), scv))
            codes.append(row)
            negs.append(builder.mul(builder.sext(sc, _vec(_I32, 16)), _const_vec(_I32, [-32] * 16)))
        return codes, negs, _gather_f16(builder, blocks, 208)

    def terms(builder: Any, state: Any, blocks: list[Any], x: Any, b: Any, dx: Any, sx: Any, xsub: Any) -> Any:
        codes, negs, d = state
        base = builder.gep(x, [builder.mul(b, ir.Constant(_I64, 256))])
        x64 = [_load(builder, base, 64 * g, _vec(_I8, 64)) for g in range(4)]  # g = 2h + p
        xs = builder.load(builder.bitcast(xsub, _vec(_I32, 16).as_pointer()), align=4)  # sums per 16
        per_row = []
        for row, neg in zip(codes, negs):
            acc = builder.mul(neg, xs)  # -32 * sc_g * xsum_g, lane g
            for (c, scv), xg in zip(row, x64):
                acc = builder.add(acc, isa.madd_i16(builder, isa.madd_u8(builder, c, xg), scv))
            per_row.append(acc)
        isum = _reduce16(builder, per_row)
        return builder.fmul(builder.fmul(dx, d), builder.sitofp(isum, _vec(ir.FloatType(), ROWS)))

    return 210, prepare, terms


def _tq2_0_codes(builder: Any, p: Any) -> list[Any]:
    """TQ2_0 (66 bytes: qs[64] | d): value 128h + 32l + m = ((qs[32h + m] >> 2l) & 3) - 1; the
    codes as stored, u = 0..3, per 64 values (groups l, l + 1 of half h) as <64 x i8>."""
    m3 = _const_vec(_I8, [3] * 32)
    row = []
    for h in range(2):
        q = _load(builder, p, 32 * h, _vec(_I8, 32))
        g = [builder.and_(builder.lshr(q, _const_vec(_I8, [2 * l] * 32)), m3) for l in range(4)]
        row += [builder.shuffle_vector(g[l], g[l + 1], _const_vec(_I32, list(range(64)))) for l in (0, 2)]
    return row


def _tq1_0_codes(builder: Any, p: Any) -> list[Any]:
    """TQ1_0 (54 bytes: qs[48] | qh[4] | d): value 32n + m (< 160) is trit n of qs[m], 160 + 16n
    + m trit n of qs[32 + m], 240 + 4n + j trit n of qh[j]; trit n of byte q = ((q * 3^n) & 255)
    * 3 >> 8 (0..2, in int16: q * 81 < 2^15), the code trit - 1. Per 64 values, <64 x i8> trits:
    the block's 52 bytes in one vector, each value's byte picked by a shuffle, times its power."""
    qh = builder.shuffle_vector(_load(builder, p, 48, _vec(_I8, 4)), ir.Constant(_vec(_I8, 4), ir.Undefined), _const_vec(_I32, [0, 1, 2, 3] + [0] * 12))
    q = concat(builder, [_load(builder, p, 0, _vec(_I8, 32)), concat(builder, [_load(builder, p, 32, _vec(_I8, 16)), qh])])  # qs, qh, padding
    where = [(v % 32, v // 32) if v < 160 else (32 + (v - 160) % 16, (v - 160) // 16) if v < 240 else (48 + (v - 240) % 4, (v - 240) // 4)
             for v in range(256)]
    v16 = _vec(_I16, 64)
    row = []
    for k in range(4):
        sel = builder.zext(builder.shuffle_vector(q, q, _const_vec(_I32, [where[v][0] for v in range(64 * k, 64 * k + 64)])), v16)
        t = builder.and_(builder.mul(sel, _const_vec(_I16, [3 ** where[v][1] for v in range(64 * k, 64 * k + 64)])), _const_vec(_I16, [255] * 64))
        row.append(builder.trunc(builder.lshr(builder.mul(t, _const_vec(_I16, [3] * 64)), _const_vec(_I16, [8] * 64)), _vec(_I8, 64)))
    return row


def _ternary_terms(block_bytes: int, d_at: int, row_codes: Any) -> Any:
    """TQ2_0 and TQ1_0: codes u - 1 (u = 0..3 or 0..2, `row_codes(builder, p)`: 4 <64 x i8>),
    term = (d_x * d) * isum, d the fp16 at byte d_at. The codes as stored (u) times the activation
    with byte products (vpmaddubsw: |pair| <= 2 * 3 * 127), their pair sums added in int16 (four
    64-value products, |sum| <= 4 * 762), widened in pairs (vpmaddwd); the offset 1 comes back
    once per block for the 16 rows: isum = sum(u * x) - sum(x), exact."""

    def prepare(builder: Any, blocks: list[Any]) -> Any:
        """Per row: its 4 vectors of 64 codes."""
        return [row_codes(builder, p) for p in blocks], _gather_f16(builder, blocks, d_at)

    def terms(builder: Any, state: Any, blocks: list[Any], x: Any, b: Any, dx: Any, sx: Any, xsub: Any) -> Any:
        codes, d = state
        base = builder.gep(x, [builder.mul(b, ir.Constant(_I64, 256))])
        x64 = [_load(builder, base, 64 * k, _vec(_I8, 64)) for k in range(4)]  # values 64k .. 64k + 63
        def total(vs: list[Any]) -> Any:
            acc = vs[0]
            for v in vs[1:]:
                acc = builder.add(acc, v)
            return acc

        isum = _reduce16(builder, [isa.quad_sums(builder, total([isa.madd_u8(builder, c, xk) for c, xk in zip(row, x64)]))
                                   for row in codes])
        ones = _const_vec(_I8, [1] * 64)  # sum(x) over the block, from byte products with ones (exact)
        xsum = total([isa.quad_sums(builder, isa.madd_u8(builder, ones, xk)) for xk in x64])
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I32, [xsum.type]), "llvm.vector.reduce.add.v16i32")
        isum = builder.sub(isum, _splat(builder, builder.call(fn, [xsum]), ROWS))
        return builder.fmul(builder.fmul(dx, d), builder.sitofp(isum, _vec(ir.FloatType(), ROWS)))

    return block_bytes, prepare, terms


def _count(builder: Any, n: Any, body: Any, after: Any) -> None:
    """for i in 0 .. n - 1: body(i), from the current block (n >= 1), then on to block `after`."""
    pre = builder.block
    loop = builder.function.append_basic_block("rows_count")
    builder.branch(loop)
    builder.position_at_end(loop)
    i = builder.phi(_I64)
    i.add_incoming(ir.Constant(_I64, 0), pre)
    body(i)
    i1 = builder.add(i, ir.Constant(_I64, 1))
    i.add_incoming(i1, builder.block)
    builder.cbranch(builder.icmp_signed("<", i1, n), loop, after)


@dataclass(frozen=True)
class Accumulators:
    """How a 16-row kernel keeps the rows' sums for one activation row: `n` vectors of 16
    floats; `step(builder, accs, terms)` -> accs with a block's terms added, `finish(builder,
    accs)` -> <16 x float>, row i's result in lane i."""

    n: int
    step: Any
    finish: Any


def _plain_step(builder: Any, accs: list[Any], term: Any) -> list[Any]:
    return [builder.fadd(accs[0], term)]


def _lanes_step(builder: Any, accs: list[Any], terms: tuple[Any, list[Any]]) -> list[Any]:
    """terms: (the 16 rows' d_w * d_x, 8 <16 x i32> of two rows' 8 lanes each) -> acc[k] =
    fma(d, float(lane), acc[k]) (core/model/kernels/qmm/lanes.py)."""
    dd, quads = terms
    return [lanes.fma(builder, lanes.pair_scales(builder, dd, k), lanes.as_float(builder, q), a) for k, (q, a) in enumerate(zip(quads, accs))]


PLAIN = Accumulators(1, _plain_step, lambda builder, accs: accs[0])  # block_dots.py's order
Q8_LANES = Accumulators(lanes.LANES, _lanes_step, lanes.sum_row_pairs)  # ggml's Q8_0 order (lanes.py)


def _make_rows_dot(block_bytes: int, prepare: Any, terms: Any, single: tuple[Any, Any] | None = None,
                   accumulators: Accumulators = PLAIN, one_row: Any = None) -> Any:
    """The 16-row kernel around a type's `prepare(builder, blocks)` (what depends on the weights
    only: unpacked codes, scales; once per block step) and `terms(builder, state, blocks, x, b,
    dx, sx, xsub)` -> <16 x float>, the float terms of block b of the 16 rows for one activation
    row (blocks: the blocks' byte pointers; x: the row's codes; dx, sx: its scale and Q8_1 sum
    of block b, splatted; xsub: pointer to its code sums per sub-block, K-quants). `single`:
    another (prepare, terms) pair for one activation row, giving the same values. Both read
    `isa.TARGET`, set here from the target machine's features. `accumulators`: the float order
    (`PLAIN`: the terms are <16 x float>; `Q8_LANES`: ggml's lanes). `one_row`: where given, the
    code for one activation row instead (`one_row(builder, w, row_bytes, nb, x, xd, xsub, nsub, out)`
    with pointers to the 16 rows, the row's codes, scales, code sums per sub-block and its 16
    results; core/model/kernels/qmm/rows_k1.py), PLAIN's order."""
    prepare1, terms1 = single if single is not None else (prepare, terms)
    n_acc, step, finish = accumulators.n, accumulators.step, accumulators.finish

    @intrinsic
    def rows_dot(typingctx: Any, w: Any, r0: Any, nb: Any, x: Any, xd: Any, xs: Any, xb: Any, out: Any, acc: Any) -> Any:
        """out[t, r0 + i] = row r0 + i of w (N, row bytes) . activation row t, for i < 16 and every
        t: x (T, K) int8 codes, xd (T, nb) scales, xs (T, nb) Q8_1 sums, xb (T, nb, nsub) int32
        code sums per sub-block, out (T, N) float32; acc (>= T, 16 * accumulators.n) float32
        scratch for the accumulators of several rows; all C-contiguous (module docstring)."""
        sig = types.void(w, r0, nb, x, xd, xs, xb, out, acc)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            isa.set_target(context)
            f32 = ir.FloatType()
            vf = _vec(f32, ROWS)
            wa, xa, xda, xsa, xba, oa, aa = (
                context.make_array(signature.args[i])(context, builder, args[i]) for i in (0, 3, 4, 5, 6, 7, 8)
            )
            row_bytes = builder.extract_value(wa.strides, 0)
            r0_ = builder.sext(args[1], _I64) if args[1].type != _I64 else args[1]
            nb_ = builder.sext(args[2], _I64) if args[2].type != _I64 else args[2]
            n_tok = builder.extract_value(xa.shape, 0)
            k_len = builder.extract_value(xa.shape, 1)
            xd_len = builder.extract_value(xda.shape, 1)
            xs_len = builder.extract_value(xsa.shape, 1)
            nsub = builder.extract_value(xba.shape, 2)
            xb_len = builder.mul(builder.extract_value(xba.shape, 1), nsub)
            n_out = builder.extract_value(oa.shape, 1)
            wbase = builder.gep(wa.data, [builder.mul(r0_, row_bytes)])
            rows = [builder.gep(wbase, [builder.mul(ir.Constant(_I64, i), row_bytes)]) for i in range(ROWS)]
            zero = ir.Constant(vf, [0.0] * ROWS)
            one = ir.Constant(_I64, 1)
            fn = builder.function

            def out_ptr(t: Any) -> Any:
                return builder.bitcast(builder.gep(oa.data, [builder.add(builder.mul(t, n_out), r0_)]), vf.as_pointer())

            def acc_ptrs(t: Any) -> list[Any]:
                at = builder.mul(t, ir.Constant(_I64, ROWS * n_acc))
                return [builder.bitcast(builder.gep(aa.data, [builder.add(at, ir.Constant(_I64, ROWS * j))]), vf.as_pointer())
                        for j in range(n_acc)]

            def block_ptrs(b: Any) -> tuple[Any, list[Any]]:
                boff = builder.mul(b, ir.Constant(_I64, block_bytes))
                _prefetch_next(builder, wbase, row_bytes, boff, block_bytes)
                return boff, [builder.gep(p, [boff]) for p in rows]

            def token_terms(state: Any, blocks: list[Any], t: Any, b: Any, terms_fn: Any = terms) -> Any:
                x_t = builder.gep(xa.data, [builder.mul(t, k_len)])
                dx = _splat(builder, builder.load(builder.gep(xda.data, [builder.add(builder.mul(t, xd_len), b)])), ROWS)
                sx = _splat(builder, builder.load(builder.gep(xsa.data, [builder.add(builder.mul(t, xs_len), b)])), ROWS)
                xsub = builder.gep(xba.data, [builder.add(builder.mul(t, xb_len), builder.mul(b, nsub))])
                return terms_fn(builder, state, blocks, x_t, b, dx, sx, xsub)

            done = fn.append_basic_block("rows_done")
            one_tok = fn.append_basic_block("rows_single")
            multi = fn.append_basic_block("rows_multi")
            builder.cbranch(builder.icmp_signed("==", n_tok, one), one_tok, multi)

            # One activation row (decoding one sequence): the accumulators stay in registers.
            def single_loop() -> None:
                entry = builder.block
                s_loop = fn.append_basic_block("rows_single_loop")
                s_end = fn.append_basic_block("rows_single_end")
                builder.cbranch(builder.icmp_signed(">", nb_, ir.Constant(_I64, 0)), s_loop, s_end)
                builder.position_at_end(s_loop)
                sb = builder.phi(_I64)
                sacc = [builder.phi(vf) for _ in range(n_acc)]
                sb.add_incoming(ir.Constant(_I64, 0), entry)
                for a in sacc:
                    a.add_incoming(zero, entry)
                _, sblocks = block_ptrs(sb)
                sacc1 = step(builder, sacc, token_terms(prepare1(builder, sblocks), sblocks, ir.Constant(_I64, 0), sb, terms1))
                sb1 = builder.add(sb, one)
                s_latch = builder.block  # (terms1 may have loops of its own)
                sb.add_incoming(sb1, s_latch)
                for a, a1 in zip(sacc, sacc1):
                    a.add_incoming(a1, s_latch)
                builder.cbranch(builder.icmp_signed("<", sb1, nb_), s_loop, s_end)
                builder.position_at_end(s_end)
                sres = [builder.phi(vf) for _ in range(n_acc)]
                for r, a1 in zip(sres, sacc1):
                    r.add_incoming(zero, entry)
                    r.add_incoming(a1, s_latch)
                builder.store(finish(builder, sres), out_ptr(ir.Constant(_I64, 0)), align=4)

            builder.position_at_end(one_tok)
            if one_row is not None:
                one_row(builder, wbase, row_bytes, nb_, xa.data, xda.data, xba.data, nsub, builder.bitcast(out_ptr(ir.Constant(_I64, 0)), f32.as_pointer()))
            else:
                single_loop()
            builder.branch(done)

            # Several rows: acc[t] = 0 for every t, then each block is unpacked once and its
            # terms added to every row's accumulators, blocks in order; then out[t, r0 : r0 + 16]
            # = acc[t]. (The accumulators live in contiguous scratch: out's rows are N floats
            # apart, which for N a multiple of 1024 puts them all in the same cache sets.)
            builder.position_at_end(multi)
            start = fn.append_basic_block("rows_start")
            blk = fn.append_basic_block("rows_block")
            latch = fn.append_basic_block("rows_latch")
            copy = fn.append_basic_block("rows_copy")
            init = fn.append_basic_block("rows_init")
            builder.cbranch(builder.icmp_signed(">", n_tok, ir.Constant(_I64, 0)), init, start)
            builder.position_at_end(init)
            _count(builder, n_tok, lambda ti: [builder.store(zero, p, align=4) for p in acc_ptrs(ti)], start)
            builder.position_at_end(start)
            go = builder.and_(builder.icmp_signed(">", nb_, ir.Constant(_I64, 0)), builder.icmp_signed(">", n_tok, ir.Constant(_I64, 0)))
            builder.cbranch(go, blk, done)
            builder.position_at_end(blk)
            b = builder.phi(_I64)
            b.add_incoming(ir.Constant(_I64, 0), start)
            _, blocks = block_ptrs(b)
            state = prepare(builder, blocks)

            def add_terms(t: Any) -> None:
                ps = acc_ptrs(t)
                accs = step(builder, [builder.load(p, align=4) for p in ps], token_terms(state, blocks, t, b))
                for p, a in zip(ps, accs):
                    builder.store(a, p, align=4)

            _count(builder, n_tok, add_terms, latch)
            builder.position_at_end(latch)
            b1 = builder.add(b, one)
            b.add_incoming(b1, latch)
            builder.cbranch(builder.icmp_signed("<", b1, nb_), blk, copy)
            builder.position_at_end(copy)
            _count(builder, n_tok, lambda tc: builder.store(finish(builder, [builder.load(p, align=4) for p in acc_ptrs(tc)]), out_ptr(tc), align=4),
                   done)
            builder.position_at_end(done)
            return context.get_dummy_value()

        return sig, codegen

    return rows_dot


def _on_vnni(vnni: Any, other: Any, sdot: bool = False) -> tuple[Any, Any]:
    """(prepare, terms) taking the pair `vnni` where the target has VNNI (vpdpbusd and
    vpdpwssd: AVX512-VNNI or AVX-VNNI), with `sdot` also where it has the aarch64 dot product,
    else `other`: chosen as each kernel is generated."""

    def pick() -> Any:
        return vnni if isa.TARGET.dpbusd_bytes or (sdot and isa.TARGET.sdot_bytes) else other

    def prepare(builder: Any, blocks: list[Any]) -> Any:
        return pick()[0](builder, blocks)

    def terms(*args: Any) -> Any:
        return pick()[1](*args)

    return prepare, terms


def _legacy_rows_dot(kind: int) -> Any:
    """The 16-row kernel of a 32-value type: vpdpbusd or sdot (`_legacy_terms_vnni`) where the
    target has one, else byte products (`_legacy_terms_bytes`); all give the same integers."""
    bsize, *vnni = _legacy_terms_vnni(kind)
    return _make_rows_dot(bsize, *_on_vnni(vnni, _legacy_terms_bytes(kind)[1:], sdot=True), accumulators=Q8_LANES if kind == 4 else PLAIN)


rows_q4_0 = _legacy_rows_dot(0)
rows_q4_1 = _legacy_rows_dot(1)
rows_q5_0 = _legacy_rows_dot(2)
rows_q5_1 = _legacy_rows_dot(3)
rows_q8_0 = _legacy_rows_dot(4)
rows_mxfp4 = _legacy_rows_dot(MXFP4)
# Q4_K and Q6_K: one activation row takes rows_k1.py's code (4 rows at a time, each row's codes
# multiplied where they are unpacked); several take the codes widened once per block where the
# target has vpdpwssd (one instruction per 32 products on AVX-512), else byte products
# (`_k4_byte_terms`, `_q6_k_byte_terms`; AVX2: two instructions per 32, against four for
# vpmaddwd and an add).
_K4_BYTES, _Q6_K_BYTES = _k4_byte_terms()[1:], _q6_k_byte_terms()[1:]
rows_q4_k = _make_rows_dot(144, *_on_vnni(_k_min_terms(False)[1:], _K4_BYTES), one_row=rows_k1.one_row_q4_k)
rows_q5_k = _make_rows_dot(*_k_min_terms(True))
rows_q6_k = _make_rows_dot(210, *_on_vnni(_q6_k_terms()[1:], _Q6_K_BYTES), one_row=rows_k1.one_row_q6_k)
rows_tq2_0 = _make_rows_dot(*_ternary_terms(66, 64, _tq2_0_codes))
rows_tq1_0 = _make_rows_dot(*_ternary_terms(54, 52, _tq1_0_codes))
