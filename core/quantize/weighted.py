"""The importance-weighted quantizers: ggml-quants.c's `quantize_row_*_impl` for Q4_0, Q4_1,
Q5_0, Q5_1 and Q2_K..Q6_K, which llama-quantize runs when an importance matrix covers a tensor.

Each is a compiled port of the C function, statement by statement, bit-exact: every value is a
float32 and every operation rounds once, in the C order (libggml-base is built without FMA or
fast-math; see cfloat.py). An int meeting a float in C is converted to float first, so the ports
convert with `_f` at the same places. The search is sequential per group (each candidate scale
depends on the best so far), so the natural unit is one row; rows are independent.

The weights are per column: `qw` (n_per_row,) is the imatrix row of the tensor (of its expert,
for a 3-D expert tensor), the mean squared input per column.

    encode_weighted(rows (n, n_per_row) float32, qw (n_per_row,) float32, qtype) -> uint8 bytes
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT
from llvmlite import ir
from numba import njit, types

from llamacli.core.model.kernels.qmm.simd import f16_bits, kernel_intrinsic, round_f16

_f = np.float32
_MAGIC = np.float32(12582912.0)  # 1.5 * 2**23
_EPS = np.float32(1e-15)  # GROUP_MAX_EPS
_RMIN = np.float32(-0.9)
_RDELTA = np.float32(0.05)
_TENTH = np.float32(0.1)
QK_K = 256


@kernel_intrinsic
def _f32_bits(typingctx: Any, x: Any) -> Any:
    """The int32 bit pattern of a float32 (memcpy(&i, &val, 4))."""
    sig = types.int32(types.float32)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.IntType(32))

    return sig, codegen


@njit(cache=True, nogil=True)
def _nearest_int(v):  # type: ignore[no-untyped-def]
    """ggml's nearest_int: the 1.5 * 2**23 trick (half to even; NaN and inf as the C bits give)."""
    return np.int32((_f32_bits(np.float32(v + _MAGIC)) & 0x007FFFFF) - 0x00400000)


@njit(cache=True, nogil=True)
def _sq_weights(x, qw, sigma2, out):  # type: ignore[no-untyped-def]
    """out[l] = qw[l] * sqrtf(sigma2 + x[l] * x[l])."""
    for i in range(x.shape[0]):
        out[i] = qw[i] * np.float32(np.sqrt(np.float32(sigma2 + x[i] * x[i])))


@njit(cache=True, nogil=True)
def _weigh(xs, qw, base, at, n, sigma2, weight):  # type: ignore[no-untyped-def]
    """The weights of the group of n values at xs[at:] (qw[base + at:] its imatrix part) into
    weight[:n]; returns their sum (the group's weight in the scale search)."""
    _sq_weights(xs[at : at + n], qw[base + at : base + at + n], sigma2, weight)
    s = np.float32(0.0)
    for i in range(n):
        s += weight[i]
    return s


@njit(cache=True, nogil=True)
def _sum_sq(a):  # type: ignore[no-untyped-def]
    s = np.float32(0.0)
    for i in range(a.shape[0]):
        s += a[i] * a[i]
    return s


@njit(cache=True, nogil=True)
def _signed_absmax(x, n):  # type: ignore[no-untyped-def]
    """(amax, max): the largest |x[i]| over i < n and the signed value that first reaches it."""
    mx = np.float32(0.0)
    amax = np.float32(0.0)
    for i in range(n):
        ax = abs(x[i])
        if ax > amax:
            amax = ax
            mx = x[i]
    return amax, mx


