"""Matmuls on weights kept in their GGUF blocks (integer block dot products, compiled with numba)."""

from llamacli.core.qmm import cache as _cache  # noqa: F401  (before any kernel is defined)
from llamacli.core.qmm.matrix import QuantMatrix, matmul, matmul_many, prepare, supports
from llamacli.core.qmm.warmup import needs_compile, warmup

__all__ = ["QuantMatrix", "matmul", "matmul_many", "needs_compile", "prepare", "supports", "warmup"]
