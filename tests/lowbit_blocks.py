"""Random valid blocks of ggml's low-bit weight types (MXFP4, TQ1_0, TQ2_0, IQ1_S..IQ3_S, and
SPLIT_TYPES: NVFP4, Q1_0, Q2_0), for
tests and the tiny models: llama.cpp has no quantizer for most of them without an importance
matrix, and every byte pattern of their codes is a valid block, so the codes are random bytes
(TQ2_0: random codes 0..2) and only the block scale is chosen: each block's values get about the wanted standard
deviation (times U(0.5, 1.5)).

    from tests.lowbit_blocks import LOW_BIT_TYPES, random_blocks
    raw = random_blocks(QT.IQ2_XXS, n_out, n_in, std, rng)    # (n_out, row bytes) uint8
"""

from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT

from llamacli.core.model.kernels.ggml_types import Q2_0
from llamacli.core.model.kernels.dequant import dequantize
from llamacli.core.model.kernels.qmm.unpack_split import UE4M3_HALF

LOW_BIT_TYPES = (QT.MXFP4, QT.TQ1_0, QT.TQ2_0, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS, QT.IQ3_S, QT.IQ1_S, QT.IQ1_M)
# ggml types 40-42, whose blocks hold several kernel blocks (core/model/kernels/qmm/unpack_split.py)
SPLIT_TYPES = (QT.NVFP4, QT.Q1_0, Q2_0)
RANDOM_BLOCK_TYPES = LOW_BIT_TYPES + SPLIT_TYPES
_UE4M3 = np.flatnonzero(UE4M3_HALF[:127] > 0)  # the positive UE4M3 bytes, increasing values
_D_AT = {QT.TQ1_0: 52, QT.TQ2_0: 64}  # the fp16 d's byte offset (0 for the IQ types)
_ONE = np.array([1.0], dtype=np.float16).view(np.uint16)[0]


def set_scale(t: QT, blocks: np.ndarray, d: np.ndarray) -> None:
    """Write the block scales d (n,) float32 into blocks (n, type size): MXFP4 as the nearest
    E8M0 exponent (value 2^(e - 128) per unit code), IQ1_M as the fp16 bits spread over the top
    nibbles of its 4 u16 scales, NVFP4 as the nearest UE4M3 byte in each of its 4 scales, the
    others as the fp16 field."""
    if t == QT.NVFP4:
        vals = UE4M3_HALF[_UE4M3]
        i = np.clip(np.searchsorted(vals, d), 1, len(vals) - 1)
        i -= (d - vals[i - 1]) < (vals[i] - d)  # the nearer neighbour
        blocks[:, :4] = _UE4M3[i][:, None].astype(np.uint8)
    elif t == QT.MXFP4:
        blocks[:, 0] = np.clip(np.rint(np.log2(d)) + 128, 1, 254).astype(np.uint8)
    elif t == QT.IQ1_M:
        bits = np.asarray(d, dtype=np.float16).view(np.uint16)
        sc = blocks[:, 48:56].copy().view("<u2")  # (n, 4)
        for k in range(4):
            sc[:, k] = (sc[:, k] & 0x0FFF) | (((bits >> (4 * k)) & 15) << 12)
        blocks[:, 48:56] = sc.view(np.uint8)
    else:
        o = _D_AT.get(t, 0)
        blocks[:, o : o + 2] = np.asarray(d, dtype=np.float16).view(np.uint8).reshape(-1, 2)


def random_blocks(t: QT, n_out: int, n_in: int, std: float, rng: np.random.Generator) -> np.ndarray:
    """A (n_out, n_in) matrix of type t as (n_out, row bytes) uint8: random codes, each block
    scaled to a standard deviation of about std * U(0.5, 1.5)."""
    qk, size = GGML_QUANT_SIZES[t]
    n = n_out * (n_in // qk)
    blocks = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    if t == QT.TQ2_0:  # codes 0..2 only, as ggml's quantizer writes (3, i.e. +2, would bias every row)
        fields = rng.integers(0, 3, size=(n, 64, 4), dtype=np.uint8)
        blocks[:, :64] = (fields << np.array([0, 2, 4, 6], dtype=np.uint8)).sum(axis=2, dtype=np.uint8)
    if t == Q2_0:  # codes 0..2 (-1, 0, +1) with a few 3s (+2): all 3s' mean +1/2 would bias every row
        fields = np.minimum(rng.integers(0, 3, size=(n, 16, 4), dtype=np.uint8) + (rng.random((n, 16, 4)) < 0.05), 3)
        blocks[:, 2:] = (fields.astype(np.uint8) << np.array([0, 2, 4, 6], dtype=np.uint8)).sum(axis=2, dtype=np.uint8)
    set_scale(t, blocks, np.ones(n, dtype=np.float32))  # unit scale: the codes' own spread
    rms = np.sqrt((dequantize(blocks, t, (n, qk)).astype(np.float64) ** 2).mean(axis=1))
    set_scale(t, blocks, (std / np.maximum(rms, 1e-3) * rng.uniform(0.5, 1.5, n)).astype(np.float32))
    return np.ascontiguousarray(blocks.reshape(n_out, -1))
