"""The ternary types TQ1_0 and TQ2_0 and the microscaling MXFP4, bit-exact with ggml's reference
quantizers (`quantize_row_tq1_0_ref`, `quantize_row_tq2_0_ref`, `quantize_row_mxfp4_ref`), which
llama-quantize runs for them (they take no importance weights). Vectorised over blocks, every
float32 operation in the C order (see cfloat.py).

TQ1_0 (256 values, 54 bytes): qs[48] | qh[4] | d f16. Values -> trits t = lroundf(x / amax) + 1
in {0, 1, 2}; five trits per qs byte (t0 t1 t2 t3 t4 as the base-3 number t0 t1 t2 t3 t4,
scaled to a byte: ceil(q * 256 / 243)), value n*32 + m of the first 160 in byte m, of the next
80 (n*16 + m) in byte 32 + m; the last 16 values four per qh byte with a zero trit appended.
TQ2_0 (256 values, 66 bytes): qs[64] | d f16, trits in 2-bit fields (value n*32 + m in bits
2n of byte m of each 128-value half).
MXFP4 (32 values, 17 bytes): e (E8M0 exponent) | qs[16]; scale d = 2^(e - 128) with
e = floor(log2(amax)) - 2 + 127; each value the nearest of the 16 E2M1 codes times d (the first
on ties), values j and j + 16 in byte j.
"""

from __future__ import annotations

import numpy as np

from .cfloat import F32, f16_bytes, roundf

# kvalues_mxfp4 (ggml-common.h): the E2M1 values, doubled
KVALUES_MXFP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int8)


def _trits(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Super-blocks (n, 256) -> (d = amax (n,), trits lroundf(x * (1/d)) + 1 as int32 (n, 256))."""
    d = np.abs(x).max(axis=1)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, F32(1) / d, F32(0)).astype(F32)
    return d, roundf(x * idv[:, None]).astype(np.int32) + 1


def _base3_byte(t: np.ndarray) -> np.ndarray:
    """Trits (..., k) -> the base-3 number t0 t1 ... (as uint8 arithmetic), scaled to a byte:
    (q * 256 + 242) // 243."""
    q = np.zeros(t.shape[:-1], dtype=np.int32)
    for n in range(t.shape[-1]):
        q = (q * 3 + t[..., n]) & 0xFF
    return ((q * 256 + 242) // 243).astype(np.uint8)


def quantize_tq1_0(x: np.ndarray) -> np.ndarray:
    d, t = _trits(x)
    out = np.empty((x.shape[0], 54), dtype=np.uint8)
    # first 160 values: byte m takes values m + n*32, n = 0..4
    out[:, 0:32] = _base3_byte(t[:, :160].reshape(-1, 5, 32).transpose(0, 2, 1))
    # next 80: byte 32 + m takes values 160 + m + n*16
    out[:, 32:48] = _base3_byte(t[:, 160:240].reshape(-1, 5, 16).transpose(0, 2, 1))
    # last 16: qh byte j takes values 240 + j + m*4, m = 0..3, then a trailing zero trit
    last = t[:, 240:].reshape(-1, 4, 4).transpose(0, 2, 1)
    out[:, 48:52] = _base3_byte(np.concatenate([last, np.zeros_like(last[..., :1])], axis=-1))
    out[:, 52:54] = f16_bytes(d[:, None])
    return out


def quantize_tq2_0(x: np.ndarray) -> np.ndarray:
    d, t = _trits(x)
    out = np.empty((x.shape[0], 66), dtype=np.uint8)
    # each 128-value half: byte m holds values m + n*32 in bits 2n
    fields = (t & 3).reshape(-1, 2, 4, 32) << (2 * np.arange(4, dtype=np.int32))[None, None, :, None]
    out[:, 0:64] = fields.sum(axis=2).astype(np.uint8).reshape(-1, 64)
    out[:, 64:66] = f16_bytes(d[:, None])
    return out


def _e8m0_half(e: np.ndarray) -> np.ndarray:
    """ggml_e8m0_to_fp32_half: 2^(e - 128) as float32 (denormal patterns for e < 2)."""
    bits = np.where(e < 2, np.uint32(0x00200000) << e.astype(np.uint32), (e.astype(np.uint32) - 1) << 23)
    return bits.astype(np.uint32).view(np.float32)


def quantize_mxfp4(x: np.ndarray) -> np.ndarray:
    amax = np.abs(x).max(axis=1)
    with np.errstate(divide="ignore"):
        # floorf(log2f(amax)) - 2 + 127, converted to uint8 as x86 does (through int32)
        lg = np.floor(np.log2(amax.astype(np.float64)).astype(F32))
        e = np.where(amax > 0, (np.nan_to_num(lg, neginf=0) - F32(2) + F32(127)), F32(0))
    e8 = (e.astype(np.int64) & 0xFF).astype(np.uint8)
    d = _e8m0_half(e8)
    # err_i = fabsf(kvalues[i] * d - x): the first index of the smallest error
    cand = KVALUES_MXFP4.astype(F32)[None, None, :] * d[:, None, None]
    idx = np.argmin(np.abs(cand - x[:, :, None]), axis=2).astype(np.uint8)
    out = np.empty((x.shape[0], 17), dtype=np.uint8)
    out[:, 0] = e8
    out[:, 1:17] = idx[:, :16] | (idx[:, 16:] << 4)
    return out
