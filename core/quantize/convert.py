"""float32 -> ggml bytes for every type `llama quantize` writes, and re-encoding a slab of one
type's bytes as another (decode with core.dequant, encode here), as llama-quantize's
`llama_tensor_dequantize_impl` + `ggml_quantize_chunk` do."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT

from llamacli.core.model.kernels.dequant import dequantize_into

from . import iq, iq4, kquants, legacy, lowbit

Encoder = Callable[[np.ndarray], np.ndarray]

# type -> encoder of blocks (n, block_size) float32 -> (n, type_size) uint8
ENCODERS: dict[QT, Encoder] = {
    QT.F32: legacy.quantize_f32,
    QT.F16: legacy.quantize_f16,
    QT.BF16: legacy.quantize_bf16,
    QT.Q4_0: legacy.quantize_q4_0,
    QT.Q4_1: legacy.quantize_q4_1,
    QT.Q5_0: legacy.quantize_q5_0,
    QT.Q5_1: legacy.quantize_q5_1,
    QT.Q8_0: legacy.quantize_q8_0,
    QT.Q2_K: kquants.quantize_q2_K,
    QT.Q3_K: kquants.quantize_q3_K,
    QT.Q4_K: kquants.quantize_q4_K,
    QT.Q5_K: kquants.quantize_q5_K,
    QT.Q6_K: kquants.quantize_q6_K,
    QT.TQ1_0: lowbit.quantize_tq1_0,
    QT.TQ2_0: lowbit.quantize_tq2_0,
    QT.MXFP4: lowbit.quantize_mxfp4,
    QT.IQ4_NL: iq4.quantize_iq4_nl,
    QT.IQ4_XS: iq4.quantize_iq4_xs,
    # (IQ2_XXS, IQ2_XS and IQ1_S have no encoder without importance weights: see iq.NEEDS_WEIGHTS)
    QT.IQ2_S: iq.quantize_iq2_s,
    QT.IQ3_XXS: iq.quantize_iq3_xxs,
    QT.IQ3_S: iq.quantize_iq3_s,
    QT.IQ1_M: iq.quantize_iq1_m,
}

# Values per encoder call: about 128 K, so that the (n, groups) temporaries stay in L2.
_CHUNK_VALUES = 1 << 17


def row_nbytes(qtype: QT, n_per_row: int) -> int:
    """ggml_row_size: bytes of one row of n_per_row values (a multiple of the block size)."""
    block, size = GGML_QUANT_SIZES[qtype]
    return n_per_row // block * size


def encode(x: np.ndarray, qtype: QT) -> np.ndarray:
    """float32 values (any shape; size a multiple of the block) -> flat uint8 ggml bytes,
    bit-exact with ggml_quantize_chunk without an importance matrix."""
    enc = ENCODERS[qtype]
    block, size = GGML_QUANT_SIZES[qtype]
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    n_blocks = flat.size // block
    blocks = flat.reshape(n_blocks, block)
    out = np.empty((n_blocks, size), dtype=np.uint8)
    step = max(1, _CHUNK_VALUES // block)
    # overflow to inf in fp16 and NaN inputs behave as in C; no NumPy warnings for them
    with np.errstate(all="ignore"):
        for s in range(0, n_blocks, step):
            out[s : s + step] = enc(blocks[s : s + step]).reshape(-1, size)
    return out.reshape(-1)


def reencode(raw: np.ndarray, src: QT, dst: QT, n_values: int, name: str = "<tensor>") -> np.ndarray:
    """Bytes of n_values values of type src -> bytes of type dst (via exact float32)."""
    x = np.empty(n_values, dtype=np.float32)
    dequantize_into(x, raw, src, name=name)
    return encode(x, dst)
