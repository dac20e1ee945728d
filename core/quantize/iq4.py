"""IQ4_NL and IQ4_XS: ggml's `quantize_row_iq4_nl_impl` (what llama-quantize runs for both,
with or without an importance matrix), compiled and bit-exact like weighted.py.

Values map to the 16 non-linear levels kvalues_iq4nl (nearest by binary search, `best_index_int8`).
Per block of 32 a scale d is searched over 15 candidates around -max / -127 (weights: the
imatrix times sqrt(sigma2 + x^2), or x^2 without one). IQ4_NL (32 values, 18 bytes: d f16 |
qs[16]) stores that scale; IQ4_XS (256 values, 136 bytes: d f16 | scales_h u16 | scales_l[4] |
qs[128]) stores a super-block scale d = -max_scale / 32 and a 6-bit scale per block, then
re-picks the levels with the stored scale.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from gguf import GGMLQuantizationType as QT
from numba import njit

from .weighted import _nearest_int, _put_f16, _signed_absmax, _sq_weights

# kvalues_iq4nl (ggml-common.h)
KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8)
_EPS = np.float32(1e-15)
_NTRY = 7


@njit(cache=True, nogil=True)
def _best_index(values, x):  # type: ignore[no-untyped-def]
    """best_index_int8(16, values, x): the nearest level (binary search; the upper on ties)."""
    if x <= np.float32(values[0]):
        return 0
    if x >= np.float32(values[15]):
        return 15
    ml, mu = 0, 15
    while mu - ml > 1:
        mav = (ml + mu) // 2
        if x < np.float32(values[mav]):
            mu = mav
        else:
            ml = mav
    return mu - 1 if x - np.float32(values[mu - 1]) < np.float32(values[mu]) - x else mu


@njit(cache=True, nogil=True)
def _iq4_super_block(x, qw, has_w, out, at, block_size, values, L, weight, scales):  # type: ignore[no-untyped-def]
    """quantize_row_iq4_nl_impl(super_block_size = x.size, block_size, ..., ntry 7) writing the
    block at out[at:]. IQ4_NL when x.size == block_size, IQ4_XS otherwise."""
    sbs = x.shape[0]
    sigma2 = np.float32(0.0)
    for j in range(sbs):
        sigma2 += x[j] * x[j]
    sigma2 *= np.float32(2.0) / np.float32(sbs)
    max_scale = np.float32(0.0)
    amax_scale = np.float32(0.0)
    v0 = np.float32(values[0])
    nb = sbs // block_size
    for ib in range(nb):
        xb = x[ib * block_size : (ib + 1) * block_size]
        if has_w:
            _sq_weights(xb, qw[ib * block_size : (ib + 1) * block_size], sigma2, weight)
        else:
            for j in range(block_size):
                weight[j] = xb[j] * xb[j]
        amax, mx = _signed_absmax(xb, block_size)
        if amax < _EPS:
            scales[ib] = np.float32(0.0)
            continue
        d = -mx / v0
        iv = np.float32(1.0) / d
        sumqx = np.float32(0.0)
        sumq2 = np.float32(0.0)
        for j in range(block_size):
            l = _best_index(values, iv * xb[j])
            L[ib * block_size + j] = l
            q = np.float32(values[l])
            sumqx += weight[j] * q * xb[j]
            sumq2 += weight[j] * q * q
        d = sumqx / sumq2 if sumq2 > 0 else np.float32(0.0)
        best = d * sumqx
        for itry in range(-_NTRY, _NTRY + 1):
            iv = np.float32(itry + values[0]) / mx
            sumqx = np.float32(0.0)
            sumq2 = np.float32(0.0)
            for j in range(block_size):
                q = np.float32(values[_best_index(values, iv * xb[j])])
                sumqx += weight[j] * q * xb[j]
                sumq2 += weight[j] * q * q
            if sumq2 > 0 and sumqx * sumqx > best * sumq2:
                d = sumqx / sumq2
                best = d * sumqx
        scales[ib] = d
        abs_d = abs(d)
        if abs_d > amax_scale:
            amax_scale = abs_d
            max_scale = d
    if nb > 1:  # IQ4_XS: d | scales_h | scales_l[nb/2] | qs
        scales_h = 0
        for b in range(nb // 2):
            out[at + 4 + b] = 0
        d = -max_scale / np.float32(32.0)
        _put_f16(out, at, d)
        iv = np.float32(1.0) / d if d != 0 else np.float32(0.0)
        for ib in range(nb):
            l = max(-32, min(31, _nearest_int(iv * scales[ib])))
            dl = d * np.float32(l)
            idl = np.float32(1.0) / dl if dl != 0 else np.float32(0.0)
            for j in range(block_size):
                L[ib * block_size + j] = _best_index(values, idl * x[ib * block_size + j])
            l += 32
            if ib % 2 == 0:
                out[at + 4 + ib // 2] = l & 0xF
            else:
                out[at + 4 + ib // 2] |= (l & 0xF) << 4
            scales_h |= (l >> 4) << (2 * (ib % 8))
        out[at + 2] = scales_h & 0xFF
        out[at + 3] = (scales_h >> 8) & 0xFF
        q4 = at + 4 + nb // 2
    else:  # IQ4_NL: d | qs
        _put_f16(out, at, scales[0])
        iv = np.float32(1.0) / scales[0] if scales[0] != 0 else np.float32(0.0)
        for j in range(sbs):
            L[j] = _best_index(values, iv * x[j])
        q4 = at + 2
    for i in range(sbs // 32):
        for j in range(16):
            out[q4 + 16 * i + j] = L[32 * i + j] | (L[32 * i + 16 + j] << 4)


@njit(cache=True, nogil=True)
def iq4_rows(x, qw, has_w, out, sbs):  # type: ignore[no-untyped-def]
    """Rows x (n, n_per_row) -> out (n, row bytes): super-blocks of sbs values (32: IQ4_NL,
    256: IQ4_XS), each with its part of the weights qw (n_per_row,) when has_w."""
    values = KVALUES_IQ4NL
    L = np.zeros(sbs, np.int32)
    weight = np.empty(32, np.float32)
    scales = np.empty(sbs // 32, np.float32)
    size = 18 if sbs == 32 else 136
    for r in range(x.shape[0]):
        for b in range(x.shape[1] // sbs):
            _iq4_super_block(x[r, b * sbs : (b + 1) * sbs], qw[b * sbs : (b + 1) * sbs], has_w, out[r], b * size,
                             32, values, L, weight, scales)


SUPER_BLOCK = {QT.IQ4_NL: 32, QT.IQ4_XS: 256}


def _plain(qtype: QT) -> Callable[[np.ndarray], np.ndarray]:
    """The encoder of blocks (n, block) without weights, for convert.ENCODERS."""
    sbs = SUPER_BLOCK[qtype]

    def enc(blocks: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(blocks, dtype=np.float32)
        out = np.empty((x.shape[0], 18 if sbs == 32 else 136), dtype=np.uint8)
        iq4_rows(x, np.empty(sbs, np.float32), False, out, sbs)
        return out

    return enc


quantize_iq4_nl = _plain(QT.IQ4_NL)
quantize_iq4_xs = _plain(QT.IQ4_XS)
