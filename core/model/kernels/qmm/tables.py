"""Element-wise functions of ggml's fp16 values (its GELU lookup table, the f16 rounding), compiled.

Here rather than beside their callers because they compile in simd.py's intrinsics: numba's
disk cache for this package is stamped with all of its sources (core/model/kernels/qmm/cache.py)."""

from __future__ import annotations

import numpy as np
from numba import njit

from llamacli.core.model.kernels.qmm.simd import f16_bits, round_f16


@njit(cache=True, nogil=True, inline="always")
def _gelu_at(v, table):  # type: ignore[no-untyped-def]
    """ggml_vec_gelu_f32 of one value: table[fp16 bits of v], v itself where v >= 10, 0 where v <= -10."""
    if v >= 10.0:
        return v
    if v <= -10.0:
        return np.float32(0.0)
    return table[f16_bits(v)]


@njit(cache=True, nogil=True)
def gelu_lookup(x, table, y):  # type: ignore[no-untyped-def]
    """y = GELU of x through the table (x: (n,) float32; table: 65536 float32), as `_gelu_at`."""
    for i in range(x.shape[0]):
        y[i] = _gelu_at(x[i], table)


@njit(cache=True, nogil=True)
def gelu_mul_lookup(x, u, table, y):  # type: ignore[no-untyped-def]
    """y = gelu_lookup(x) * u (float32), in one pass: the GELU-gated FFN's gate times its up
    projection, the same two roundings as the two steps one after the other."""
    for i in range(x.shape[0]):
        y[i] = _gelu_at(x[i], table) * u[i]


@njit(cache=True, nogil=True)
def round_f16_into(x, y):  # type: ignore[no-untyped-def]
    """y = f32(f16(x)), round to nearest even (numerics.round_f16's values, compiled)."""
    for i in range(x.shape[0]):
        y[i] = round_f16(x[i])
