"""Q4_K with its rows interleaved by eights (packed once, at load, as the 32-value types in
packed.py): llama.cpp's block_q4_Kx8 (ggml-cpu/repack.cpp) for our arithmetic.

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
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit

from llamacli.core.model.kernels.qmm import isa
from llamacli.core.model.kernels.qmm.isa import const_vec, vec

GROUP = 8
BLOCK = 144  # a stored Q4_K block: d | dmin | scales[12] | qs[128]
RECORD = GROUP * BLOCK

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


def _load(builder: Any, p: Any, at: int, vt: ir.Type) -> Any:
    return builder.load(builder.bitcast(builder.gep(p, [ir.Constant(_I64, at)]), vt.as_pointer()), align=1)


def _shr(builder: Any, v: Any, n: int) -> Any:
    return builder.lshr(v, const_vec(_I8, [n] * v.type.count))


def _and(builder: Any, v: Any, m: int) -> Any:
    return builder.and_(v, const_vec(_I8, [m] * v.type.count))


def record(builder: Any, rec: Any) -> tuple[Any, ...]:
    """What a record gives every activation row: d, dmin (<8 x float>), the 8 sub-blocks'
    (codes, scale pairs) and the mins (<32 x i16>, lane 4r + j: m_j of row r, j < 4; then j >= 4).
    Scales (ggml's get_scale_min_k4): bytes 0-3 hold sc_0..3 (low 6 bits) and the top bits of
    sc_4..7, bytes 4-7 m_0..3 and the top bits of m_4..7, bytes 8-11 the low nibbles of sc_4..7
    (low) and m_4..7 (high)."""
    f32 = ir.FloatType()
    vf = vec(f32, GROUP)
    d = builder.fpext(_load(builder, rec, 0, vec(ir.HalfType(), GROUP)), vf)
    dmin = builder.fpext(_load(builder, rec, 16, vec(ir.HalfType(), GROUP)), vf)
    v32 = vec(_I8, 32)
    s0, s1, s2 = (_load(builder, rec, 32 + 32 * c, v32) for c in range(3))
    sc03, m03 = _and(builder, s0, 63), _and(builder, s1, 63)
    sc47 = builder.or_(_and(builder, s2, 15), builder.shl(_shr(builder, s0, 6), const_vec(_I8, [4] * 32)))
    m47 = builder.or_(_shr(builder, s2, 4), builder.shl(_shr(builder, s1, 6), const_vec(_I8, [4] * 32)))
    subs = []
    for j in range(8):
        # the scale of sub-block j for each row r, twice (lanes 2r, 2r + 1: the pair sums')
        src = sc03 if j < 4 else sc47
        # (with vpdpbusd: once, as int32 lanes r)
        if isa.TARGET.dpbusd_bytes:
            scale = builder.zext(builder.shuffle_vector(src, src, const_vec(_I32, [4 * r + j % 4 for r in range(GROUP)])), vec(_I32, GROUP))
        else:
            pair = builder.shuffle_vector(src, src, const_vec(_I32, [4 * (i // 2) + j % 4 for i in range(16)]))
            scale = builder.zext(pair, vec(_I16, 16))
        chunks = []
        for c in range(8 * (j // 2), 8 * (j // 2) + 8):
            q = _load(builder, rec, 128 + 32 * c, v32)
            chunks.append(_and(builder, q, 15) if j % 2 == 0 else _shr(builder, q, 4))
        subs.append((chunks, scale))
    mins = [builder.zext(m, vec(_I16, 32)) for m in (m03, m47)]
    return d, dmin, subs, mins


def terms(builder: Any, state: tuple[Any, ...], xt: Any, dx: Any, xsub: Any) -> Any:
    """<8 x float>: the block's terms of the group's rows for one activation row: xt its 256
    codes (i8*), dx its scale (splatted), xsub its 8 code sums per sub-block (i32*)."""
    d, dmin, subs, mins = state
    f32v = vec(ir.FloatType(), GROUP)
    xw = builder.bitcast(xt, _I32.as_pointer())
    isum = None
    for j, (chunks, scale) in enumerate(subs):
        xqs = []  # values 4i .. 4i + 3 of sub-block j, for every row
        for i in range(8):
            word = builder.load(builder.gep(xw, [ir.Constant(_I64, 16 * (j // 2) + 8 * (j % 2) + i)]), align=1)
            xqs.append(builder.bitcast(_splat(builder, word, GROUP), vec(_I8, 32)))
        if isa.TARGET.dpbusd_bytes:  # <8 x i32> the row's dot, times its scale
            dot = ir.Constant(vec(_I32, GROUP), [0] * GROUP)
            for q, xq in zip(chunks, xqs):
                dot = isa.dpbusd(builder, dot, q, xq)
            t = builder.mul(dot, scale)
        else:
            s16 = None  # <16 x i16>: lanes 2r, 2r + 1 the row's pair sums (|each| <= 8 * 2 * 15 * 128 < 2^15)
            for q, xq in zip(chunks, xqs):
                p = isa.madd_u8(builder, q, xq)
                s16 = p if s16 is None else builder.add(s16, p)
            t = isa.madd_i16(builder, s16, scale)  # <8 x i32>: sc_j * the row's dot
        isum = t if isum is None else builder.add(isum, t)
    # msum: sum_j m_j * xsum_j; |xsum_j| <= 32 * 128 fits int16, as m_j <= 63 does
    xs = builder.trunc(builder.load(builder.bitcast(xsub, vec(_I32, 8).as_pointer()), align=4), vec(_I16, 8))
    m2 = [isa.madd_i16(builder, m, builder.shuffle_vector(xs, xs, const_vec(_I32, [4 * h + i % 4 for i in range(32)])))
          for h, m in enumerate(mins)]
    m16 = builder.add(m2[0], m2[1])  # <16 x i32>: lanes 2r, 2r + 1 of row r
    msum = builder.add(builder.shuffle_vector(m16, m16, const_vec(_I32, list(range(0, 16, 2)))),
                       builder.shuffle_vector(m16, m16, const_vec(_I32, list(range(1, 16, 2)))))
    t1 = builder.fmul(builder.fmul(dx, d), builder.sitofp(isum, f32v))
    t2 = builder.fmul(builder.fmul(dx, dmin), builder.sitofp(msum, f32v))
    return builder.fsub(t1, t2)


def _splat(builder: Any, v: Any, n: int) -> Any:
    vt = vec(v.type, n)
    one = builder.insert_element(ir.Constant(vt, ir.Undefined), v, ir.Constant(_I32, 0))
    return builder.shuffle_vector(one, ir.Constant(vt, ir.Undefined), const_vec(_I32, [0] * n))


def pack(data: np.ndarray) -> np.ndarray:
    """The packed form of a Q4_K matrix (N, row bytes), N a multiple of 8; read-only."""
    n, row_bytes = data.shape
    out = np.empty((n // GROUP, row_bytes * GROUP), dtype=np.uint8)
    pack_q4_k(data, out)
    out.flags.writeable = False
    return out
