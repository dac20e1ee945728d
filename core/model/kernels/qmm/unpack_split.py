"""Unpacking the types whose ggml block is several of the kernel's blocks: NVFP4, Q1_0, Q2_0.

The same contract as core/model/kernels/qmm/unpack.py, over the kernel's blocks: a row of nb
kernel blocks -> codes[nb * QK] (int16), ds[nb] (float32); sc, mn, dms unused (no min term).
Each ggml block splits into kernel blocks that carry one float scale each, so the matmul's
term per kernel block is (d_x * ds) * isum with an exact integer isum:

  type   ggml block (values, bytes)          kernel block   ds, code q
  NVFP4  d[4] UE4M3 | qs[32]   (64, 36)      16 values      d[s] as ggml_ue4m3_to_fp32 (the E4M3
                                                            value halved), q = kvalues_fp4[nibble]
                                                            (doubled E2M1): sub-block s is qs[8s..8s+8],
                                                            low nibbles first, then high
  Q1_0   d fp16 | qs[16]       (128, 18)     32 values      d, q = +1 where bit j of qs is set, else -1
  Q2_0   d fp16 | qs[16]       (64, 18)      32 values      d, q = ((qs[j / 4] >> 2 (j % 4)) & 3) - 1

(ggml-common.h block_nvfp4 / block_q1_0 / block_q2_0, ggml-quants.c dequantize_row_*,
ggml-cpu/quants.c vec_dot_*_q8_0: NVFP4's term per 16 values is dy * d * isum, a Q8_0
activation block of 32 spanning two; Q1_0 and Q2_0 sum d1 * isum over the 32-value Q8_0 blocks
of a ggml block, then multiply by d0.) The dequantized value is ds * q, one exact product.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from llamacli.core.model.kernels.grids import KVALUES_FP4
from llamacli.core.model.kernels.qmm import unpack as U
from llamacli.core.model.kernels.qmm.unpack import f16_at

_JIT: dict[str, Any] = dict(cache=True, nogil=True)

# ggml_ue4m3_to_fp32 of every byte: 0 for 0x00 and 0x7F; exponent e = bits 3-6 (bias 7), mantissa
# m = bits 0-2 (bit 7 ignored): m * 2^-9 for e = 0, (1 + m / 8) * 2^(e - 7) otherwise; then halved
_B = np.arange(256)
_E, _M = (_B >> 3) & 15, _B & 7
UE4M3_HALF = (np.where(_E == 0, _M * 2.0**-9, (1 + _M / 8) * 2.0 ** (_E - 7)) * 0.5).astype(np.float32)
UE4M3_HALF[0] = UE4M3_HALF[0x7F] = 0.0

# every byte's codes as int16 lanes of int64 words: Q2_0's 4 (value 4i + l: bits 2l, minus 1),
# Q1_0's 8 (value 8i + l: +1 where bit l is set, else -1) as two words
_BYTE = np.arange(256)[:, None]
Q2_WORDS = (((_BYTE >> (2 * np.arange(4))) & 3) - 1).astype(np.int16).view(np.int64).reshape(256)
Q1_WORDS = (2 * ((_BYTE >> np.arange(8)) & 1) - 1).astype(np.int16).view(np.int64).reshape(256, 2)
# NVFP4: every byte's two codes, kvalues_fp4 of its low and its high nibble
FP4_LO, FP4_HI = KVALUES_FP4[np.arange(256) & 15].astype(np.int16), KVALUES_FP4[np.arange(256) >> 4].astype(np.int16)

# kernel blocks per ggml block, and the ggml block's bytes
SPLIT: dict[int, tuple[int, int]] = {U.NVFP4: (4, 36), U.Q1_0: (4, 18), U.Q2_0: (2, 18)}


@njit(**_JIT)
def unpack_nvfp4(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    for g in range(nb // 4):  # ggml block g: kernel blocks 4g .. 4g + 3
        o = g * 36
        for s in range(4):
            q, c = o + 4 + 8 * s, (4 * g + s) * 16
            for j in range(8):
                v = w[q + j]
                codes[c + j] = FP4_LO[v]
                codes[c + j + 8] = FP4_HI[v]
            ds[4 * g + s] = UE4M3_HALF[w[o + s]]


@njit(**_JIT)
def unpack_q1_0(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    words = codes.view(np.int64)  # (4 codes a word: codes is whole blocks of 32)
    for b in range(nb):
        o, c = (b // 4) * 18, b * 32
        q = o + 2 + 4 * (b % 4)
        for i in range(4):
            words[c // 4 + 2 * i] = Q1_WORDS[w[q + i], 0]
            words[c // 4 + 2 * i + 1] = Q1_WORDS[w[q + i], 1]
        ds[b] = f16_at(w, o)


@njit(**_JIT)
def unpack_q2_0(w, nb, codes, sc, mn, ds, dms):  # type: ignore[no-untyped-def]
    words = codes.view(np.int64)
    for b in range(nb):
        o, c = (b // 2) * 18, b * 32
        q = o + 2 + 8 * (b % 2)
        for i in range(8):
            words[c // 4 + i] = Q2_WORDS[w[q + i]]
        ds[b] = f16_at(w, o)


UNPACKERS: dict[int, Any] = {U.NVFP4: unpack_nvfp4, U.Q1_0: unpack_q1_0, U.Q2_0: unpack_q2_0}
