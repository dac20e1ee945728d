"""Unpacking a ggml weight row into integer codes and integer sub-block scales.

Every quantized type we multiply is, per block of QK values (32 or 256), `d * sc[j] * q - dmin
* m[j]` over sub-blocks j of S = QK / nsub values, with integer codes q, integer scales sc and
mins m, and float d, dmin from fp16 fields (legacy types: one sub-block, sc = 1). The codes are
written with their sub-block scale folded in (sc[j] * q, |sc * q| <= 4064 fits int16), so that
one integer dot product per block gives sum_j sc[j] * dot(q_j, x_j). Each function
here reads the nb blocks of a row `w` (the type's bytes, ggml-common.h layouts) and writes
codes[nb * QK], sc[nb, nsub], m[nb, nsub] and ds[nb], dms[nb] (d and dmin, exact fp16 values as
float32). A whole row per call: numba passes arrays with reference counting, so a call per
block would cost more than the block's work; and indices built from loop counters are known
to be >= 0, so LLVM drops the negative-index checks and vectorises the loops.
The integer dot products of codes with the activation's int8 codes are exact, so every
rounding of a matmul happens in the float scale arithmetic (core/model/kernels/qmm/block_dots.py).

Types: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL (QK 32) and Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_XS (QK 256); the
low-bit types (MXFP4, TQ*, IQ1..IQ3) in core/model/kernels/qmm/unpack_lowbit.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from llamacli.core.model.kernels.qmm.simd import load_f16, or_bitmask32, or_bits32, scale16, scale32, set_bits16, set_bits32

# float32 value of every fp16 bit pattern (exact)
F16 = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
# kvalues_iq4nl (ggml-common.h)
KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8)

_JIT: dict[str, Any] = dict(cache=True, nogil=True)


f16_at = load_f16  # the fp16 field at byte o of w, as float32


@njit(**_JIT)
def unpack_q4_0(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # d f16 | qs[16]: q[j] = (qs[j] & 15) - 8, q[j + 16] = (qs[j] >> 4) - 8
    for b in range(nb):
        o, c = b * 18, b * 32
        set_bits16(w, o + 2, codes, c, 0, 15, -8)
        set_bits16(w, o + 2, codes, c + 16, 4, 15, -8)
        ds[b], dms[b] = f16_at(w, o), np.float32(0.0)


@njit(**_JIT)
def unpack_q4_1(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # d f16 | m f16 | qs[16]: y = d * q + m, q in 0..15
    for b in range(nb):
        o, c = b * 20, b * 32
        set_bits16(w, o + 4, codes, c, 0, 15, 0)
        set_bits16(w, o + 4, codes, c + 16, 4, 15, 0)
        ds[b], dms[b] = f16_at(w, o), f16_at(w, o + 2)


@njit(**_JIT)
def _u32_at(w, o):  # type: ignore[no-untyped-def]
    return np.int64(w[o]) | (np.int64(w[o + 1]) << 8) | (np.int64(w[o + 2]) << 16) | (np.int64(w[o + 3]) << 24)


@njit(**_JIT)
def unpack_q5_0(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # d f16 | qh u32 | qs[16]: q = nibble | (bit j of qh) << 4, minus 16
    for b in range(nb):
        o, c = b * 22, b * 32
        set_bits16(w, o + 6, codes, c, 0, 15, 0)
        set_bits16(w, o + 6, codes, c + 16, 4, 15, 0)
        or_bitmask32(_u32_at(w, o + 2), codes, c, 4)
        scale32(codes, c, 1, -16)
        ds[b], dms[b] = f16_at(w, o), np.float32(0.0)


@njit(**_JIT)
def unpack_q5_1(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # d f16 | m f16 | qh u32 | qs[16]: y = d * q + m, q in 0..31
    for b in range(nb):
        o, c = b * 24, b * 32
        set_bits16(w, o + 8, codes, c, 0, 15, 0)
        set_bits16(w, o + 8, codes, c + 16, 4, 15, 0)
        or_bitmask32(_u32_at(w, o + 4), codes, c, 4)
        ds[b], dms[b] = f16_at(w, o), f16_at(w, o + 2)


@njit(**_JIT)
def unpack_q8_0(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # d f16 | qs[32] int8
    for b in range(nb):
        o, c = b * 34, b * 32
        for j in range(32):
            codes[c + j] = np.int8(w[o + 2 + j])
        ds[b], dms[b] = f16_at(w, o), np.float32(0.0)


@njit(**_JIT)
def unpack_iq4_nl(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # d f16 | qs[16]: q = kvalues[nibble], low nibbles first
    for b in range(nb):
        o, c = b * 18, b * 32
        for j in range(16):
            v = np.int64(w[o + 2 + j])
            codes[c + j] = KVALUES[v & 15]
            codes[c + j + 16] = KVALUES[v >> 4]
        ds[b], dms[b] = f16_at(w, o), np.float32(0.0)


@njit(**_JIT)
def unpack_q2_k(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # scales[16] | qs[64] | d f16 | dmin f16. Value p = 128h + 32k + l: (qs[32h + l] >> 2k) & 3;
    # sub-block p // 16: sc = scales & 15, m = scales >> 4
    for b in range(nb):
        o, c = b * 84, b * 256
        for h in range(2):
            for k in range(4):
                set_bits32(w, o + 16 + 32 * h, codes, c + 128 * h + 32 * k, 2 * k, 3, 0)
        for s in range(16):
            v = np.int64(w[o + s])
            sc[b, s] = v & 15
            mn[b, s] = v >> 4
            scale16(codes, c + 16 * s, v & 15, 0)
        ds[b], dms[b] = f16_at(w, o + 80), f16_at(w, o + 82)


@njit(**_JIT)
def unpack_q3_k(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # hmask[32] | qs[64] | scales[12] | d f16. Value p = 32(4h + k) + l:
    # q = ((qs[32h + l] >> 2k) & 3) - (bit 4h + k of hmask[l] ? 0 : 4) = (q2 | hbit << 2) - 4;
    # scale (6 bits) - 32 per 16
    for b in range(nb):
        o, c = b * 110, b * 256
        for h in range(2):
            for k in range(4):
                bit = 4 * h + k
                set_bits32(w, o + 32 + 32 * h, codes, c + 32 * bit, 2 * k, 3, 0)
                or_bits32(w, o, codes, c + 32 * bit, bit, 1, 2)
        for s in range(16):
            low = (np.int64(w[o + 96 + s]) & 15) if s < 8 else (np.int64(w[o + 96 + s - 8]) >> 4)
            high = (np.int64(w[o + 96 + 8 + s % 4]) >> (2 * (s // 4))) & 3
            sc[b, s] = (low | (high << 4)) - 32
            scale16(codes, c + 16 * s, sc[b, s], -4)
        ds[b], dms[b] = f16_at(w, o + 108), np.float32(0.0)


@njit(**_JIT)
def _scale_min_k4(w, o, j):  # type: ignore[no-untyped-def]
    # get_scale_min_k4 on the 12 packed bytes at o
    if j < 4:
        return np.int64(w[o + j]) & 63, np.int64(w[o + j + 4]) & 63
    s = (np.int64(w[o + j + 4]) & 15) | ((np.int64(w[o + j - 4]) >> 6) << 4)
    m = (np.int64(w[o + j + 4]) >> 4) | ((np.int64(w[o + j]) >> 6) << 4)
    return s, m


@njit(**_JIT)
def _k4_scales_mins(w, o, b, c, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    """Q4_K/Q5_K block b at byte o: its 8 scales and mins, the scales folded into its codes at c,
    and d, dmin (the fp16 fields at o and o + 2)."""
    for j in range(8):
        sc[b, j], mn[b, j] = _scale_min_k4(w, o + 4, j)
        scale32(codes, c + 32 * j, sc[b, j], 0)
    ds[b], dms[b] = f16_at(w, o), f16_at(w, o + 2)


@njit(**_JIT)
def unpack_q4_k(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # d f16 | dmin f16 | scales[12] | qs[128]; sub-block 2g / 2g + 1 = low / high nibbles of
    # qs[32g : 32g + 32]; y = d * sc * q - dmin * m
    for b in range(nb):
        o, c = b * 144, b * 256
        for g in range(4):
            set_bits32(w, o + 16 + 32 * g, codes, c + 64 * g, 0, 15, 0)
            set_bits32(w, o + 16 + 32 * g, codes, c + 64 * g + 32, 4, 15, 0)
        _k4_scales_mins(w, o, b, c, codes, sc, mn, ds, dms)


@njit(**_JIT)
def unpack_q5_k(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # d f16 | dmin f16 | scales[12] | qh[32] | qs[128]; as Q4_K plus bit j of qh[l] as the 5th bit
    for b in range(nb):
        o, c = b * 176, b * 256
        for g in range(4):
            set_bits32(w, o + 48 + 32 * g, codes, c + 64 * g, 0, 15, 0)
            set_bits32(w, o + 48 + 32 * g, codes, c + 64 * g + 32, 4, 15, 0)
            or_bits32(w, o + 16, codes, c + 64 * g, 2 * g, 1, 4)
            or_bits32(w, o + 16, codes, c + 64 * g + 32, 2 * g + 1, 1, 4)
        _k4_scales_mins(w, o, b, c, codes, sc, mn, ds, dms)


@njit(**_JIT)
def unpack_q6_k(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # ql[128] | qh[64] | scales[16] int8 | d f16. Value p = 128h + 32k + l: low 4 bits nibble k // 2
    # of ql[64h + 32(k % 2) + l], high 2 bits (qh[32h + l] >> 2k) & 3; q - 32; scale per 16
    for b in range(nb):
        o, c = b * 210, b * 256
        for h in range(2):
            for k in range(4):
                dst = c + 128 * h + 32 * k
                set_bits32(w, o + 64 * h + 32 * (k % 2), codes, dst, 4 * (k // 2), 15, 0)
                or_bits32(w, o + 128 + 32 * h, codes, dst, 2 * k, 3, 4)
        for s in range(16):
            sc[b, s] = np.int64(np.int8(w[o + 192 + s]))
            scale16(codes, c + 16 * s, sc[b, s], -32)
        ds[b], dms[b] = f16_at(w, o + 208), np.float32(0.0)


@njit(**_JIT)
def unpack_iq4_xs(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # d f16 | scales_h u16 | scales_l[4] | qs[128]; sub-block ib: ls = 4 low bits of
    # scales_l[ib / 2] (nibble ib % 2) | 2 bits of scales_h << 4, scale ls - 32; q = kvalues[nibble]
    for b in range(nb):
        o, c = b * 136, b * 256
        sh = np.int64(w[o + 2]) | (np.int64(w[o + 3]) << 8)
        for ib in range(8):
            low = (np.int64(w[o + 4 + ib // 2]) >> (4 * (ib % 2))) & 15
            sc[b, ib] = (low | (((sh >> (2 * ib)) & 3) << 4)) - 32
            for j in range(16):
                v = np.int64(w[o + 8 + 16 * ib + j])
                codes[c + 32 * ib + j] = KVALUES[v & 15]
                codes[c + 32 * ib + 16 + j] = KVALUES[v >> 4]
            scale32(codes, c + 32 * ib, sc[b, ib], 0)
        ds[b], dms[b] = f16_at(w, o), np.float32(0.0)


# Type ids of the integer kernels (core/model/kernels/qmm/weight_types.py maps ggml types to them).
Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS = range(12)
# the low-bit types (core/model/kernels/qmm/unpack_lowbit.py)
MXFP4, TQ1_0, TQ2_0, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M = range(12, 22)
# the types whose ggml block holds several of the kernel's blocks (core/model/kernels/qmm/unpack_split.py)
NVFP4, Q1_0, Q2_0 = range(22, 25)
