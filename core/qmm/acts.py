"""Activation rows quantized to a weight's vec_dot type, as integer codes and scales.

The same roundings as core/numerics.py (which returns the represented values), here kept as
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

from llamacli.core import numerics as N
from llamacli.core.qmm.formats import ACT_Q8_0, ACT_Q8_1, ACT_Q8_K


@dataclass
class QActs:
    """T activation rows of length K as integer codes."""

    codes: np.ndarray  # (T, K) int8
    d: np.ndarray  # (T, K // qk) float32: block scales (qk = 32 for Q8_0/Q8_1, 256 for Q8_K)
    s: np.ndarray  # (T, K // 32) float32: Q8_1 block sums (empty otherwise)
    bsums: np.ndarray  # (T, K // 16) int32: sums of codes per 16 (Q8_K; empty otherwise)


_EMPTY_F = np.zeros((0, 0), dtype=np.float32)
_EMPTY_I = np.zeros((0, 0), dtype=np.int32)


def quantize_acts(x: np.ndarray, act: int) -> QActs:
    """x (T, K) float32 -> QActs for activation type `act` (formats.ACT_*)."""
    t, k = x.shape
    if act == ACT_Q8_K:
        codes, d = _q8_k(x)
        bsums = codes.reshape(t, k // 16, 16).sum(axis=-1, dtype=np.int32)
        return QActs(codes, d, _EMPTY_F, bsums)
    xb = N._blocks(x, 32)
    with np.errstate(over="ignore", invalid="ignore"):
        q, d32, d16, overflow = N._q8_0_codes(xb)  # q: float codes (T, nb, 32)
    codes = q.astype(np.int8).reshape(t, k)
    s = _EMPTY_F
    if act == ACT_Q8_1:
        total = q.sum(axis=-1)
        total[overflow] = 0  # ggml's int32 sum of 32 * INT32_MIN wraps to 0
        with np.errstate(over="ignore", invalid="ignore"):
            s = (d32 * total).astype(np.float16).astype(np.float32)
    elif act != ACT_Q8_0:
        raise ValueError(f"unknown activation type {act}")
    return QActs(codes, d16, s, _EMPTY_I)


def _q8_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q8_K codes (T, K) int8 and d (T, K // 256) float32 (quantize_row_q8_K)."""
    t, k = x.shape
    xb = N._blocks(x, 256)  # (T, nb, 256)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        first = np.argmax(np.abs(xb), axis=-1)[..., None]  # first index of the largest |x|
        mx = np.take_along_axis(xb, first, axis=-1)[..., 0]  # (T, nb) signed max
        nz = mx != 0
        iscale = np.zeros_like(mx)
        np.divide(np.float32(-127), mx, out=iscale, where=nz)
        d = np.zeros_like(mx)
        np.divide(np.float32(1), iscale, out=d, where=nz)
        q = xb * iscale[..., None]
        np.rint(q, out=q)  # nearest_int: half to even
        np.minimum(q, np.float32(127), out=q)
        bad = ~np.isfinite(iscale)  # |max| < 127 / FLT_MAX: nearest_int(inf/NaN) -> code 0
        if bad.any():
            q[bad] = 0
            d[bad] = 0
    return q.astype(np.int8).reshape(t, k), d.astype(np.float32)
