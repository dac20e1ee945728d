"""Activation rows quantized to a weight's vec_dot type, as integer codes and scales.

The same roundings as core/model/kernels/numerics.py (which returns the represented values), here kept as
codes so that the block dot products are integer:
  Q8_0: blocks of 32, code = rint(x * 127 / amax), d = fp16(amax / 127)     (quantize_row_q8_0)
  Q8_1: Q8_0's codes and d, plus s = fp16(d_f32 * sum(codes)) per block      (quantize_row_q8_1)
  Q8_K: blocks of 256, iscale = -127 / max (max: the first element of largest magnitude,
        signed), code = min(127, rint(x * iscale)), d = 1 / iscale in float32, and the sums
        of the codes in groups of 16 (bsums)                                  (quantize_row_q8_K)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from llamacli.core.model.kernels.qmm.weight_types import ACT_Q8_0, ACT_Q8_1, ACT_Q8_K
from llamacli.core.model.kernels.qmm.simd import round_f16
from llamacli.core.model.kernels.qmm.threads import split_rows


@dataclass
class QActs:
    """T activation rows of length K as integer codes."""

    codes: np.ndarray  # (T, K) int8
    d: np.ndarray  # (T, K // qk) float32: block scales (qk = 32 for Q8_0/Q8_1, 256 for Q8_K)
    s: np.ndarray  # (T, K // 32) float32: Q8_1 block sums (empty otherwise)
    bsums: np.ndarray  # (T, K // 16) int32: sums of codes per 16 (Q8_K; empty otherwise)

    def rows(self, idx: np.ndarray) -> "QActs":
        """These rows only (a row's quantization does not depend on the others)."""
        return QActs(self.codes[idx], self.d[idx], self.s[idx] if self.s.size else self.s,
                     self.bsums[idx] if self.bsums.size else self.bsums)


_EMPTY_F = np.zeros((0, 0), dtype=np.float32)
_EMPTY_I = np.zeros((0, 0), dtype=np.int32)


def quantize_acts(x: np.ndarray, act: int) -> QActs:
    """x (T, K) float32 -> QActs for activation type `act` (formats.ACT_*)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    t, k = x.shape
    codes = np.empty((t, k), dtype=np.int8)
    if act == ACT_Q8_K:
        if k % 256:
            raise ValueError(f"the last axis ({k}) must be a multiple of 256")
        d = np.empty((t, k // 256), dtype=np.float32)
        bsums = np.empty((t, k // 16), dtype=np.int32)
        split_rows(lambda a, b: _q8_k(x[a:b], codes[a:b], d[a:b], bsums[a:b]), t, k)
        return QActs(codes, d, _EMPTY_F, bsums)
    if act not in (ACT_Q8_0, ACT_Q8_1):
        raise ValueError(f"unknown activation type {act}")
    if k % 32:
        raise ValueError(f"the last axis ({k}) must be a multiple of 32")
    d = np.empty((t, k // 32), dtype=np.float32)
    s = np.empty((t, k // 32), dtype=np.float32) if act == ACT_Q8_1 else _EMPTY_F
    sums = act == ACT_Q8_1
    split_rows(lambda a, b: _q8_0(x[a:b], codes[a:b], d[a:b], s[a:b], sums), t, k)  # (an empty s stays empty)
    return QActs(codes, d, s, _EMPTY_I)


_INF = np.float32(np.inf)


@njit(cache=True, nogil=True)
def _q8_0(x, codes, d16, s, with_sums):  # type: ignore[no-untyped-def]
    """quantize_row_q8_0 / q8_1: per block of 32, amax, d = amax / 127, id = 127 / amax
    (0 if amax is 0), code = rint(x * id) (half to even); a block whose id overflows (amax
    below 127 / FLT_MAX) gets the code -128 everywhere, as the AVX conversion of inf/NaN does.
    d16 = fp16(d); Q8_1's s = fp16(d * sum of codes) (0 for an overflowed block). So a code is
    -128 only in an overflowed block, whose d16 is 0 (amax / 127 < 2^-24): the Q8_0 kernels
    without vpdpbusd rely on it (rows.py, `_legacy_terms_bytes`)."""
    t_rows, k = x.shape
    for t in range(t_rows):
        for b in range(k // 32):
            amax = np.float32(0.0)
            for i in range(32):
                amax = max(amax, abs(x[t, b * 32 + i]))
            d = amax / np.float32(127.0)
            inv = np.float32(127.0) / amax if amax != 0 else np.float32(0.0)
            total = 0
            if inv == _INF:
                for i in range(32):
                    codes[t, b * 32 + i] = -128
            else:
                for i in range(32):
                    q = np.int32(np.rint(x[t, b * 32 + i] * inv))
                    codes[t, b * 32 + i] = q
                    total += q
            d16[t, b] = round_f16(d)
            if with_sums:
                s[t, b] = round_f16(d * np.float32(total))


@njit(cache=True, nogil=True)
def _q8_k(x, codes, d, bsums):  # type: ignore[no-untyped-def]
    """quantize_row_q8_K: per block of 256, max = the first element of largest magnitude
    (signed), iscale = -127 / max, d = 1 / iscale, code = min(127, rint(x * iscale)); a block
    of zeros or whose iscale overflows gets codes 0 and d = 0. bsums: code sums per 16."""
    t_rows, k = x.shape
    for t in range(t_rows):
        for b in range(k // 256):
            amax = np.float32(0.0)
            mx = np.float32(0.0)
            for i in range(256):
                v = x[t, b * 256 + i]
                if abs(v) > amax:
                    amax = abs(v)
                    mx = v
            iscale = np.float32(-127.0) / mx if amax != 0 else np.float32(0.0)
            if amax == 0 or abs(iscale) == _INF:
                d[t, b] = 0.0
                for i in range(256):
                    codes[t, b * 256 + i] = 0
            else:
                d[t, b] = np.float32(1.0) / iscale
                for i in range(256):
                    codes[t, b * 256 + i] = min(127, np.int32(np.rint(x[t, b * 256 + i] * iscale)))
            for g in range(16):
                acc = 0
                for i in range(16):
                    acc += codes[t, b * 256 + g * 16 + i]
                bsums[t, b * 16 + g] = acc


def block_sums(codes: np.ndarray) -> np.ndarray:
    """The code sums of each block of 32: codes (T, K) int8 -> (T, K / 32, 1) int32."""
    out = np.empty((codes.shape[0], codes.shape[1] // 32, 1), dtype=np.int32)
    split_rows(lambda a, b: _block_sums(codes[a:b], out[a:b]), codes.shape[0], codes.shape[1])
    return out


@njit(cache=True, nogil=True)
def _block_sums(codes, out):  # type: ignore[no-untyped-def]
    for t in range(codes.shape[0]):
        for b in range(out.shape[1]):
            acc = 0
            for i in range(32):
                acc += codes[t, b * 32 + i]
            out[t, b, 0] = acc