@njit(cache=True, nogil=True)
def _make_qx_quants(n, nmax, x, L, qw):  # type: ignore[no-untyped-def]
    """make_qx_quants(n, nmax, x, L, rmse_type=1, qw): symmetric x ~ scale * (L - nmax), L in
    [0, 2 nmax), least squares with weights qw over 18 candidate inverse scales around
    -nmax / max (max = the signed value of largest |x|). Returns the scale."""
    amax, mx = _signed_absmax(x, n)
    if amax < _EPS:
        for i in range(n):
            L[i] = 0
        return np.float32(0.0)
    iscale = _f(-nmax) / mx
    sumlx = np.float32(0.0)
    suml2 = np.float32(0.0)
    for i in range(n):
        l = max(-nmax, min(nmax - 1, _nearest_int(iscale * x[i])))
        L[i] = l + nmax
        fl = _f(l)
        sumlx += qw[i] * x[i] * fl
        suml2 += qw[i] * fl * fl
    scale = sumlx / suml2 if suml2 != 0 else np.float32(0.0)
    best = scale * sumlx
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = -(_f(nmax) + _TENTH * _f(step)) / mx
        sumlx = np.float32(0.0)
        suml2 = np.float32(0.0)
        for i in range(n):
            fl = _f(max(-nmax, min(nmax - 1, _nearest_int(iscale * x[i]))))
            sumlx += qw[i] * x[i] * fl
            suml2 += qw[i] * fl * fl
        if suml2 > 0 and sumlx * sumlx > best * suml2:
            for i in range(n):
                L[i] = nmax + max(-nmax, min(nmax - 1, _nearest_int(iscale * x[i])))
            scale = sumlx / suml2
            best = scale * sumlx
    return scale


@njit(cache=True, nogil=True)
def _make_qkx3_quants(n, nmax, x, w, L, Laux):  # type: ignore[no-untyped-def]
    """make_qkx3_quants(n, nmax, x, w, L, &the_min, Laux, -0.9f, 0.05f, 36, false): affine
    x ~ scale * L - the_min with L in [0, nmax], weighted least squares over 37 candidate
    inverse scales. Returns (scale, the_min)."""
    mn = x[0]
    mx = x[0]
    sum_w = w[0]
    sum_x = sum_w * x[0]
    for i in range(1, n):
        if x[i] < mn:
            mn = x[i]
        if x[i] > mx:
            mx = x[i]
        sum_w += w[i]
        sum_x += w[i] * x[i]
    if mn > 0:
        mn = np.float32(0.0)
    if mx <= mn:
        for i in range(n):
            L[i] = 0
        return np.float32(0.0), -mn
    iscale = _f(nmax) / (mx - mn)
    scale = np.float32(1.0) / iscale
    best_mad = np.float32(0.0)
    for i in range(n):
        l = max(0, min(nmax, _nearest_int(iscale * (x[i] - mn))))
        L[i] = l
        diff = scale * _f(l) + mn - x[i]
        best_mad += w[i] * (diff * diff)
    for step in range(37):
        iscale = (_RMIN + _RDELTA * _f(step) + _f(nmax)) / (mx - mn)
        sum_l = np.float32(0.0)
        sum_l2 = np.float32(0.0)
        sum_xl = np.float32(0.0)
        for i in range(n):
            l = max(0, min(nmax, _nearest_int(iscale * (x[i] - mn))))
            Laux[i] = l
            fl = _f(l)
            sum_l += w[i] * fl
            sum_l2 += w[i] * fl * fl
            sum_xl += w[i] * fl * x[i]
        D = sum_w * sum_l2 - sum_l * sum_l
        if D > 0:
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            if this_min > 0:
                this_min = np.float32(0.0)
                this_scale = sum_xl / sum_l2
            mad = np.float32(0.0)
            for i in range(n):
                diff = this_scale * _f(Laux[i]) + this_min - x[i]
                mad += w[i] * (diff * diff)
            if mad < best_mad:
                for i in range(n):
                    L[i] = Laux[i]
                best_mad = mad
                scale = this_scale
                mn = this_min
    return scale, -mn


