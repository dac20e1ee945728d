"""Compiling (or loading from numba's disk cache) every kernel before the first request.

The first run on a machine compiles the kernels for its CPU (~30 s on 2 cores) and caches
them; later runs load them in well under a second. `needs_compile()` tells a driver whether to
say so before it happens."""

from __future__ import annotations

from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from llamacli.core.qmm import acts, attention, kernels, tables
from llamacli.core.qmm.matrix import PREFILL_MIN_ROWS, QuantMatrix, matmul, prepare

QT = GGMLQuantizationType

_KERNELS: tuple[Any, ...] = (
    kernels.mm_decode_many, kernels.mm_prefill, kernels.mm_float, acts._q8_0, acts._q8_k, tables.gelu_lookup,
    attention._attend,
)


def needs_compile() -> bool:
    """True when some kernel is neither compiled in this process nor in the disk cache."""
    for k in _KERNELS:
        if k.signatures:
            continue
        try:
            if not k._cache._cache_file._load_index():  # numba's index of cached signatures
                return True
        except Exception:  # noqa: BLE001  (private API: assume the worst)
            return True
    return False


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def warmup() -> None:
    """Run every kernel once on tiny inputs of the types the model uses (read-only weights)."""
    # Q8_0, Q4_1, Q4_K: the 16-row kernel (all its argument types); Q2_K's batches: the
    # token-tiled kernel; F16: the float kernel
    for qt, k in ((QT.Q8_0, 32), (QT.Q4_K, 256), (QT.Q4_1, 32), (QT.Q2_K, 256), (QT.F16, 16)):
        data = np.zeros((2, k // GGML_QUANT_SIZES[qt][0] * GGML_QUANT_SIZES[qt][1]), dtype=np.uint8)
        m = QuantMatrix(_readonly(data), qt, k)
        for rows in (1, PREFILL_MIN_ROWS):
            matmul(prepare(np.ones((rows, k), dtype=np.float32), qt), m)
    x = np.ones(4, dtype=np.float32)
    tables.gelu_lookup(x, np.zeros(65536, dtype=np.float32), np.empty_like(x))
    kv = np.zeros((1, 1, 2, 16), dtype=np.float32)
    attention.attention(np.ones((1, 1, 1, 16), dtype=np.float32), kv, kv, np.zeros((1, 1, 2), dtype=np.float32), 1.0, None)
