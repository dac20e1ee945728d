"""Matmuls on weights kept in their GGUF blocks (integer block dot products, compiled with numba)."""

from llamacli.core.model.kernels import jit_ir as _jit_ir  # noqa: F401  (before any kernel is loaded)
from llamacli.core.model.kernels.qmm import cache as _cache  # noqa: F401  (before any kernel is defined)
from llamacli.core.model.kernels.qmm.matrix import QuantMatrix, matmul, matmul_many, prepare, supports

__all__ = ["QuantMatrix", "matmul", "matmul_many", "prepare", "supports"]
