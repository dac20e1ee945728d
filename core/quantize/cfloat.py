"""float32 arithmetic as ggml-quants.c does it, for bit-exact quantizers.

libggml-base is built for baseline x86-64 (SSE2, no FMA, no fast-math), so each C expression
rounds once per operation, in source order, and sums are accumulated left to right. NumPy's
float32 ufuncs round the same way per operation; the helpers here cover the rest:

- `seqsum`: a left-to-right sum (NumPy's `sum` along a contiguous axis is pairwise).
- `nearest_int`: ggml's `nearest_int` (the 1.5 * 2**23 trick), including what it gives for
  NaN, infinities and huge values, where it differs from `rint`.
- `roundf`: C's `roundf` (halves away from zero; NumPy rounds halves to even).
- `f16_round`: GGML_FP32_TO_FP16 then back to float32 (round to nearest even, exact).
"""

from __future__ import annotations

import numpy as np

F32 = np.float32
_MAGIC = F32(12582912.0)  # 1.5 * 2**23: adding it leaves round-to-nearest-even(x) in the low bits


def seqsum(a: np.ndarray) -> np.ndarray:
    """Sum over axis 0, left to right, in float32: ((a[0] + a[1]) + a[2]) + ...

    For a C-contiguous (n, g) array with g >= 2, NumPy reduces along axis 0 by adding whole rows
    in order (an elementwise add per row), which is exactly the C loop. With g == 1 it would sum
    the single column pairwise, so small widths take the explicit loop."""
    if a.ndim != 2 or a.shape[1] < 8 or not a.flags.c_contiguous:
        out = np.array(a[0], dtype=F32, copy=True)
        for i in range(1, a.shape[0]):
            out += a[i]
        return out
    return np.add.reduce(a, axis=0)


def nearest_int(v: np.ndarray) -> np.ndarray:
    """ggml's nearest_int: round half to even for |v| < 2**22; NaN -> 0, +-inf -> -4194304 and
    other out-of-range values wrap, exactly as the C bit trick does. Returns int32."""
    t = np.add(v, _MAGIC, dtype=F32).view(np.int32)
    t &= 0x007FFFFF
    t -= 0x00400000
    return t


def roundf(v: np.ndarray) -> np.ndarray:
    """C roundf (half away from zero) of float32 values, as float32 integers (exact).

    rint rounds halves to even; v - rint(v) is exact in float32, so a half is recognised as a
    difference of exactly +-0.5 and moved away from zero where rint moved it toward zero."""
    q = np.rint(v)
    d = v - q
    q += (d == F32(0.5)) & (v > 0)
    q -= (d == F32(-0.5)) & (v < 0)
    return q


def f16_round(v: np.ndarray) -> np.ndarray:
    """Round float32 to fp16 (nearest even) and back: the value ggml stores and reads back."""
    return np.asarray(v, dtype=F32).astype(np.float16).astype(F32)


def f16_bytes(v: np.ndarray) -> np.ndarray:
    """float32 (..., k) -> the little-endian fp16 bytes (..., 2k) uint8."""
    h = np.ascontiguousarray(np.asarray(v, dtype=F32).astype("<f2"))
    return h.view(np.uint8).reshape(*h.shape[:-1], h.shape[-1] * 2) if h.ndim else h.view(np.uint8)
