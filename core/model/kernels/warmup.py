"""Compiling (or loading from numba's disk cache) every kernel before the first request.

The first run on a machine compiles the kernels for its CPU and caches them; later runs load
them in well under a second. `needs_compile()` tells a driver whether to say so before it
happens. The 16-row decode kernel is most of that time (~20 s on one core: LLVM optimises
every type's unrolled blocks); on a machine with two cores or more a second process compiles
the other kernels into the same disk cache meanwhile, and this one then loads them from it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from llamacli.core.model.kernels import ops as K
from llamacli.core.model.kernels.qmm import acts, attention, block_dots, tables
from llamacli.core.model.kernels.qmm.matrix import PREFILL_MIN_ROWS, QuantMatrix, matmul, prepare

QT = GGMLQuantizationType

_KERNELS: tuple[Any, ...] = (
    block_dots.mm_decode_many, block_dots.mm_prefill, block_dots.mm_float, acts._q8_0, acts._q8_k, tables.gelu_lookup,
    attention._attend,
)

# What the helper process runs (the kernels other than the decode kernel).
_HELPER = "from llamacli.core.model.kernels.warmup import warm_others; warm_others()"


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


def _run_matmuls(types: tuple[tuple[GGMLQuantizationType, int], ...], rows: tuple[int, ...]) -> None:
    """One tiny matmul of each (type, row length) for each activation row count (read-only
    weights, as the mapped file's)."""
    for qt, k in types:
        data = np.zeros((2, k // GGML_QUANT_SIZES[qt][0] * GGML_QUANT_SIZES[qt][1]), dtype=np.uint8)
        m = QuantMatrix(_readonly(data), qt, k)
        for n in rows:
            matmul(prepare(np.ones((n, k), dtype=np.float32), qt), m)


def warm_decode() -> None:
    """The 16-row decode kernel (every argument type: Q8_0's, Q4_1's Q8_1 sums, Q4_K's
    sub-block sums) and the Q8_0 / Q8_K quantizers it reads."""
    _run_matmuls(((QT.Q8_0, 32), (QT.Q4_K, 256), (QT.Q4_1, 32)), (1, PREFILL_MIN_ROWS))


def warm_others() -> None:
    """Every other kernel: the token-tiled one (Q2_K's batches), the float one (F16), the GELU
    table, attention, RMSNorm and RoPE."""
    _run_matmuls(((QT.Q2_K, 256),), (PREFILL_MIN_ROWS,))  # (fewer rows take the decode kernel)
    _run_matmuls(((QT.F16, 16),), (1,))
    x = np.ones(4, dtype=np.float32)
    tables.gelu_lookup(x, np.zeros(65536, dtype=np.float32), np.empty_like(x))
    kv = np.zeros((1, 1, 2, 16), dtype=np.float32)
    attention.attention(np.ones((1, 1, 1, 16), dtype=np.float32), kv, kv, np.zeros((1, 1, 2), dtype=np.float32), 1.0, None)
    K.rms_norm(np.ones((1, 16), dtype=np.float32), np.ones(16, dtype=np.float32), 1e-6)
    cos, sin = np.ones((1, 8), dtype=np.float32), np.zeros((1, 8), dtype=np.float32)
    K.apply_rope(np.ones((1, 1, 16), dtype=np.float32), cos, sin, 16, True, fma=True)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _start_helper() -> subprocess.Popen[bytes] | None:
    """A process compiling `warm_others` into the disk cache, or None where it would not run
    beside this one (one core) or cannot start; this process compiles what it did not."""
    if _cores() < 2:
        return None
    try:
        return subprocess.Popen([sys.executable, "-c", _HELPER], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None


def warmup() -> None:
    """Run every kernel once on tiny inputs of the types the model uses."""
    helper = _start_helper() if needs_compile() else None
    try:
        warm_decode()
    except BaseException:  # an interrupt too: stop the helper rather than wait for it
        if helper is not None:
            helper.kill()
            helper.wait()
        raise
    if helper is not None:
        helper.wait()  # its kernels are in the disk cache now (or it failed: compiled below)
    warm_others()
