"""Unpacking the low-bit weight types (MXFP4, TQ1_0, TQ2_0, IQ1_S..IQ3_S) into integer codes.

The same contract as core/model/kernels/qmm/unpack.py: a row's nb blocks -> codes[nb * QK]
(int16, each sub-block's integer scale folded in), ds[nb] (float32); sc, mn, dms unused (no
min term). Every value of these types is d * c * (an integer), c a power of two, so
ds = d * c exactly and the block dot of ggml's vec_dot is one exact integer sum:

  MXFP4   e u8 | qs[16]                       ds = 2^(e - 128) (E8M0 halved), q = kvalues_fp4[nibble]
  TQ1_0   qs[48] | qh[4] | d                  ds = d, q = trit - 1 (five trits a byte, four in qh)
  TQ2_0   qs[64] | d                          ds = d, q = 2 bits - 1
  IQ2_XXS d | qs u16[32]                      ds = d / 8, q = (2 ls + 1) * grid * sign, ls per 32
  IQ2_XS  d | qs u16[32] | scales[8]          ds = d / 8, as IQ2_XXS, 9-bit grid index, ls per 16
  IQ2_S   d | qs[32] | signs[32] | qh[8] | scales[8]   ds = d / 8, 10-bit grid index, ls per 16
  IQ3_XXS d | qs[64] | u32[8] scales and signs          ds = d / 4, q = (2 ls + 1) * grid * sign
  IQ3_S   d | qs[64] | qh[8] | signs[32] | scales[4]    ds = d, q = (2 ls + 1) * grid * sign
  IQ1_S   d | qs[32] | qh u16[8]              ds = d / 8, q = (2 ls + 1) * (8 grid +- 1)
  IQ1_M   qs[32] | qh[16] | scales u16[4]     d assembled from the scales' top nibbles; as IQ1_S,
                                              ls per 16, the +-1 (ggml's delta 1/8) per 8

(ggml-common.h layouts, ggml-quants.c dequantize_row_*, ggml-cpu/quants.c vec_dot_*_q8_K: the
IQ1 types' `sumi + IQ1*_DELTA * sumi1` is (8 sumi + sumi1) / 8, the IQ2/IQ3 types' final
0.125 / 0.25 factor folds into ds.) |q| <= 31 * 62 fits int16. The dequantized value is
ds * q, one exact product: core/model/kernels/dequant.py decodes these types through here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from llamacli.core.model.kernels.grids import (
    IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS, KVALUES_FP4,
)
from llamacli.core.model.kernels.qmm import unpack as U
from llamacli.core.model.kernels.qmm.simd import set_bits32
from llamacli.core.model.kernels.qmm.simd_grids import set_grid4, set_grid8, set_grid8_signed, set_trits4, set_trits16, set_trits32
from llamacli.core.model.kernels.qmm.unpack import F16, f16_at

_JIT: dict[str, Any] = dict(cache=True, nogil=True)

# the grids as flat bytes: entry i at i * 8 (or i * 4)
_G2XXS, _G2XS, _G2S = IQ2XXS_GRID.reshape(-1), IQ2XS_GRID.reshape(-1), IQ2S_GRID.reshape(-1)
_G3XXS, _G3S, _G1 = IQ3XXS_GRID.reshape(-1), IQ3S_GRID.reshape(-1), IQ1S_GRID.reshape(-1)
_KSIGNS = KSIGNS_IQ2XS.astype(np.int64)  # 7 sign bits -> the 8 of a group (bit j: value j negative)
_POW3 = (1, 3, 9, 27, 81)
_EIGHTH, _QUARTER = np.float32(0.125), np.float32(0.25)
# GGML_E8M0_TO_FP32_HALF of every byte e: 2^(e - 128) (bits 0x00200000 << e for e < 2, subnormal)
_E = np.arange(256, dtype=np.uint32)
E8M0_HALF = np.where(_E < 2, np.uint32(0x00200000) << (_E & 1), (_E - 1) << 23).astype(np.uint32).view(np.float32)


@njit(**_JIT)
def _u16_at(w, o):  # type: ignore[no-untyped-def]
    return np.int64(w[o]) | (np.int64(w[o + 1]) << 8)


@njit(**_JIT)
def _u32_at(w, o):  # type: ignore[no-untyped-def]
    return _u16_at(w, o) | (_u16_at(w, o + 2) << 16)


@njit(**_JIT)
def unpack_mxfp4(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    for b in range(nb):
        o, c = b * 17, b * 32
        for j in range(16):
            v = np.int64(w[o + 1 + j])
            codes[c + j] = KVALUES_FP4[v & 15]
            codes[c + j + 16] = KVALUES_FP4[v >> 4]
        ds[b] = E8M0_HALF[w[o]]


@njit(**_JIT)
def unpack_tq1_0(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # values 0..159: trit n of qs[m] at 32n + m (m < 32); 160..239: of qs[32 + m] at 160 + 16n + m;
    # 240..255: trit n of qh[j] at 240 + 4n + j
    for b in range(nb):
        o, c = b * 54, b * 256
        for n in range(5):
            set_trits32(w, o, codes, c + 32 * n, _POW3[n])
            set_trits16(w, o + 32, codes, c + 160 + 16 * n, _POW3[n])
        for n in range(4):
            set_trits4(w, o + 48, codes, c + 240 + 4 * n, _POW3[n])
        ds[b] = f16_at(w, o + 52)


@njit(**_JIT)
def unpack_tq2_0(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # value 128h + 32l + m = ((qs[32h + m] >> 2l) & 3) - 1
    for b in range(nb):
        o, c = b * 66, b * 256
        for h in range(2):
            for l in range(4):
                set_bits32(w, o + 32 * h, codes, c + 128 * h + 32 * l, 2 * l, 3, -1)
        ds[b] = f16_at(w, o + 64)


@njit(**_JIT)
def unpack_iq2_xxs(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # per 32 values ib: bytes 8ib..8ib + 3 of qs the 4 grid indices; the u32 after them holds the
    # 4 groups' 7 sign bits (7l) and ls (top 4 bits)
    for b in range(nb):
        o, c = b * 66, b * 256
        for ib in range(8):
            p = o + 2 + 8 * ib
            aux = _u32_at(w, p + 4)
            ls = 2 * (aux >> 28) + 1
            for l in range(4):
                set_grid8(_G2XXS, 8 * np.int64(w[p + l]), codes, c + 32 * ib + 8 * l, _KSIGNS[(aux >> (7 * l)) & 127], ls, 1, 0)
        ds[b] = f16_at(w, o) * _EIGHTH


@njit(**_JIT)
def unpack_iq2_xs(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # qs[4ib + l] (u16): grid index (9 bits) | sign index << 9; ls: nibble l // 2 of scales[ib]
    for b in range(nb):
        o, c = b * 74, b * 256
        for ib in range(8):
            s = np.int64(w[o + 66 + ib])
            for l in range(4):
                q = _u16_at(w, o + 2 + 2 * (4 * ib + l))
                ls = 2 * ((s >> (4 * (l // 2))) & 15) + 1
                set_grid8(_G2XS, 8 * (q & 511), codes, c + 32 * ib + 8 * l, _KSIGNS[q >> 9], ls, 1, 0)
        ds[b] = f16_at(w, o) * _EIGHTH


@njit(**_JIT)
def unpack_iq2_s(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # grid index qs[4ib + l] | 2 bits of qh[ib] (bits 2l, 2l + 1) << 8; signs[4ib + l] as bits
    for b in range(nb):
        o, c = b * 82, b * 256
        for ib in range(8):
            h = np.int64(w[o + 66 + ib])
            s = np.int64(w[o + 74 + ib])
            for l in range(4):
                idx = np.int64(w[o + 2 + 4 * ib + l]) | ((h << (8 - 2 * l)) & 0x300)
                ls = 2 * ((s >> (4 * (l // 2))) & 15) + 1
                set_grid8(_G2S, 8 * idx, codes, c + 32 * ib + 8 * l, np.int64(w[o + 34 + 4 * ib + l]), ls, 1, 0)
        ds[b] = f16_at(w, o) * _EIGHTH


@njit(**_JIT)
def unpack_iq3_xxs(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # per ib: grid indices qs[8ib + 2l], qs[8ib + 2l + 1] (4 values each); u32 at 66 + 4ib: the
    # 4 groups' 7 sign bits and ls (top 4 bits)
    for b in range(nb):
        o, c = b * 98, b * 256
        for ib in range(8):
            aux = _u32_at(w, o + 66 + 4 * ib)
            ls = 2 * (aux >> 28) + 1
            for l in range(4):
                sg = _KSIGNS[(aux >> (7 * l)) & 127]
                d0 = c + 32 * ib + 8 * l
                set_grid4(_G3XXS, 4 * np.int64(w[o + 2 + 8 * ib + 2 * l]), codes, d0, sg, ls, 1, 0)
                set_grid4(_G3XXS, 4 * np.int64(w[o + 3 + 8 * ib + 2 * l]), codes, d0 + 4, sg >> 4, ls, 1, 0)
        ds[b] = f16_at(w, o) * _QUARTER


@njit(**_JIT)
def unpack_iq3_s(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # per ib: grid indices qs[8ib + 2l] | bit 2l of qh[ib] << 8, qs[8ib + 2l + 1] | bit 2l + 1 << 8;
    # signs[4ib + l] as bits; ls: nibble ib % 2 of scales[ib // 2]
    for b in range(nb):
        o, c = b * 110, b * 256
        for ib in range(8):
            h = np.int64(w[o + 66 + ib])
            ls = 2 * ((np.int64(w[o + 106 + ib // 2]) >> (4 * (ib % 2))) & 15) + 1
            for l in range(4):
                sg = np.int64(w[o + 74 + 4 * ib + l])
                d0 = c + 32 * ib + 8 * l
                i1 = np.int64(w[o + 2 + 8 * ib + 2 * l]) | ((h << (8 - 2 * l)) & 256)
                i2 = np.int64(w[o + 3 + 8 * ib + 2 * l]) | ((h << (7 - 2 * l)) & 256)
                set_grid4(_G3S, 4 * i1, codes, d0, sg, ls, 1, 0)
                set_grid4(_G3S, 4 * i2, codes, d0 + 4, sg >> 4, ls, 1, 0)
        ds[b] = f16_at(w, o)


@njit(**_JIT)
def _iq1_group(idx, neg, ls, codes, c):  # type: ignore[no-untyped-def]
    """8 values ls * (8 * grid + delta), delta -1 where `neg` else +1 (ggml's +-IQ1*_DELTA * 8)."""
    set_grid8_signed(_G1, 8 * idx, codes, c, 0, ls, 8, -1 if neg else 1)


@njit(**_JIT)
def unpack_iq1_s(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # per ib: qh[ib] u16 = 4 x 3 high index bits | ls (bits 12-14) | delta sign (bit 15)
    for b in range(nb):
        o, c = b * 50, b * 256
        for ib in range(8):
            qh = _u16_at(w, o + 34 + 2 * ib)
            ls = 2 * ((qh >> 12) & 7) + 1
            for l in range(4):
                _iq1_group(np.int64(w[o + 2 + 4 * ib + l]) | (((qh >> (3 * l)) & 7) << 8), qh & 0x8000, ls, codes,
                           c + 32 * ib + 8 * l)
        ds[b] = f16_at(w, o) * _EIGHTH


@njit(**_JIT)
def unpack_iq1_m(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    # scales u16[4] at 48: 3-bit ls of each 16 values (6 bits per 32), the fp16 d in the top
    # nibbles; qh[2ib + k]: 3 high index bits and the delta sign (bit 3, bit 7) of groups 2k, 2k + 1
    for b in range(nb):
        o, c = b * 56, b * 256
        s0, s1, s2, s3 = _u16_at(w, o + 48), _u16_at(w, o + 50), _u16_at(w, o + 52), _u16_at(w, o + 54)
        for ib in range(8):
            s = _u16_at(w, o + 48 + 2 * (ib // 2)) >> (6 * (ib % 2))
            for l in range(4):
                h = np.int64(w[o + 32 + 2 * ib + l // 2]) >> (4 * (l % 2))
                ls = 2 * ((s >> (3 * (l // 2))) & 7) + 1
                _iq1_group(np.int64(w[o + 4 * ib + l]) | ((h & 7) << 8), h & 8, ls, codes, c + 32 * ib + 8 * l)
        d = (s0 >> 12) | ((s1 >> 8) & 0x00F0) | ((s2 >> 4) & 0x0F00) | (s3 & 0xF000)
        ds[b] = F16[d] * _EIGHTH


# the unpacker of each type id (core/model/kernels/qmm/unpack.py)
UNPACKERS: dict[int, Any] = {
    U.MXFP4: unpack_mxfp4, U.TQ1_0: unpack_tq1_0, U.TQ2_0: unpack_tq2_0, U.IQ2_XXS: unpack_iq2_xxs,
    U.IQ2_XS: unpack_iq2_xs, U.IQ2_S: unpack_iq2_s, U.IQ3_XXS: unpack_iq3_xxs, U.IQ3_S: unpack_iq3_s,
    U.IQ1_S: unpack_iq1_s, U.IQ1_M: unpack_iq1_m,
}
