"""Matmuls on weights kept in their GGUF blocks (integer block dot products, compiled with numba)."""

from llamacli.core.model.kernels.qmm import cache as _cache  # noqa: F401  (before any kernel is defined)
from llamacli.core.model.kernels.qmm.matrix import QuantMatrix, matmul, matmul_many, prepare, supports

__all__ = ["QuantMatrix", "matmul", "matmul_many", "prepare", "supports"]
