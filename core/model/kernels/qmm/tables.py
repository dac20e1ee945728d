"""Element-wise functions through ggml's fp16 lookup tables, compiled.

Here rather than beside their callers because they compile in simd.py's intrinsics: numba's
disk cache for this package is stamped with all of its sources (core/model/kernels/qmm/cache.py)."""

from __future__ import annotations

from numba import njit

from llamacli.core.model.kernels.qmm.simd import f16_bits


@njit(cache=True, nogil=True)
def gelu_lookup(x, table, y):  # type: ignore[no-untyped-def]
    """y = table[fp16 bits of x] (x: (n,) float32; table: 65536 float32), except x where
    x >= 10 and 0 where x <= -10, as ggml_vec_gelu_f32."""
    for i in range(x.shape[0]):
        v = x[i]
        if v >= 10.0:
            y[i] = v
        elif v <= -10.0:
            y[i] = 0.0
        else:
            y[i] = table[f16_bits(v)]
