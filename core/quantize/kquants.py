"""K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): ports of ggml-quants.c's `quantize_row_q*_K_ref`
and their helpers `make_qkx2_quants`, `make_qx_quants`, `make_q3_quants`, vectorised over blocks.

These are what llama-quantize runs when no importance matrix is given. Every float32 operation
is the C one, in the C order, so the bytes equal ggml's (see cfloat.py for the rules).

Layout: the per-group helpers take the values "element-major", x of shape (n, g): n values per
group (16 or 32) on axis 0 and the g groups on axis 1. A sum over a group is then a sum over
axis 0, which NumPy does row by row, left to right, as the C loop does (`seqsum`), and every
elementwise step runs over all groups at once. The only Python loops are over the fixed
candidate scales (make_qkx2_quants, make_qx_quants) and over the 16 values x 5 passes of
make_q3_quants' coordinate descent; none runs per block.

A kernel maps super-blocks x (nb, 256) float32 to packed blocks (nb, type_size) uint8.
"""

from __future__ import annotations

import numpy as np

from .cfloat import F32, f16_bytes, f16_round, nearest_int, seqsum

QK_K = 256
GROUP_MAX_EPS = F32(1e-15)


def _groups(x: np.ndarray, n: int) -> np.ndarray:
    """Super-blocks (nb, 256) -> element-major groups (n, nb * 256 // n): column g is values
    [n*g, n*g + n) of the flattened input (group j of super-block b is column b * 256/n + j)."""
    return np.ascontiguousarray(x.reshape(-1, n).T)


def _ungroup(a: np.ndarray, nb: int) -> np.ndarray:
    """Inverse of _groups: (n, g) -> (nb, 256)."""
    return np.ascontiguousarray(a.T).reshape(nb, QK_K)