@njit(cache=True, nogil=True)
def _make_qp_quants(n, nmax, x, L, qw):  # type: ignore[no-untyped-def]
    """make_qp_quants: x >= 0 ~ scale * L, L in [0, nmax] (stored as uint8, wrapping as C does),
    a 9-candidate search then up to 5 coordinate-descent passes. Returns the scale."""
    mx = np.float32(0.0)
    for i in range(n):
        mx = mx if mx > x[i] else x[i]
    if mx < _EPS:
        for i in range(n):
            L[i] = 0
        return np.float32(0.0)
    iscale = _f(nmax) / mx
    for i in range(n):
        L[i] = _nearest_int(iscale * x[i]) & 0xFF
    scale = np.float32(1.0) / iscale
    best_mse = np.float32(0.0)
    for i in range(n):
        diff = x[i] - scale * _f(L[i])
        best_mse += qw[i] * diff * diff
    for step in range(-4, 5):
        if step == 0:
            continue
        iscale_is = (_TENTH * _f(step) + _f(nmax)) / mx
        scale_is = np.float32(1.0) / iscale_is
        mse = np.float32(0.0)
        for i in range(n):
            l = min(nmax, _nearest_int(iscale_is * x[i]))
            diff = x[i] - scale_is * _f(l)
            mse += qw[i] * diff * diff
        if mse < best_mse:
            best_mse = mse
            iscale = iscale_is
    sumlx = np.float32(0.0)
    suml2 = np.float32(0.0)
    for i in range(n):
        l = min(nmax, _nearest_int(iscale * x[i]))
        L[i] = l & 0xFF
        fl = _f(l)
        sumlx += qw[i] * x[i] * fl
        suml2 += qw[i] * fl * fl
    for _ in range(5):
        n_changed = 0
        for i in range(n):
            w = qw[i]
            fL = _f(L[i])
            slx = sumlx - w * x[i] * fL
            sl2 = suml2 - w * fL * fL
            if slx > 0 and sl2 > 0:
                new_l = min(nmax, _nearest_int(x[i] * sl2 / slx))
                if new_l != L[i]:
                    fn = _f(new_l)
                    slx += w * x[i] * fn
                    sl2 += w * fn * fn
                    if slx * slx * suml2 > sumlx * sumlx * sl2:
                        L[i] = new_l & 0xFF
                        sumlx = slx
                        suml2 = sl2
                        n_changed += 1
        if n_changed == 0:
            break
    return sumlx / suml2 if suml2 > 0 else np.float32(0.0)


@njit(cache=True, nogil=True)
def _put_f16(out, at, v):  # type: ignore[no-untyped-def]
    """Store GGML_FP32_TO_FP16(v) little-endian at out[at:at + 2]; returns the fp16 value as
    float32 (GGML_FP16_TO_FP32 of what was stored)."""
    h = np.int32(f16_bits(v))
    out[at] = h & 0xFF
    out[at + 1] = h >> 8
    return round_f16(v)


@njit(cache=True, nogil=True)
def _row_sigma2(x, twice):  # type: ignore[no-untyped-def]
    """sum_x2 / n (legacy types: over the row) or 2 * sum_x2 / QK_K (per super-block)."""
    s = _sum_sq(x)
    return np.float32(2.0) * s / _f(QK_K) if twice else s / _f(x.shape[0])


