"""The 16-row kernels of IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M: grid entries looked up per 8 values straight into byte vectors,
as llama.cpp's vec_dot_iq2_xxs_q8_K, with rows.py's 16-row frame (prefetch, transposing tree,
one float term per block and row).

IQ2_XXS (66 bytes: d fp16 | 8 groups of 32 values, each 4 grid index bytes then a u32 aux: the
4 sign indices in bits 7l .. 7l + 6, ls in the top 4 bits). Value 32 ib + 8 l + j of a block is
(2 ls + 1) * grid[idx l][j] * sign, grid bytes 8, 25 or 43 (unpack_lowbit.py's docstring). Per
row and pair of groups: the 8 grid entries (8 bytes each, loaded as u64 from a table in the
module's constants) make a <64 x i8> of unsigned magnitudes u; the 8 sign entries (ggml's
keven_signs: 8 bytes of +1 or -1 per 7-bit index, parity completing the eighth) a <64 x i8> s;
the activation's 64 codes take the signs (vpsignb), byte products with u (vpmaddubsw: |pair| <=
2 * 43 * 127, no saturation) and the pairs times (2 ls + 1) (vpmaddwd) leave 16 int32 partial
sums of the row. isum = their total over the block, exact; the term is (d_x * (d / 8)) *
float(isum): the unpacking path's integers and scale order (decode.py), so the same bits.
IQ2_XS the same way (74 bytes: d | qs u16[32] | scales[8]: a 9-bit index into its 512-entry
grid and a 7-bit sign index per 8 values, ls per 16 values), and IQ3_XXS (98 bytes: d | 64
indices into its grid of 4 values | the 8 groups' aux u32; the term (d_x * (d / 4)) * isum);
IQ1_S's values (2 ls + 1) * (8 grid + delta) by their magnitudes and signs (`_iq1_s_row`),
IQ1_M's as IQ1_S's with a delta per 8 values and its d assembled from its scales. IQ2_S and
IQ3_S store each group's 8 sign bits as a byte (`_bit_masks`) and a grid index's high bits in
qh; IQ3_S's term is (d_x * d) * isum.

The signs of IQ2_XXS and IQ3_XXS (7-bit indices) take two forms, the same integers: on AVX-512,
masks (`_sign_masks`: parity and byte spread in vectors, then a masked negation); on 256-bit
targets (AVX2, AVX-VNNI), ggml's keven_signs table, one u64 of +1 / -1 bytes per index, and
vpsignb (`_table_signs`), as llama.cpp's AVX2 `vec_dot_iq2_xxs_q8_K` (the masks' byte shuffles
and blends made the AVX2 kernel 1.2x slower; for IQ2_XS's u16 fields and the sign bytes of IQ2_S
and IQ3_S the table was the slower form).

The sign trick is exact because Q8_K activation codes are never -128 (acts.py: min(127,
rint(x * -127 / max)) >= -127), so negating one never wraps.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba.core import cgutils

from llamacli.core.model.kernels.grids import IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS
from llamacli.core.model.kernels.qmm import isa
from llamacli.core.model.kernels.qmm.isa import const_vec, vec
from llamacli.core.model.kernels.qmm.rows import ROWS, _gather_f16, _make_rows_dot, _reduce16

_I8, _I16, _I32, _I64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)


# iq2xxs_grid, iq2xs_grid as u64 (byte j: value j)
_GRID_U64 = [int(v) for v in IQ2XXS_GRID.reshape(-1).view("<u8")]
_GRID_XS_U64 = [int(v) for v in IQ2XS_GRID.reshape(-1).view("<u8")]
_GRID1_U64 = [v - (1 << 64) if v >= 1 << 63 else v for v in (int(u) for u in IQ1S_GRID.reshape(-1).view("<u8"))]  # iq1s_grid
_GRID3_U32 = [int(v) for v in IQ3XXS_GRID.reshape(-1).view("<u4")]  # iq3xxs_grid (byte j: value j)
_GRID2S_U64 = [int(v) for v in IQ2S_GRID.reshape(-1).view("<u8")]  # iq2s_grid
_GRID3S_U32 = [int(v) for v in IQ3S_GRID.reshape(-1).view("<u4")]  # iq3s_grid
# keven_signs_q2xs as u64: per 7-bit sign index, byte j = -1 where bit j of ksigns_iq2xs is set, else +1
_SIGNS_U64 = [int(np.where((int(k) >> np.arange(8)) & 1, 0xFF, 1).astype(np.uint8).view("<u8")[0]) for k in KSIGNS_IQ2XS]
_SIGNS_U64 = [v - (1 << 64) if v >= 1 << 63 else v for v in _SIGNS_U64]


def _table(builder: Any, name: str, values: list[int], t: ir.Type = _I64) -> Any:
    """A constant table (u64 or u32 entries) in the module being generated (one per module)."""
    g = builder.module.globals.get(name)
    if g is None:
        ty = ir.ArrayType(t, len(values))
        g = ir.GlobalVariable(builder.module, ty, name)
        g.initializer = ir.Constant(ty, values)
        g.global_constant = True
        g.linkage = "internal"
    return g


def _entry(builder: Any, table: Any, idx: Any) -> Any:
    return builder.load(builder.gep(table, [ir.Constant(_I32, 0), builder.zext(idx, _I64)]))


def _load(builder: Any, base: Any, at: int, t: ir.Type) -> Any:
    return builder.load(builder.bitcast(builder.gep(base, [ir.Constant(_I64, at)]), t.as_pointer()), align=1)


def _u64s(builder: Any, values: list[Any]) -> Any:
    """8 i64 (or 16 i32) values -> <64 x i8> (their bytes in order)."""
    v = ir.Constant(vec(values[0].type, len(values)), ir.Undefined)
    for i, e in enumerate(values):
        v = builder.insert_element(v, e, ir.Constant(_I32, i))
    return builder.bitcast(v, vec(_I8, 64))


def _c(vals: list[int], t: ir.Type = _I32, n: int = 32) -> Any:
    """A constant vector of n lanes of type t repeating vals."""
    return const_vec(t, vals * (n // len(vals)))


def _sign_masks(builder: Any, s7: Any) -> list[Any]:
    """The block's 32 7-bit sign indices (<32 x iN>, group of 8 values j at lane j) -> per 64
    values, <64 x i1> negative: the parity of each index as its eighth bit (ksigns_iq2xs[i] = i
    | parity(i) << 7), each byte's 8 bits spread over its group's 8 values."""
    n, t = s7.type.count, s7.type.element
    par = builder.xor(s7, builder.lshr(s7, _c([4], t, n)))
    par = builder.xor(par, builder.lshr(par, _c([2], t, n)))
    par = builder.xor(par, builder.lshr(par, _c([1], t, n)))
    return _bit_masks(builder, builder.trunc(builder.or_(s7, builder.shl(builder.and_(par, _c([1], t, n)), _c([7], t, n))), vec(_I8, 32)))


def _bit_masks(builder: Any, s8: Any) -> list[Any]:
    """32 sign bytes (<32 x i8>: bit j of byte g, value j of group g negative) -> per 64
    values, <64 x i1> negative: each byte spread over its group's 8 values (a byte shuffle),
    tested against the value's bit."""
    bit = _c([1, 2, 4, 8, 16, 32, 64, -128], _I8, 64)
    zero = ir.Constant(vec(_I8, 64), [0] * 64)
    return [builder.icmp_unsigned("!=", builder.and_(builder.shuffle_vector(s8, s8, const_vec(_I32, [8 * k + j // 8 for j in range(64)])), bit),
                                  zero) for k in range(4)]


def _table_signs(builder: Any, s7: list[Any]) -> list[Any]:
    """The block's 32 7-bit sign indices (i32 scalars, group of 8 values j at j) -> per 64
    values, <64 x i8> of +1 / -1 (keven_signs_q2xs entries, 8 bytes per index): the operand of
    vpsignb, as llama.cpp's AVX2 dots take them. On 256-bit targets this costs loads where
    `_sign_masks` costs byte shuffles and blends."""
    table = _table(builder, "keven_signs_u64", _SIGNS_U64)
    return [_u64s(builder, [_entry(builder, table, i) for i in s7[8 * k : 8 * k + 8]]) for k in range(4)]


def _table_signed() -> bool:
    """Whether the target takes signs from the table (`_table_signs`: its vectors are 256-bit,
    vpsignb's own width) rather than as masks (`_sign_masks`: AVX-512's masked negation)."""
    return isa.TARGET.madd_bytes == 32


def _aux_signs_ls(builder: Any, aux8: Any) -> tuple[list[Any], Any]:
    """The 8 groups' aux u32 (<8 x i32>: 4 sign indices of 7 bits, ls in the top 4 bits) ->
    (`_sign_masks`, <8 x i16> 2 ls + 1)."""
    aux = builder.shuffle_vector(aux8, aux8, const_vec(_I32, [g for g in range(8) for _ in range(4)]))
    if _table_signed():
        s7 = [builder.and_(builder.lshr(builder.extract_element(aux8, ir.Constant(_I32, g)), ir.Constant(_I32, 7 * l)), ir.Constant(_I32, 127))
              for g in range(8) for l in range(4)]
        negs = _table_signs(builder, s7)
    else:
        negs = _sign_masks(builder, builder.and_(builder.lshr(aux, _c([0, 7, 14, 21])), _c([127])))
    return negs, builder.trunc(builder.or_(builder.shl(builder.lshr(aux8, _c([28], n=8)), _c([1], n=8)), _c([1], n=8)), vec(_I16, 8))


def _pairs_ls(builder: Any, ls8: Any, k: int) -> Any:
    """<32 x i16>: groups 2k's and 2k + 1's 2 ls + 1, 16 lanes each."""
    return builder.shuffle_vector(ls8, ls8, const_vec(_I32, [2 * k] * 16 + [2 * k + 1] * 16))


def _nibble_ls(builder: Any, p: Any, at: int, n: int) -> Any:
    """The n scale bytes at p + at, low nibble first then high (one ls per 16 or 32 values,
    in order) -> <2n x i16> 2 ls + 1."""
    sc = builder.zext(_load(builder, p, at, vec(_I8, n)), vec(_I16, n))
    nib = builder.shuffle_vector(builder.and_(sc, _c([15], _I16, n)), builder.lshr(sc, _c([4], _I16, n)),
                                 const_vec(_I32, [v for i in range(n) for v in (i, n + i)]))
    return builder.or_(builder.shl(nib, _c([1], _I16, 2 * n)), _c([1], _I16, 2 * n))


def _iq2_xxs_row(builder: Any, p: Any) -> list[tuple[Any, Any, Any]]:
    """A row's IQ2_XXS block at p: per 64 values (groups 2k, 2k + 1), (u, neg, ls): <64 x i8>
    magnitudes, <64 x i1> the values' signs (negative), <32 x i16> 2 ls + 1 per pair of values.
    Each group's aux u32: 4 sign indices (7 bits each), ls in the top 4 bits."""
    grid = _table(builder, "iq2xxs_grid_u64", _GRID_U64)
    q = _load(builder, p, 2, vec(_I32, 16))  # idx 0 | aux 0 | idx 1 | aux 1 | ... (8 groups)
    negs, ls8 = _aux_signs_ls(builder, builder.shuffle_vector(q, q, const_vec(_I32, [2 * g + 1 for g in range(8)])))
    out = []
    for k in range(4):
        us = [_entry(builder, grid, _load(builder, p, 2 + 8 * ib + l, _I8)) for ib in (2 * k, 2 * k + 1) for l in range(4)]
        out.append((_u64s(builder, us), negs[k], _pairs_ls(builder, ls8, k)))
    return out


def _iq3_xxs_row(builder: Any, p: Any) -> list[tuple[Any, Any, Any]]:
    """As `_iq2_xxs_row` for IQ3_XXS (98 bytes: d | qs[64] | aux u32[8]): qs[8 ib + j] indexes
    its 256-entry grid of 4 values (grid bytes <= 62: |pair| <= 2 * 62 * 127)."""
    grid = _table(builder, "iq3xxs_grid_u32", _GRID3_U32, _I32)
    negs, ls8 = _aux_signs_ls(builder, _load(builder, p, 66, vec(_I32, 8)))
    out = []
    for k in range(4):
        us = [_entry(builder, grid, _load(builder, p, 2 + 16 * k + j, _I8)) for j in range(16)]
        out.append((_u64s(builder, us), negs[k], _pairs_ls(builder, ls8, k)))
    return out


def _iq2_xs_row(builder: Any, p: Any) -> list[tuple[Any, Any, Any]]:
    """As `_iq2_xxs_row` for IQ2_XS (74 bytes: d | qs u16[32] | scales[8]): qs[4 ib + l] is a
    9-bit grid index | its sign index << 9; ls per 16 values, nibble l // 2 of scales[ib]."""
    grid = _table(builder, "iq2xs_grid_u64", _GRID_XS_U64)
    negs = _sign_masks(builder, builder.lshr(_load(builder, p, 2, vec(_I16, 32)), _c([9], _I16)))  # (table signs: slower here)
    ls16 = _nibble_ls(builder, p, 66, 8)
    out = []
    for k in range(4):
        us = [_entry(builder, grid, builder.and_(_load(builder, p, 2 + 2 * j, _I16), ir.Constant(_I16, 511))) for j in range(8 * k, 8 * k + 8)]
        ls = builder.shuffle_vector(ls16, ls16, const_vec(_I32, [4 * k + h for h in range(4) for _ in range(8)]))
        out.append((_u64s(builder, us), negs[k], ls))
    return out


def _high_bit_entries(builder: Any, grid: Any, p: Any, k: int, bits: int) -> list[Any]:
    """The grid entries of sub-blocks 2k and 2k + 1 of an IQ2_S (bits 2) or IQ3_S (bits 1) block:
    per sub-block ib, n = 8 / bits indices qs[2 + n ib + l] | bits (bits l .. bits l + bits - 1)
    of qh[66 + ib] << 8 (qs at byte 2, qh at byte 66 in both types)."""
    n, mask = 8 // bits, ((1 << bits) - 1) << 8
    us = []
    for ib in (2 * k, 2 * k + 1):
        h = builder.zext(_load(builder, p, 66 + ib, _I8), _I32)
        for l in range(n):
            hi = builder.and_(builder.shl(h, ir.Constant(_I32, 8 - bits * l)), ir.Constant(_I32, mask))
            us.append(_entry(builder, grid, builder.or_(builder.zext(_load(builder, p, 2 + n * ib + l, _I8), _I32), hi)))
    return us


def _iq2_s_row(builder: Any, p: Any) -> list[tuple[Any, Any, Any]]:
    """As `_iq2_xs_row` for IQ2_S (82 bytes: d | qs[32] | signs[32] | qh[8] | scales[8]): a
    10-bit index qs[4 ib + l] | bits 2l, 2l + 1 of qh[ib] << 8 into its 1024-entry grid; the
    8 signs of group 4 ib + l the bits of signs[4 ib + l]; ls per 16 values, as IQ2_XS."""
    grid = _table(builder, "iq2s_grid_u64", _GRID2S_U64)
    negs = _bit_masks(builder, _load(builder, p, 34, vec(_I8, 32)))
    ls16 = _nibble_ls(builder, p, 74, 8)
    out = []
    for k in range(4):
        ls = builder.shuffle_vector(ls16, ls16, const_vec(_I32, [4 * k + h for h in range(4) for _ in range(8)]))
        out.append((_u64s(builder, _high_bit_entries(builder, grid, p, k, 2)), negs[k], ls))
    return out


def _iq3_s_row(builder: Any, p: Any) -> list[tuple[Any, Any, Any]]:
    """As `_iq3_xxs_row` for IQ3_S (110 bytes: d | qs[64] | qh[8] | signs[32] | scales[4]): a
    9-bit index qs[8 ib + m] | bit m of qh[ib] << 8 into its 512-entry grid of 4 values (odd
    bytes <= 15: |pair| <= 2 * 15 * 127); the signs as IQ2_S's; ls per 32 values, nibble
    ib % 2 of scales[ib // 2]; the term (d_x * d) * isum."""
    grid = _table(builder, "iq3s_grid_u32", _GRID3S_U32, _I32)
    negs = _bit_masks(builder, _load(builder, p, 74, vec(_I8, 32)))
    ls8 = _nibble_ls(builder, p, 106, 4)
    out = []
    for k in range(4):
        out.append((_u64s(builder, _high_bit_entries(builder, grid, p, k, 1)), negs[k], _pairs_ls(builder, ls8, k)))
    return out


def _iq1_s_row(builder: Any, p: Any) -> list[tuple[Any, Any, Any]]:
    """As `_iq2_xxs_row` for IQ1_S (50 bytes: d | qs[32] | qh u16[8]): value 8 l + j of group
    ib is (2 ls + 1) * (8 grid[idx][j] + delta), idx = qs[4 ib + l] | 3 bits of qh[ib] << 8 (a
    2048-entry grid of -1, 0, 1), ls = bits 12-14 of qh[ib], delta -1 where its bit 15 is set,
    else +1. 8 grid + delta is odd (never 0): its magnitude (1, 7 or 9) times the activation
    with its sign (|pair| <= 2 * 9 * 127)."""
    grid = _table(builder, "iq1s_grid_u64", _GRID1_U64)
    qh = builder.zext(_load(builder, p, 34, vec(_I16, 8)), vec(_I32, 8))
    ls8 = builder.trunc(builder.or_(builder.shl(builder.and_(builder.lshr(qh, _c([12], n=8)), _c([7], n=8)), _c([1], n=8)), _c([1], n=8)),
                        vec(_I16, 8))
    delta8 = builder.trunc(builder.sub(_c([1], n=8), builder.shl(builder.lshr(qh, _c([15], n=8)), _c([1], n=8))), vec(_I8, 8))
    zero = ir.Constant(vec(_I8, 64), [0] * 64)
    out = []
    for k in range(4):
        us = []
        for ib in (2 * k, 2 * k + 1):
            h = builder.zext(_load(builder, p, 34 + 2 * ib, _I16), _I32)
            for l in range(4):
                hi = builder.shl(builder.and_(builder.lshr(h, ir.Constant(_I32, 3 * l)), ir.Constant(_I32, 7)), ir.Constant(_I32, 8))
                us.append(_entry(builder, grid, builder.or_(builder.zext(_load(builder, p, 2 + 4 * ib + l, _I8), _I32), hi)))
        delta = builder.shuffle_vector(delta8, delta8, const_vec(_I32, [2 * k] * 32 + [2 * k + 1] * 32))
        v = builder.add(builder.shl(_u64s(builder, us), _c([3], _I8, 64)), delta)
        neg = builder.icmp_signed("<", v, zero)
        out.append((builder.select(neg, builder.sub(zero, v), v), neg, _pairs_ls(builder, ls8, k)))
    return out


def _iq1_m_row(builder: Any, p: Any) -> list[tuple[Any, Any, Any]]:
    """As `_iq1_s_row` for IQ1_M (56 bytes: qs[32] | qh[16] | scales u16[4]): group g = 4 ib + l
    takes nibble g % 2 of qh[g // 2]: 3 high index bits, and its delta -1 where bit 3 is set;
    ls per 16 values, 3 bits at 6 (ib % 2) + 3 (l // 2) of scales[ib // 2]."""
    grid = _table(builder, "iq1s_grid_u64", _GRID1_U64)
    sc = builder.zext(_load(builder, p, 48, vec(_I16, 4)), vec(_I32, 4))
    sc16 = builder.shuffle_vector(sc, sc, const_vec(_I32, [ib // 2 for ib in range(8) for _ in range(2)]))
    shifts = const_vec(_I32, [6 * (ib % 2) + 3 * half for ib in range(8) for half in range(2)])
    ls16 = builder.trunc(builder.or_(builder.shl(builder.and_(builder.lshr(sc16, shifts), _c([7], n=16)), _c([1], n=16)), _c([1], n=16)),
                         vec(_I16, 16))
    qh = _load(builder, p, 32, vec(_I8, 16))
    zero = ir.Constant(vec(_I8, 64), [0] * 64)
    out = []
    for k in range(4):
        us = []
        for g in range(8 * k, 8 * k + 8):
            h = builder.lshr(builder.zext(_load(builder, p, 32 + g // 2, _I8), _I32), ir.Constant(_I32, 4 * (g % 2)))
            hi = builder.shl(builder.and_(h, ir.Constant(_I32, 7)), ir.Constant(_I32, 8))
            us.append(_entry(builder, grid, builder.or_(builder.zext(_load(builder, p, g, _I8), _I32), hi)))
        spread = builder.shuffle_vector(qh, qh, const_vec(_I32, [(8 * k + j // 8) // 2 for j in range(64)]))
        dneg = builder.icmp_unsigned("!=", builder.and_(spread, const_vec(_I8, [8 if (j // 8) % 2 == 0 else -128 for j in range(64)])), zero)
        delta = builder.select(dneg, _c([-1], _I8, 64), _c([1], _I8, 64))
        v = builder.add(builder.shl(_u64s(builder, us), _c([3], _I8, 64)), delta)
        neg = builder.icmp_signed("<", v, zero)
        ls = builder.shuffle_vector(ls16, ls16, const_vec(_I32, [4 * k + h for h in range(4) for _ in range(8)]))
        out.append((builder.select(neg, builder.sub(zero, v), v), neg, ls))
    return out


def _row_sums(builder: Any, row: list[tuple[Any, Any, Any]], x64: list[Any]) -> Any:
    """<16 x i32>: partial sums of the row's block dot with the activation's 4 x 64 codes."""
    acc = None
    zero = ir.Constant(vec(_I8, 64), [0] * 64)
    for (u, neg, ls), x in zip(row, x64):
        if neg.type.element == _I8:  # +1 / -1 per value (`_table_signs`)
            xs = isa.sign_i8(builder, x, neg)
        else:
            xs = builder.select(neg, builder.sub(zero, x), x)
        part = isa.pmaddwd(builder, isa.madd_u8(builder, u, xs), ls)
        acc = part if acc is None else builder.add(acc, part)
    return acc


def _iq1_m_d(builder: Any, blocks: list[Any]) -> Any:
    """IQ1_M's fp16 d of the 16 blocks, as <16 x float>: the top nibbles of its scales u16[4]
    at byte 48, in order (d = s0 >> 12 | (s1 >> 8) & 0xF0 | (s2 >> 4) & 0xF00 | s3 & 0xF000)."""
    v = ir.Constant(vec(_I16, ROWS), ir.Undefined)
    for i, p in enumerate(blocks):
        top = builder.and_(_load(builder, p, 48, vec(_I16, 4)), _c([-4096], _I16, 4))  # 0xF000
        parts = builder.lshr(top, const_vec(_I16, [12, 8, 4, 0]))
        d = builder.extract_element(parts, ir.Constant(_I32, 0))
        for j in range(1, 4):
            d = builder.or_(d, builder.extract_element(parts, ir.Constant(_I32, j)))
        v = builder.insert_element(v, d, ir.Constant(_I32, i))
    return builder.fpext(builder.bitcast(v, vec(ir.HalfType(), ROWS)), vec(ir.FloatType(), ROWS))


def _grid_terms(row: Any, factor: float = 0.125, d_of: Any = None) -> tuple[Any, Any, tuple[Any, Any]]:
    """(prepare, terms, single) of a type whose blocks `row(builder, p)` unpacks: several activation rows unpack the 16 rows once
    per block (`prepare`); one activation row unpacks and dots each row in turn (fewer values
    live at once). The blocks' scale: d_of(builder, blocks) (default: the fp16 at byte 0) times
    `factor`."""

    def scales(builder: Any, blocks: list[Any]) -> Any:
        d = _gather_f16(builder, blocks, 0) if d_of is None else d_of(builder, blocks)
        return builder.fmul(d, ir.Constant(vec(ir.FloatType(), ROWS), [factor] * ROWS))

    def x_groups(builder: Any, x: Any, b: Any) -> list[Any]:
        base = builder.gep(x, [builder.mul(b, ir.Constant(_I64, 256))])
        return [_load(builder, base, 64 * k, vec(_I8, 64)) for k in range(4)]

    def finish(builder: Any, sums: list[Any], d: Any, dx: Any) -> Any:
        isum = _reduce16(builder, sums)
        return builder.fmul(builder.fmul(dx, d), builder.sitofp(isum, vec(ir.FloatType(), ROWS)))

    def prepare(builder: Any, blocks: list[Any]) -> Any:
        return [row(builder, p) for p in blocks], scales(builder, blocks)

    def terms(builder: Any, state: Any, blocks: list[Any], x: Any, b: Any, dx: Any, sx: Any, xsub: Any) -> Any:
        rows, d = state
        x64 = x_groups(builder, x, b)
        return finish(builder, [_row_sums(builder, r, x64) for r in rows], d, dx)

    def prepare1(builder: Any, blocks: list[Any]) -> Any:
        return scales(builder, blocks)

    def terms1(builder: Any, state: Any, blocks: list[Any], x: Any, b: Any, dx: Any, sx: Any, xsub: Any) -> Any:
        """A loop over the 16 rows, one row's sums at a time into a stack array (unrolled, the
        16 rows' lookups interleave and spill)."""
        x64 = x_groups(builder, x, b)
        sums_t = vec(_I32, ROWS)
        arr = cgutils.alloca_once(builder, sums_t, size=ROWS)
        stride = builder.sub(builder.ptrtoint(blocks[1], _I64), builder.ptrtoint(blocks[0], _I64))
        pre = builder.block
        body = builder.function.append_basic_block("grid_row")
        after = builder.function.append_basic_block("grid_rows_end")
        builder.branch(body)
        builder.position_at_end(body)
        i = builder.phi(_I64)
        i.add_incoming(ir.Constant(_I64, 0), pre)
        p = builder.gep(blocks[0], [builder.mul(i, stride)])
        builder.store(_row_sums(builder, row(builder, p), x64), builder.gep(arr, [i]))
        i1 = builder.add(i, ir.Constant(_I64, 1))
        i.add_incoming(i1, body)
        builder.cbranch(builder.icmp_signed("<", i1, ir.Constant(_I64, ROWS)), body, after)
        builder.position_at_end(after)
        sums = [builder.load(builder.gep(arr, [ir.Constant(_I64, r)])) for r in range(ROWS)]
        return finish(builder, sums, state, dx)

    return prepare, terms, (prepare1, terms1)


def _grid_rows_dot(block_bytes: int, row: Any, factor: float = 0.125, d_of: Any = None) -> Any:
    """The 16-row dot of a grid type of `block_bytes` per block, from its row decoder."""
    prepare, terms, single = _grid_terms(row, factor, d_of)
    return _make_rows_dot(block_bytes, prepare, terms, single=single)


rows_iq2_xxs = _grid_rows_dot(66, _iq2_xxs_row)
rows_iq2_xs = _grid_rows_dot(74, _iq2_xs_row)
rows_iq3_xxs = _grid_rows_dot(98, _iq3_xxs_row, 0.25)
rows_iq1_s = _grid_rows_dot(50, _iq1_s_row)
rows_iq2_s = _grid_rows_dot(82, _iq2_s_row)
rows_iq3_s = _grid_rows_dot(110, _iq3_s_row, 1.0)
rows_iq1_m = _grid_rows_dot(56, _iq1_m_row, d_of=_iq1_m_d)