def _rint_clip(v: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """MAX(lo, MIN(hi, nearest_int(v))) for |v| < 2**22, as float32 (in place on v).

    Used only inside the candidate loops, where v = iscale * (x - min) or iscale * x is bounded
    by about nmax + 1 (so rint equals the C bit trick) and groups whose iscale is not finite are
    handled separately."""
    np.rint(v, out=v)
    return np.clip(v, lo, hi, out=v)


def _signed_absmax(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group of x (n, g): (amax, max) = largest |x| and the signed value that first reaches it
    (`if (ax > amax)` keeps the first index on ties)."""
    ax = np.abs(x)
    idx = np.argmax(ax, axis=0)
    cols = np.arange(x.shape[1])
    return ax[idx, cols], x[idx, cols]


# ---------------------------------------------------------------------------------------------
# Group helpers
# ---------------------------------------------------------------------------------------------


def make_qkx2_quants(
    x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int, use_mad: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Affine fit x ~ scale * L - the_min with L in [0, nmax], weights w; x, w (n, g) float32.

    Start from min(x, 0)..max(x); then for each candidate iscale = (rmin + rdelta*is + nmax) /
    (max - min), round, solve the weighted least-squares (scale, min) in closed form and keep it
    if its weighted error (squared, or absolute for use_mad) is lower. The candidates use the
    current best min, as the C loop does. Returns (scale (g,), the_min (g,), L (n, g) float32)."""
    mn = np.minimum(x.min(axis=0), F32(0))
    mx = x.max(axis=0)
    sum_w = seqsum(w)
    sum_x = seqsum(w * x)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = F32(nmax) / (mx - mn)
        # max == min, or a range so small that nmax / range overflows: C ends with L = 0,
        # scale 0 (its nearest_int maps NaN/inf to values that clamp to 0, so D = 0 throughout)
        degenerate = (mx == mn) | ~np.isfinite(iscale)
        iscale[degenerate] = F32(0)
        scale = F32(1) / iscale
        L = _rint_clip(iscale * (x - mn), 0, nmax)
        diff = (scale * L + mn) - x
        err = np.abs(diff, out=diff) if use_mad else np.multiply(diff, diff, out=diff)
        best = seqsum(np.multiply(w, err, out=err))
        cur_min = mn.copy()
        xm = np.empty_like(x)
        for step in range(nstep + 1):
            c = F32(rmin) + F32(rdelta) * F32(step) + F32(nmax)
            isc = c / (mx - cur_min)
            np.subtract(x, cur_min, out=xm)
            la = _rint_clip(np.multiply(xm, isc, out=xm), 0, nmax)
            wl = w * la
            sum_l = seqsum(wl)
            sum_l2 = seqsum(wl * la)
            sum_xl = seqsum(np.multiply(wl, x, out=wl))
            D = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            pos = this_min > 0
            this_min[pos] = F32(0)
            this_scale[pos] = (sum_xl / sum_l2)[pos]
            diff = np.multiply(la, this_scale, out=np.empty_like(x))
            diff += this_min
            diff -= x
            err = np.abs(diff, out=diff) if use_mad else np.multiply(diff, diff, out=diff)
            cur = seqsum(np.multiply(w, err, out=err))
            upd = (D > 0) & (cur < best) & ~degenerate
            if upd.any():
                L[:, upd] = la[:, upd]
                best[upd] = cur[upd]
                scale[upd] = this_scale[upd]
                cur_min[upd] = this_min[upd]
    L[:, degenerate] = F32(0)
    scale[degenerate] = F32(0)
    return scale, -cur_min, L


def make_qx_quants_rmse1(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """make_qx_quants(n, nmax, x, L, rmse_type=1, qw=NULL): symmetric x ~ scale * (L - nmax),
    weights x**2, trying iscale = -(nmax + 0.1*is)/max for is = -9..9. x (n, g).
    Returns (scale (g,), L (n, g) float32 in [0, 2 nmax))."""
    amax, mxv = _signed_absmax(x)
    small = amax < GROUP_MAX_EPS
    mxv = np.where(small, F32(1), mxv)
    w = x * x
    wx = w * x
    with np.errstate(divide="ignore", invalid="ignore"):
        l = _rint_clip(x * (F32(-nmax) / mxv), -nmax, nmax - 1)
        L = l + F32(nmax)
        sumlx = seqsum(wx * l)
        suml2 = seqsum((w * l) * l)
        scale = np.where(suml2 != 0, sumlx / suml2, F32(0)).astype(F32)
        best = scale * sumlx
        for step in range(-9, 10):
            if step == 0:
                continue
            isc = -(F32(nmax) + F32(0.1) * F32(step)) / mxv
            l = _rint_clip(x * isc, -nmax, nmax - 1)
            sumlx = seqsum(wx * l)
            suml2 = seqsum((w * l) * l)
            upd = (suml2 > 0) & (sumlx * sumlx > best * suml2)
            if upd.any():
                L[:, upd] = l[:, upd] + F32(nmax)
                scale[upd] = (sumlx / suml2)[upd]
                best[upd] = scale[upd] * sumlx[upd]
    L[:, small] = F32(0)
    scale[small] = F32(0)
    return scale, L


def make_q3_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """make_q3_quants(n, nmax, x, L, do_rmse=true): symmetric rounding then up to 5 passes of
    coordinate descent on the weighted (x**2) error, one value at a time. x (n, g).

    A pass that changes nothing leaves the state unchanged, so running all 5 passes everywhere
    equals the C `break`. Returns (scale (g,), L (n, g) float32 in [0, 2 nmax))."""
    n = x.shape[0]
    amax, mxv = _signed_absmax(x)
    small = amax < GROUP_MAX_EPS
    mxv = np.where(small, F32(1), mxv)
    w = x * x
    wx = w * x
    lo, hi = F32(-nmax), F32(nmax - 1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        L = _rint_clip(x * (F32(-nmax) / mxv), -nmax, nmax - 1)
        sumlx = seqsum(wx * L)
        suml2 = seqsum((w * L) * L)
        for _ in range(5):
            for i in range(n):
                li = L[i]
                slx = sumlx - wx[i] * li
                sl2 = suml2 - (w[i] * li) * li
                new_l = np.clip(nearest_int((x[i] * sl2) / slx).astype(F32), lo, hi)
                slx_new = slx + wx[i] * new_l
                sl2_new = sl2 + (w[i] * new_l) * new_l
                take = (slx > 0) & (new_l != li) & (sl2_new > 0)
                take &= (slx_new * slx_new) * suml2 > (sumlx * sumlx) * sl2_new
                L[i] = np.where(take, new_l, li)
                sumlx = np.where(take, slx_new, sumlx)
                suml2 = np.where(take, sl2_new, suml2)
        scale = np.where(suml2 > 0, sumlx / suml2, F32(0)).astype(F32)
    L += F32(nmax)
    L[:, small] = F32(0)
    scale[small] = F32(0)
    return scale, L


def _requant(x: np.ndarray, L: np.ndarray, d: np.ndarray, dm: np.ndarray | None, lo: int, hi: int, off: int) -> None:
    """The final pass of the K-quants, in place on L (nb, G, n): where d != 0,
    L = clamp(nearest_int((x + dm) / d), lo, hi) + off (x / d when dm is None); where d == 0 the
    C code `continue`s and L keeps the helper's codes. x (nb, G, n), d and dm (nb, G)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        num = x if dm is None else x + dm[:, :, None]
        q = np.clip(nearest_int(num / d[:, :, None]), lo, hi) + off
    keep = d == 0
    np.copyto(L, np.where(keep[:, :, None], L, q.astype(F32)))


def _uint8_wrap(v: np.ndarray) -> np.ndarray:
    """C conversion of an int to uint8_t (modulo 256), from int32."""
    return (v & 0xFF).astype(np.uint8)


def _pack_2bit(L: np.ndarray) -> np.ndarray:
    """Codes (nb, 256) < 4 -> qs (nb, 64): qs[32h + l] = L[128h + l] | L[128h+l+32] << 2 |
    L[128h+l+64] << 4 | L[128h+l+96] << 6 (Q2_K and Q3_K)."""
    q = L.reshape(-1, 2, 4, 32)
    out = q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)
    return out.reshape(-1, 64)


def _pack_k4_scales(ls: np.ndarray, lm: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K: 8 six-bit scales and mins (nb, 8) -> the 12 packed bytes (nb, 12)."""
    out = np.empty((ls.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    out[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (ls[:, 4:8] & 0x0F) | ((lm[:, 4:8] & 0x0F) << 4)
    return out


# ---------------------------------------------------------------------------------------------
# Super-block kernels
# ---------------------------------------------------------------------------------------------


def _k4_common(x: np.ndarray, nmax: int, rmin: float, nstep: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Shared part of Q4_K (nmax 15) and Q5_K (nmax 31): 8 groups of 32 with weights
    av_x + |x| (av_x = rms of the group), make_qkx2_quants, 6-bit scales and mins under fp16 d,
    dmin, final requantization. Returns (d f16 bytes-ready (nb,), dmin (nb,), packed scales
    (nb, 12), codes (nb, 256) uint8)."""
    nb = x.shape[0]
    xg = _groups(x, 32)  # (32, nb * 8)
    sum_x2 = seqsum(xg * xg)
    av_x = np.sqrt(sum_x2 / F32(32))
    w = av_x + np.abs(xg)
    scales, mins, Lg = make_qkx2_quants(xg, w, nmax, rmin, 0.1, nstep, False)
    scales = scales.reshape(nb, 8)
    mins = mins.reshape(nb, 8)
    max_scale = np.maximum(scales.max(axis=1), F32(0))  # `if (scale > max_scale)` from 0
    max_min = np.maximum(mins.max(axis=1), F32(0))
    with np.errstate(divide="ignore"):
        inv_scale = np.where(max_scale > 0, F32(63) / max_scale, F32(0)).astype(F32)
        inv_min = np.where(max_min > 0, F32(63) / max_min, F32(0)).astype(F32)
    ls = np.minimum(_uint8_wrap(nearest_int(inv_scale[:, None] * scales)), 63)
    lm = np.minimum(_uint8_wrap(nearest_int(inv_min[:, None] * mins)), 63)
    d = max_scale / F32(63)
    dmin = max_min / F32(63)
    dg = f16_round(d)[:, None] * ls.astype(F32)  # (nb, 8)
    dmg = f16_round(dmin)[:, None] * lm.astype(F32)
    L = _ungroup(Lg, nb).reshape(nb, 8, 32)
    _requant(x.reshape(nb, 8, 32), L, dg, dmg, 0, nmax, 0)
    return d, dmin, _pack_k4_scales(ls, lm), L.reshape(nb, QK_K).astype(np.uint8)


def quantize_q4_K(x: np.ndarray) -> np.ndarray:
    # block_q4_K: d f16 | dmin f16 | scales[12] | qs[128]; qs[32c + l] = L[64c + l] | L[64c+32+l] << 4
    d, dmin, sc, L = _k4_common(x, 15, -1.0, 20)
    nb = x.shape[0]
    out = np.empty((nb, 144), dtype=np.uint8)
    out[:, 0:4] = f16_bytes(np.stack([d, dmin], axis=1))
    out[:, 4:16] = sc
    q = L.reshape(nb, 4, 2, 32)
    out[:, 16:144] = (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(nb, 128)
    return out


def quantize_q5_K(x: np.ndarray) -> np.ndarray:
    # block_q5_K: d f16 | dmin f16 | scales[12] | qh[32] | qs[128]; bit b of qh[l] = L[32b + l] > 15
    d, dmin, sc, L = _k4_common(x, 31, -0.5, 15)
    nb = x.shape[0]
    out = np.empty((nb, 176), dtype=np.uint8)
    out[:, 0:4] = f16_bytes(np.stack([d, dmin], axis=1))
    out[:, 4:16] = sc
    high = (L >> 4).reshape(nb, 8, 32)  # (nb, b, l) of 0/1
    out[:, 16:48] = np.packbits(high.transpose(0, 2, 1), axis=2, bitorder="little").reshape(nb, 32)
    q = (L & 0x0F).reshape(nb, 4, 2, 32)
    out[:, 48:176] = (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(nb, 128)
    return out


def quantize_q6_K(x: np.ndarray) -> np.ndarray:
    # block_q6_K: ql[128] | qh[64] | scales[16] int8 | d f16
    nb = x.shape[0]
    xg = _groups(x, 16)  # (16, nb * 16)
    scales, Lg = make_qx_quants_rmse1(xg, 32)
    scales = scales.reshape(nb, 16)
    amax, max_scale = _signed_absmax(scales.T)  # strict `>` on |scale|: first maximum
    zero = amax < GROUP_MAX_EPS
    max_scale = np.where(zero, F32(1), max_scale)
    iscale = F32(-128) / max_scale
    d = F32(1) / iscale
    sc = np.minimum(127, nearest_int(iscale[:, None] * scales))  # int8 range by construction
    sc8 = ((sc + 128) & 0xFF) - 128
    dg = f16_round(d)[:, None] * sc8.astype(F32)
    L: np.ndarray = _ungroup(Lg, nb).reshape(nb, 16, 16)
    _requant(x.reshape(nb, 16, 16), L, dg, None, -32, 31, 32)
    L = L.reshape(nb, QK_K).astype(np.uint8)
    out = np.empty((nb, 210), dtype=np.uint8)
    q = L.reshape(nb, 2, 4, 32)  # [h, k, l]: value 128h + 32k + l
    lo = q & 0x0F
    ql = np.empty((nb, 2, 2, 32), dtype=np.uint8)
    ql[:, :, 0] = lo[:, :, 0] | (lo[:, :, 2] << 4)
    ql[:, :, 1] = lo[:, :, 1] | (lo[:, :, 3] << 4)
    hi = q >> 4
    qh = hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)
    out[:, 0:128] = ql.reshape(nb, 128)
    out[:, 128:192] = qh.reshape(nb, 64)
    out[:, 192:208] = sc8.astype(np.int8).view(np.uint8)
    out[:, 208:210] = f16_bytes(d[:, None])
    # an all-(near-)zero super-block is memset to 0 with d = +0
    out[zero] = 0
    return out


def quantize_q3_K(x: np.ndarray) -> np.ndarray:
    # block_q3_K: hmask[32] | qs[64] | scales[12] | d f16
    nb = x.shape[0]
    xg = _groups(x, 16)
    scales, Lg = make_q3_quants(xg, 4)
    scales = scales.reshape(nb, 16)
    _, max_scale = _signed_absmax(scales.T)
    has = max_scale != 0
    safe = np.where(has, max_scale, F32(1))
    iscale = F32(-32) / safe
    l = nearest_int(iscale[:, None] * scales)
    l = ((l + 128) & 0xFF) - 128  # int8_t l = nearest_int(...)
    l6 = (np.clip(l, -32, 31) + 32).astype(np.uint8)
    l6[~has] = 0
    sc = np.zeros((nb, 12), dtype=np.uint8)
    sc[:, 0:8] = (l6[:, 0:8] & 0x0F) | ((l6[:, 8:16] & 0x0F) << 4)
    hi = (l6 >> 4).reshape(nb, 4, 4)  # [j // 4, j % 4]
    sc[:, 8:12] = hi[:, 0] | (hi[:, 1] << 2) | (hi[:, 2] << 4) | (hi[:, 3] << 6)
    d = np.where(has, F32(1) / iscale, F32(0)).astype(F32)
    dg = f16_round(d)[:, None] * (l6.astype(F32) - F32(32))
    L: np.ndarray = _ungroup(Lg, nb).reshape(nb, 16, 16)
    _requant(x.reshape(nb, 16, 16), L, dg, None, -4, 3, 4)
    L = L.reshape(nb, QK_K).astype(np.uint8)
    out = np.empty((nb, 110), dtype=np.uint8)
    high = (L > 3).reshape(nb, 8, 32)  # bit b of hmask[m] = L[32b + m] > 3
    out[:, 0:32] = np.packbits(high.transpose(0, 2, 1), axis=2, bitorder="little").reshape(nb, 32)
    out[:, 32:96] = _pack_2bit(L & 3)
    out[:, 96:108] = sc
    out[:, 108:110] = f16_bytes(d[:, None])
    return out


def quantize_q2_K(x: np.ndarray) -> np.ndarray:
    # block_q2_K: scales[16] (scale | min << 4) | qs[64] | d f16 | dmin f16
    nb = x.shape[0]
    xg = _groups(x, 16)
    scales, mins, Lg = make_qkx2_quants(xg, np.abs(xg), 3, -0.5, 0.1, 15, True)
    scales = scales.reshape(nb, 16)
    mins = mins.reshape(nb, 16)
    max_scale = np.maximum(scales.max(axis=1), F32(0))
    max_min = np.maximum(mins.max(axis=1), F32(0))
    q4scale = F32(15)
    with np.errstate(divide="ignore"):
        isc = np.where(max_scale > 0, q4scale / max_scale, F32(0)).astype(F32)
        imn = np.where(max_min > 0, q4scale / max_min, F32(0)).astype(F32)
    ls = np.where((max_scale > 0)[:, None], nearest_int(isc[:, None] * scales), 0)
    lm = np.where((max_min > 0)[:, None], nearest_int(imn[:, None] * mins), 0)
    sc = _uint8_wrap(ls) | _uint8_wrap(lm << 4)
    d = np.where(max_scale > 0, max_scale / q4scale, F32(0)).astype(F32)
    dmin = np.where(max_min > 0, max_min / q4scale, F32(0)).astype(F32)
    dg = f16_round(d)[:, None] * (sc & 0x0F).astype(F32)
    dmg = f16_round(dmin)[:, None] * (sc >> 4).astype(F32)
    L: np.ndarray = _ungroup(Lg, nb).reshape(nb, 16, 16)
    _requant(x.reshape(nb, 16, 16), L, dg, dmg, 0, 3, 0)
    L = L.reshape(nb, QK_K).astype(np.uint8)
    out = np.empty((nb, 84), dtype=np.uint8)
    out[:, 0:16] = sc
    out[:, 16:80] = _pack_2bit(L)
    out[:, 80:84] = f16_bytes(np.stack([d, dmin], axis=1))
    return out