# ------------------------------------------------------------------------------------------
# The 32-value types: per row, sigma2 over the whole row
# ------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _row_q4_0_q5_0(x, qw, out, nmax):  # type: ignore[no-untyped-def]
    """quantize_row_q4_0_impl (nmax 8: d | qs[16]) and q5_0 (nmax 16: d | qh[4] | qs[16])."""
    sigma2 = _row_sigma2(x, False)
    weight = np.empty(32, np.float32)
    L = np.empty(32, np.int32)
    size = 18 if nmax == 8 else 22
    for ib in range(x.shape[0] // 32):
        xb = x[32 * ib : 32 * ib + 32]
        _sq_weights(xb, qw[32 * ib : 32 * ib + 32], sigma2, weight)
        o = size * ib
        _put_f16(out, o, _make_qx_quants(32, nmax, xb, L, weight))
        q = o + 2 if nmax == 8 else o + 6
        qh = 0
        for j in range(16):
            out[q + j] = (L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4)
            qh |= ((L[j] & 0x10) >> 4) << j
            qh |= ((L[j + 16] & 0x10) >> 4) << (j + 16)
        if nmax == 16:
            for b in range(4):
                out[o + 2 + b] = (qh >> (8 * b)) & 0xFF


@njit(cache=True, nogil=True)
def _row_q4_1_q5_1(x, qw, out, nmax):  # type: ignore[no-untyped-def]
    """quantize_row_q4_1_impl (nmax 15: d | m | qs[16]) and q5_1 (31: d | m | qh[4] | qs[16])."""
    sigma2 = _row_sigma2(x, False)
    weight = np.empty(32, np.float32)
    L = np.empty(32, np.int32)
    Laux = np.empty(32, np.int32)
    size = 20 if nmax == 15 else 24
    for ib in range(x.shape[0] // 32):
        xb = x[32 * ib : 32 * ib + 32]
        _sq_weights(xb, qw[32 * ib : 32 * ib + 32], sigma2, weight)
        d, the_min = _make_qkx3_quants(32, nmax, xb, weight, L, Laux)
        o = size * ib
        _put_f16(out, o, d)
        _put_f16(out, o + 2, -the_min)
        q = o + 4 if nmax == 15 else o + 8
        qh = 0
        for j in range(16):
            out[q + j] = (L[j] & 0x0F) | ((L[j + 16] & 0x0F) << 4)
            qh |= ((L[j] & 0x10) >> 4) << j
            qh |= ((L[j + 16] & 0x10) >> 4) << (j + 16)
        if nmax == 31:
            for b in range(4):
                out[o + 4 + b] = (qh >> (8 * b)) & 0xFF


# ------------------------------------------------------------------------------------------
# K-quants: super-blocks of 256
# ------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _pack_2bit(L, out, at):  # type: ignore[no-untyped-def]
    """qs[j/4 + l] = L[j+l] | L[j+l+32] << 2 | L[j+l+64] << 4 | L[j+l+96] << 6, j = 0, 128."""
    for j in range(0, QK_K, 128):
        for l in range(32):
            out[at + j // 4 + l] = (L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6)) & 0xFF


@njit(cache=True, nogil=True)
def _scratch(group, n_groups):  # type: ignore[no-untyped-def]
    """A super-block's work arrays: L (256,), Laux and weight (group,), then per group mins,
    scales, sw (float) and Ls, Lm (int)."""
    f = np.empty(n_groups, np.float32)
    return (np.zeros(QK_K, np.int32), np.empty(group, np.int32), np.empty(group, np.float32), f.copy(), f.copy(),
            f.copy(), np.empty(n_groups, np.int32), np.empty(n_groups, np.int32))


@njit(cache=True, nogil=True)
def _row_q2_K(x, qw, out):  # type: ignore[no-untyped-def]
    """quantize_row_q2_K_impl; block: scales[16] | qs[64] | d | dmin (84 bytes)."""
    L, Laux, weight, mins, scales, sw, Ls, Lm = _scratch(16, 16)
    for i in range(x.shape[0] // QK_K):
        xs = x[QK_K * i : QK_K * (i + 1)]
        sigma2 = _sum_sq(xs) / _f(QK_K)
        for j in range(16):
            sw[j] = _weigh(xs, qw, QK_K * i, 16 * j, 16, sigma2, weight)
            scales[j], mins[j] = _make_qkx3_quants(16, 3, xs[16 * j : 16 * j + 16], weight, L[16 * j : 16 * j + 16], Laux)
        o = 84 * i
        dm = _put_f16(out, o + 80, _make_qp_quants(16, 15, scales, Ls, sw))
        mm = _put_f16(out, o + 82, _make_qp_quants(16, 15, mins, Lm, sw))
        for j in range(16):
            out[o + j] = (Ls[j] | (Lm[j] << 4)) & 0xFF
        for j in range(16):
            sc = np.int32(out[o + j])
            d = dm * _f(sc & 0xF)
            if d == 0:
                continue
            m = mm * _f(sc >> 4)
            for ii in range(16):
                L[16 * j + ii] = max(0, min(3, _nearest_int((xs[16 * j + ii] + m) / d)))
        _pack_2bit(L, out, o + 16)


@njit(cache=True, nogil=True)
def _row_q3_K(x, qw, out):  # type: ignore[no-untyped-def]
    """quantize_row_q3_K_impl; block: hmask[32] | qs[64] | scales[12] | d (110 bytes)."""
    L, _, weight, _, scales, sw, Ls, _ = _scratch(16, 16)
    for i in range(x.shape[0] // QK_K):
        xs = x[QK_K * i : QK_K * (i + 1)]
        sigma2 = _row_sigma2(xs, True)
        for j in range(16):
            sw[j] = _weigh(xs, qw, QK_K * i, 16 * j, 16, sigma2, weight)
            scales[j] = _make_qx_quants(16, 4, xs[16 * j : 16 * j + 16], L[16 * j : 16 * j + 16], weight)
        o = 110 * i
        sc_at = o + 96
        for b in range(12):
            out[sc_at + b] = 0
        d_block = _make_qx_quants(16, 32, scales, Ls, sw)
        for j in range(16):
            l = Ls[j]
            if j < 8:
                out[sc_at + j] = l & 0xF
            else:
                out[sc_at + j - 8] |= (l & 0xF) << 4
            l >>= 4
            out[sc_at + j % 4 + 8] |= (l << (2 * (j // 4))) & 0xFF
        d16 = _put_f16(out, o + 108, d_block)
        for j in range(16):
            lo = np.int32(out[sc_at + j]) & 0xF if j < 8 else np.int32(out[sc_at + j - 8]) >> 4
            hi = (np.int32(out[sc_at + 8 + j % 4]) >> (2 * (j // 4))) & 3
            sc = (lo | (hi << 4)) - 32
            d = d16 * _f(sc)
            if d == 0:
                continue
            for ii in range(16):
                L[16 * j + ii] = max(-4, min(3, _nearest_int(xs[16 * j + ii] / d))) + 4
        for b in range(32):
            out[o + b] = 0
        m = 0
        hm = 1
        for j in range(QK_K):
            if L[j] > 3:
                out[o + m] |= hm
                L[j] -= 4
            m += 1
            if m == QK_K // 8:
                m = 0
                hm <<= 1
        _pack_2bit(L, out, o + 32)


@njit(cache=True, nogil=True)
def _scale_min_k4(j, q, at):  # type: ignore[no-untyped-def]
    """get_scale_min_k4: the 6-bit scale and min of group j from scales[12] at q[at:]."""
    if j < 4:
        return np.int32(q[at + j]) & 63, np.int32(q[at + j + 4]) & 63
    a, b, c = np.int32(q[at + j + 4]), np.int32(q[at + j - 4]), np.int32(q[at + j])
    return (a & 0xF) | ((b >> 6) << 4), (a >> 4) | ((c >> 6) << 4)


@njit(cache=True, nogil=True)
def _row_q4_K_q5_K(x, qw, out, nmax):  # type: ignore[no-untyped-def]
    """quantize_row_q4_K_impl (nmax 15; d | dmin | scales[12] | qs[128], 144 bytes) and q5_K
    (nmax 31; d | dmin | scales[12] | qh[32] | qs[128], 176 bytes)."""
    L, Laux, weight, mins, scales, sw, Ls, Lm = _scratch(32, 8)
    size = 144 if nmax == 15 else 176
    for i in range(x.shape[0] // QK_K):
        xs = x[QK_K * i : QK_K * (i + 1)]
        sigma2 = _row_sigma2(xs, True)
        for j in range(8):
            sw[j] = _weigh(xs, qw, QK_K * i, 32 * j, 32, sigma2, weight)
            scales[j], mins[j] = _make_qkx3_quants(32, nmax, xs[32 * j : 32 * j + 32], weight, L[32 * j : 32 * j + 32], Laux)
        o = size * i
        d_block = _make_qp_quants(8, 63, scales, Ls, sw)
        m_block = _make_qp_quants(8, 63, mins, Lm, sw)
        sc = o + 4
        for j in range(8):
            ls = Ls[j] if nmax == 15 else min(63, Ls[j])
            lm = Lm[j] if nmax == 15 else min(63, Lm[j])
            if j < 4:
                out[sc + j] = ls & 0xFF
                out[sc + j + 4] = lm & 0xFF
            else:
                out[sc + j + 4] = ((ls & 0xF) | ((lm & 0xF) << 4)) & 0xFF
                out[sc + j - 4] |= ((ls >> 4) << 6) & 0xFF
                out[sc + j] |= ((lm >> 4) << 6) & 0xFF
        d16 = _put_f16(out, o, d_block)
        dmin16 = _put_f16(out, o + 2, m_block)
        for j in range(8):
            s, m = _scale_min_k4(j, out, sc)
            d = d16 * _f(s)
            if d == 0:
                continue
            dm = dmin16 * _f(m)
            for ii in range(32):
                L[32 * j + ii] = max(0, min(nmax, _nearest_int((xs[32 * j + ii] + dm) / d)))
        if nmax == 15:
            q = o + 16
            for j in range(0, QK_K, 64):
                for l in range(32):
                    out[q + l] = L[j + l] | (L[j + l + 32] << 4)
                q += 32
        else:
            qh = o + 16
            ql = o + 48
            for b in range(32):
                out[qh + b] = 0
            m1 = 1
            m2 = 2
            for n in range(0, QK_K, 64):
                for j in range(32):
                    l1 = L[n + j]
                    if l1 > 15:
                        l1 -= 16
                        out[qh + j] |= m1
                    l2 = L[n + j + 32]
                    if l2 > 15:
                        l2 -= 16
                        out[qh + j] |= m2
                    out[ql + j] = l1 | (l2 << 4)
                m1 <<= 2
                m2 <<= 2
                ql += 32


@njit(cache=True, nogil=True)
def _row_q6_K(x, qw, out):  # type: ignore[no-untyped-def]
    """quantize_row_q6_K_impl; block: ql[128] | qh[64] | scales[16] int8 | d (210 bytes)."""
    L = np.zeros(QK_K, np.int32)
    scales = np.empty(16, np.float32)
    for i in range(x.shape[0] // QK_K):
        xs = x[QK_K * i : QK_K * (i + 1)]
        o = 210 * i
        max_scale = np.float32(0.0)
        max_abs_scale = np.float32(0.0)
        for ib in range(16):
            scale = _make_qx_quants(16, 32, xs[16 * ib : 16 * ib + 16], L[16 * ib : 16 * ib + 16],
                                    qw[QK_K * i + 16 * ib : QK_K * i + 16 * ib + 16])
            scales[ib] = scale
            abs_scale = abs(scale)
            if abs_scale > max_abs_scale:
                max_abs_scale = abs_scale
                max_scale = scale
        if max_abs_scale < _EPS:
            for b in range(210):
                out[o + b] = 0
            continue
        iscale = np.float32(-128.0) / max_scale
        d16 = _put_f16(out, o + 208, np.float32(1.0) / iscale)
        for ib in range(16):
            out[o + 192 + ib] = min(127, _nearest_int(iscale * scales[ib])) & 0xFF
        for j in range(16):
            s = np.int32(out[o + 192 + j])
            s = s - 256 if s > 127 else s
            d = d16 * _f(s)
            if d == 0:
                continue
            for ii in range(16):
                L[16 * j + ii] = max(-32, min(31, _nearest_int(xs[16 * j + ii] / d))) + 32
        ql = o
        qh = o + 128
        for j in range(0, QK_K, 128):
            for l in range(32):
                q1 = L[j + l] & 0xF
                q2 = L[j + l + 32] & 0xF
                q3 = L[j + l + 64] & 0xF
                q4 = L[j + l + 96] & 0xF
                out[ql + l] = q1 | (q3 << 4)
                out[ql + l + 32] = q2 | (q4 << 4)
                out[qh + l] = ((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4)
                               | ((L[j + l + 96] >> 4) << 6)) & 0xFF
            ql += 64
            qh += 32


@njit(cache=True, nogil=True)
def _rows(kind, x, qw, out):  # type: ignore[no-untyped-def]
    """Every row of x (n, n_per_row) into out (n, row bytes) with the kernel `kind`."""
    for r in range(x.shape[0]):
        if kind == 0:
            _row_q4_0_q5_0(x[r], qw, out[r], 8)
        elif kind == 1:
            _row_q4_0_q5_0(x[r], qw, out[r], 16)
        elif kind == 2:
            _row_q4_1_q5_1(x[r], qw, out[r], 15)
        elif kind == 3:
            _row_q4_1_q5_1(x[r], qw, out[r], 31)
        elif kind == 4:
            _row_q2_K(x[r], qw, out[r])
        elif kind == 5:
            _row_q3_K(x[r], qw, out[r])
        elif kind == 6:
            _row_q4_K_q5_K(x[r], qw, out[r], 15)
        elif kind == 7:
            _row_q4_K_q5_K(x[r], qw, out[r], 31)
        else:
            _row_q6_K(x[r], qw, out[r])


_KIND = {QT.Q4_0: 0, QT.Q5_0: 1, QT.Q4_1: 2, QT.Q5_1: 3, QT.Q2_K: 4, QT.Q3_K: 5, QT.Q4_K: 6,
         QT.Q5_K: 7, QT.Q6_K: 8}
WEIGHTED_TYPES = frozenset(_KIND) | {QT.IQ4_NL, QT.IQ4_XS, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ3_XXS, QT.IQ3_S,
                                     QT.IQ1_S, QT.IQ1_M}


def encode_weighted(rows: np.ndarray, qw: np.ndarray, qtype: QT) -> np.ndarray:
    """rows (n, n_per_row) float32 with the importance weights qw (n_per_row,) -> flat uint8
    ggml bytes, bit-exact with ggml_quantize_chunk(qtype, ..., imatrix=qw). Types outside
    WEIGHTED_TYPES ignore the weights in ggml: the caller uses the plain encoders for them."""
    if qtype not in _KIND and qtype not in (QT.IQ4_NL, QT.IQ4_XS):
        from .iq import encode_iq  # (the IQ1-IQ3 kernels build on this module's helpers)

        return encode_iq(rows, qw, qtype)
    block, size = GGML_QUANT_SIZES[qtype]
    x = np.ascontiguousarray(rows, dtype=np.float32)
    n_per_row = x.shape[1]
    out = np.empty((x.shape[0], n_per_row // block * size), dtype=np.uint8)
    w = np.ascontiguousarray(qw, dtype=np.float32)
    if qtype in (QT.IQ4_NL, QT.IQ4_XS):
        from .iq4 import SUPER_BLOCK, iq4_rows  # (iq4 builds on this module's helpers)

        iq4_rows(x, w, True, out, SUPER_BLOCK[qtype])
    else:
        _rows(_KIND[qtype], x, w, out)
    return out.reshape(-1)
