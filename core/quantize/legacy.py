"""The 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and F16/BF16/F32, bit-exact with
ggml's reference quantizers (`quantize_row_*_ref` in ggml-quants.c, `ggml_fp32_to_bf16_row_ref`).

llama-quantize uses exactly these functions when no importance matrix is given. Each kernel maps
float32 blocks x (n, 32) to packed blocks (n, type_size) uint8, vectorised over blocks; every
float32 operation is the one the C code performs, in its order (see cfloat.py).
"""

from __future__ import annotations

import numpy as np

from .cfloat import F32, f16_bytes, roundf


def _absmax_signed(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per block: (amax, max) = the largest |x| and the signed value that first reaches it
    (the C loop keeps the first index on ties: `if (amax < fabsf(v))`). Shapes (n,)."""
    ax = np.abs(x)
    idx = np.argmax(ax, axis=1)
    rows = np.arange(x.shape[0])
    return ax[rows, idx], x[rows, idx]


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """Codes (n, 32) uint8 < 16 -> qs (n, 16): byte j = q[j] | q[j + 16] << 4."""
    return q[:, :16] | (q[:, 16:] << 4)


def _pack_qh(q: np.ndarray) -> np.ndarray:
    """Bit 4 of the codes (n, 32) -> the little-endian uint32 qh (n, 4): bit j = q[j] >> 4."""
    return np.packbits((q >> 4) & 1, axis=1, bitorder="little")


def _int8_trunc(v: np.ndarray) -> np.ndarray:
    """C `(int8_t)(float)`: truncation toward zero, then the int8 range (as int32)."""
    t = np.trunc(v).astype(np.int32)
    return ((t + 128) & 0xFF) - 128


def quantize_q8_0(x: np.ndarray) -> np.ndarray:
    # d = amax / 127, q = roundf(x / d) as x * (1 / d); block: d f16 | qs[32] int8
    amax = np.abs(x).max(axis=1)
    d = amax / F32(127)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, F32(1) / d, F32(0)).astype(F32)
    q = roundf(x * idv[:, None]).astype(np.int8)  # |q| <= 127
    out = np.empty((x.shape[0], 34), dtype=np.uint8)
    out[:, 0:2] = f16_bytes(d[:, None])
    out[:, 2:34] = q.view(np.uint8)
    return out


def _symmetric_codes(x: np.ndarray, nlev: int) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 (nlev 8) / Q5_0 (nlev 16): d = max / -nlev (max = signed value of largest |x|),
    q = MIN(2 nlev - 1, (int8_t)(x * (1/d) + nlev + 0.5)). Returns (d (n,), codes (n, 32))."""
    _, mx = _absmax_signed(x)
    d = mx / F32(-nlev)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, F32(1) / d, F32(0)).astype(F32)
    v = (x * idv[:, None]) + F32(nlev + 0.5)
    q = np.minimum(2 * nlev - 1, _int8_trunc(v)) & 0xFF
    return d, q.astype(np.uint8)


def _affine_codes(x: np.ndarray, nmax: int, clamp: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q4_1 (nmax 15) / Q5_1 (nmax 31): d = (max - min) / nmax, q = trunc((x - min) * (1/d) + 0.5),
    clamped to nmax for Q4_1 (Q5_1's C code has no clamp). Returns (d, min, codes)."""
    mn = x.min(axis=1)
    mx = x.max(axis=1)
    d = (mx - mn) / F32(nmax)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, F32(1) / d, F32(0)).astype(F32)
    v = ((x - mn[:, None]) * idv[:, None]) + F32(0.5)
    if clamp:
        q = np.minimum(nmax, _int8_trunc(v)) & 0xFF
    else:  # (uint8_t)(float): truncation, modulo 256 for the (unreachable) out-of-range case
        q = np.trunc(v).astype(np.int32) & 0xFF
    return d, mn, q.astype(np.uint8)


def quantize_q4_0(x: np.ndarray) -> np.ndarray:
    # block_q4_0: d f16 | qs[16]
    d, q = _symmetric_codes(x, 8)
    out = np.empty((x.shape[0], 18), dtype=np.uint8)
    out[:, 0:2] = f16_bytes(d[:, None])
    out[:, 2:18] = _pack_nibbles(q)
    return out


def quantize_q5_0(x: np.ndarray) -> np.ndarray:
    # block_q5_0: d f16 | qh[4] | qs[16]
    d, q = _symmetric_codes(x, 16)
    out = np.empty((x.shape[0], 22), dtype=np.uint8)
    out[:, 0:2] = f16_bytes(d[:, None])
    out[:, 2:6] = _pack_qh(q)
    out[:, 6:22] = _pack_nibbles(q & 0x0F)
    return out


def quantize_q4_1(x: np.ndarray) -> np.ndarray:
    # block_q4_1: d f16 | m f16 | qs[16]
    d, mn, q = _affine_codes(x, 15, clamp=True)
    out = np.empty((x.shape[0], 20), dtype=np.uint8)
    out[:, 0:4] = f16_bytes(np.stack([d, mn], axis=1))
    out[:, 4:20] = _pack_nibbles(q)
    return out


def quantize_q5_1(x: np.ndarray) -> np.ndarray:
    # block_q5_1: d f16 | m f16 | qh[4] | qs[16]
    d, mn, q = _affine_codes(x, 31, clamp=False)
    out = np.empty((x.shape[0], 24), dtype=np.uint8)
    out[:, 0:4] = f16_bytes(np.stack([d, mn], axis=1))
    out[:, 4:8] = _pack_qh(q)
    out[:, 8:24] = _pack_nibbles(q & 0x0F)
    return out


def quantize_f16(x: np.ndarray) -> np.ndarray:
    # GGML_FP32_TO_FP16: round to nearest even, as NumPy's cast
    return x.astype("<f2").view(np.uint8)


def quantize_bf16(x: np.ndarray) -> np.ndarray:
    # ggml_compute_fp32_to_bf16: NaN -> (bits >> 16) | 64 (quiet); else round to nearest even
    u = np.ascontiguousarray(x, dtype=F32).view(np.uint32)
    rounded = (u + (np.uint32(0x7FFF) + ((u >> 16) & 1))) >> 16
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    h = np.where(nan, (u >> 16) | 64, rounded).astype("<u2")
    return h.view(np.uint8)


def quantize_f32(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype="<f4").view(np.uint8)


__all__ = [
    "quantize_bf16",
    "quantize_f16",
    "quantize_f32",
    "quantize_q4_0",
    "quantize_q4_1",
    "quantize_q5_0",
    "quantize_q5_1",
    "quantize_q8_0",
]
