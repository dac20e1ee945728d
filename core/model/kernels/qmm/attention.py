"""Attention of f16 values without flash attention (docs/numerics.md 2.6), compiled.

For each sequence s and KV head h, the R = G * Tq query rows that share that head
(row r = g * Tq + t: query head h * G + g, query token t) are computed together:

    s[r, l]  = sum over d of f16(q[r, d]) * k[l, d]          (float32, d = 0, 1, ... in order)
    w        = f32(s * scale) + mask  (mask: 0 or -inf); soft-capped if asked: f32(cap(s) * scale) + mask
    e        = expf(w - max w); p = f32(e * f32(1 / sum e))      (ggml's exp and sum: expf.py)
               with a sink (gpt-oss: one logit per head, ggml_soft_max_add_sinks): max w
               includes it and the float64 sum gets expf(sink - max) added after the keys'
    out[r, j] = sum over l of f16(p[r, l]) * v[l, j]         (float32, l = 0, 1, ... in order)

k and v hold f16 values (the cache stores them rounded), so every product is exact in
float32 and each sum is the same chain of float32 additions on any CPU (core/model/kernels/qmm/fsimd.py).
Only a row's visible keys (the run where its mask is 0) enter its sums: keys outside it are
skipped or contribute an exact +0. So a row's result depends on its own query and visible
keys only: not on the other rows or sequences of the call, the key padding of a batch, the
block of queries it was computed in, or the thread that ran it.

`attention_f32` is the same computation with nothing rounded to f16 (ggml's attention on
float32 tensors, as mtmd's encoders run it without flash attention): each product is then
rounded once in its fused multiply-add, still in the same order on every CPU.
"""

from __future__ import annotations

import math
import threading

import numpy as np
from numba import njit

from llamacli.core.model.kernels.qmm.expf import exp_sum, fmaf
from llamacli.core.model.kernels.qmm.fsimd import (fma_tile_1x1, fma_tile_1x2, fma_tile_4x1, fma_tile_4x2, fma_tile_4x5, fma_tile_8x2, scale_add_max,
                                                    transpose16, wide_registers)
from llamacli.core.model.kernels.qmm.simd import round_f16

NO_SINKS = np.zeros(0, dtype=np.float32)
KEY_TILE = 32  # keys per score tile (two 16-float vectors)
ROWS = 4  # query rows per register block


@njit(cache=True, nogil=True)
def _visible(mask, s, lo, hi):  # type: ignore[no-untyped-def]
    """lo[t], hi[t]: the first visible key and one past the last of query t of sequence s."""
    n = mask.shape[2]
    for t in range(mask.shape[1]):
        a = 0
        while a < n and mask[s, t, a] == -np.inf:
            a += 1
        b = n
        while b > a and mask[s, t, b - 1] == -np.inf:
            b -= 1
        lo[t] = a
        hi[t] = b


@njit(cache=True, nogil=True)
def _block_range(lo, hi, tq, r0, nr):  # type: ignore[no-untyped-def]
    """The union of the visible keys of rows r0 .. r0 + nr - 1 (row r is query r % tq)."""
    a = lo[r0 % tq]
    b = hi[r0 % tq]
    for r in range(r0 + 1, r0 + nr):
        a = min(a, lo[r % tq])
        b = max(b, hi[r % tq])
    return a, max(a, b)


@njit(cache=True, nogil=True)
def _softmax_row(sc, so, pb, po, mask, s, t, a, b, la, lb, scale, cap, sink, f16):  # type: ignore[no-untyped-def]
    """Probabilities, rounded to f16 (f16 False: kept in float32), of the scores sc[so + l] for the visible keys l in
    [a, b) into pb[po + l]; pb is 0 for the other keys of [la, lb) (the row block's range).
    sink: the head's sink logit, or -inf for none."""
    if cap > np.float32(0.0):  # llama.cpp's graph: kq * f32(1 / cap), tanh, * cap; then soft_max's scale
        m = np.float32(-np.inf)
        inv_cap = np.float32(1.0) / cap
        for l in range(a, b):
            w = np.float32(math.tanh(np.float64(sc[so + l] * inv_cap))) * cap
            if scale != np.float32(1.0):
                w = w * scale
            w = w + mask[s, t, l]
            sc[so + l] = w
            m = max(m, w)
    else:  # w * 1 is w: every scale alike, sixteen keys at a time, then one by one
        g = (b - a) // 16
        mo = s * (mask.strides[0] // 4) + t * (mask.strides[1] // 4)  # the mask's rows are contiguous
        m = scale_add_max(sc, so + a, g, scale, mask, mo + a)
        for l in range(a + 16 * g, b):
            w = sc[so + l] * scale + mask[s, t, l]
            sc[so + l] = w
            m = max(m, w)
    m = max(m, sink)
    if not np.isfinite(m):
        m = np.float32(0.0)
    total = exp_sum(sc, so + a, b - a, m)  # float64
    if sink > -np.inf:  # ggml: sum += (ggml_float) expf(sink - max), libm's expf
        total += np.float64(np.float32(math.exp(np.float64(sink - m))))
    inv = np.float32(1.0 / total) if total > 0.0 else np.float32(0.0)
    for l in range(la, a):
        pb[po + l] = np.float32(0.0)
    if f16:
        for l in range(a, b):
            pb[po + l] = round_f16(sc[so + l] * inv)
    else:
        for l in range(a, b):
            pb[po + l] = sc[so + l] * inv
    for l in range(b, lb):
        pb[po + l] = np.float32(0.0)


@njit(cache=True, nogil=True)
def _transpose_keys(k, s, h, klo, khi, kt, lp):  # type: ignore[no-untyped-def]
    """kt[lt * D + d * KEY_TILE + l - lt] = k[s, h, l, d] for the key tiles (lt: a multiple of
    KEY_TILE) that hold [klo, khi): each tile's D x KEY_TILE block contiguous, which the score
    tiles read row after row; the tiles' other keys are set to 0 (their scores are never read;
    0 keeps them finite). Sixteen keys inside [klo, khi) by sixteen values at a time are one
    register transpose (fsimd.transpose16) when k's rows are contiguous and D a multiple of 16;
    the other keys one value at a time."""
    D = k.shape[3]
    a = klo // KEY_TILE * KEY_TILE
    b = min(lp, (khi + KEY_TILE - 1) // KEY_TILE * KEY_TILE)
    blocks = D % 16 == 0 and k.strides[3] == 4
    ks = k.strides[2] // 4
    kbase = s * (k.strides[0] // 4) + h * (k.strides[1] // 4)
    for lt in range(a, b, KEY_TILE):
        for g in range(lt, lt + KEY_TILE, 16):
            if blocks and g >= klo and g + 16 <= khi:
                for d0 in range(0, D, 16):
                    transpose16(k, kbase + g * ks + d0, ks, kt, lt * D + d0 * KEY_TILE + g - lt, KEY_TILE)
                continue
            l0 = min(max(g, klo), g + 16)
            l1 = max(min(g + 16, khi), l0)
            for d in range(D):
                row = lt * D + d * KEY_TILE - lt
                for l in range(g, l0):
                    kt[row + l] = np.float32(0.0)
                for l in range(l0, l1):
                    kt[row + l] = k[s, h, l, d]
                for l in range(l1, g + 16):
                    kt[row + l] = np.float32(0.0)


@njit(cache=True, nogil=True)
def _attend(q, k, v, mask, scale, cap, sinks, out):  # type: ignore[no-untyped-def]
    """out (S, H, Tq, Dv) = attention of q (S, H, Tq, D) over k (S, Hkv, L, D), v (S, Hkv, L, Dv)
    with the additive mask (S, Tq, L) and sinks (H,) (empty: none); see the module for the
    order of every sum."""
    _attend_rounded(q, k, v, mask, scale, cap, sinks, out, True)


@njit(cache=True, nogil=True)
def _attend_f32(q, k, v, mask, scale, out):  # type: ignore[no-untyped-def]
    """`_attend` with q and p kept in float32 (float32 k and v; no soft cap, no sinks)."""
    _attend_rounded(q, k, v, mask, scale, np.float32(0.0), NO_SINKS, out, False)


@njit(cache=True, nogil=True, inline="always")
def _attend_rounded(q, k, v, mask, scale, cap, sinks, out, f16):  # type: ignore[no-untyped-def]
    """`_attend`, q and p rounded to f16 when f16 is true."""
    S, H, Tq, D = q.shape
    Hkv, L, Dv = k.shape[1], k.shape[2], v.shape[3]
    G = H // Hkv
    R = G * Tq
    Lp = (L + KEY_TILE - 1) // KEY_TILE * KEY_TILE
    f32 = np.float32
    qb = np.empty(R * D, f32)  # f16(q) rows
    kt = np.empty(D * Lp, f32)  # k transposed by tiles of keys (`_transpose_keys`)
    sc = np.empty(R * Lp, f32)  # scores, then exponentials
    pb = np.zeros(R * Lp, f32)  # f16(p)
    ob = np.empty(R * Dv, f32)
    lo = np.empty(Tq, np.int64)
    hi = np.empty(Tq, np.int64)
    nblk = (R + ROWS - 1) // ROWS
    blo = np.empty(nblk, np.int64)
    bhi = np.empty(nblk, np.int64)
    vs0, vs1, vs2 = v.strides[0] // 4, v.strides[1] // 4, v.strides[2] // 4
    wide = wide_registers()
    for s in range(S):
        _visible(mask, s, lo, hi)
        for ib in range(nblk):
            r0 = ib * ROWS
            blo[ib], bhi[ib] = _block_range(lo, hi, Tq, r0, min(ROWS, R - r0))
        klo = blo.min()
        khi = bhi.max()
        for h in range(Hkv):
            for r in range(R):
                for d in range(D):
                    x = q[s, h * G + r // Tq, r % Tq, d]
                    qb[r * D + d] = round_f16(x) if f16 else x
            _transpose_keys(k, s, h, klo, khi, kt, Lp)
            # scores of each row block over its key tiles
            for ib in range(nblk):
                r0 = ib * ROWS
                nr = min(ROWS, R - r0)
                # With 32 vector registers two whole blocks take 8-row tiles over the union of
                # their keys (scores beyond a row's own keys are never read): the even block
                # computes the pair's, the odd one none.
                paired = wide and nr == ROWS and (ib % 2 == 1 or (ib + 1 < nblk and r0 + 2 * ROWS <= R))
                if paired and ib % 2 == 0:
                    for lt in range(min(blo[ib], blo[ib + 1]) // KEY_TILE * KEY_TILE, max(bhi[ib], bhi[ib + 1]), KEY_TILE):
                        fma_tile_8x2(qb, r0 * D, D, kt, lt * D, KEY_TILE, D, sc, r0 * Lp + lt, Lp)
                for lt in range(blo[ib] // KEY_TILE * KEY_TILE, bhi[ib], KEY_TILE):
                    if paired:
                        break
                    if nr == ROWS:
                        fma_tile_4x2(qb, r0 * D, D, kt, lt * D, KEY_TILE, D, sc, r0 * Lp + lt, Lp)
                    else:
                        for r in range(r0, r0 + nr):
                            fma_tile_1x2(qb, r * D, D, kt, lt * D, KEY_TILE, D, sc, r * Lp + lt, Lp)
                for r in range(r0, r0 + nr):
                    t = r % Tq
                    sink = sinks[h * G + r // Tq] if sinks.shape[0] > 0 else f32(-np.inf)
                    _softmax_row(sc, r * Lp, pb, r * Lp, mask, s, t, lo[t], hi[t], blo[ib], bhi[ib], scale, cap, sink, f16)
            # f16(p) times v, 32 (then 16, then 1) output columns at a time
            vbase = s * vs0 + h * vs1
            for ib in range(nblk):
                r0 = ib * ROWS
                nr = min(ROWS, R - r0)
                a = blo[ib]
                n = bhi[ib] - a
                j = 0
                while wide and nr == ROWS and j + 80 <= Dv:
                    fma_tile_4x5(pb, r0 * Lp + a, Lp, v, vbase + a * vs2 + j, vs2, n, ob, r0 * Dv + j, Dv)
                    j += 80
                while j + 16 <= Dv:
                    wide = j + 32 <= Dv
                    for r in range(r0, r0 + nr, ROWS if nr == ROWS else 1):
                        vo = vbase + a * vs2 + j
                        if nr == ROWS and wide:
                            fma_tile_4x2(pb, r * Lp + a, Lp, v, vo, vs2, n, ob, r * Dv + j, Dv)
                        elif nr == ROWS:
                            fma_tile_4x1(pb, r * Lp + a, Lp, v, vo, vs2, n, ob, r * Dv + j, Dv)
                        elif wide:
                            fma_tile_1x2(pb, r * Lp + a, Lp, v, vo, vs2, n, ob, r * Dv + j, Dv)
                        else:
                            fma_tile_1x1(pb, r * Lp + a, Lp, v, vo, vs2, n, ob, r * Dv + j, Dv)
                    j += 32 if wide else 16
                for jj in range(j, Dv):  # the same chain of additions, one column at a time
                    for r in range(r0, r0 + nr):
                        acc = f32(0.0)
                        for l in range(a, a + n):
                            acc = fmaf(pb[r * Lp + l], v[s, h, l, jj], acc)  # as the tiles
                        ob[r * Dv + jj] = acc
            for r in range(R):
                for jj in range(Dv):
                    out[s, h * G + r // Tq, r % Tq, jj] = ob[r * Dv + jj]


# One compiled form for every call (views of the cache are of any layout; a C-contiguous
# array converts to it), so neither a batch's shape nor a copy triggers a compilation.
_SIGNATURE = (
    "void(float32[:,:,:,:], float32[:,:,:,:], float32[:,:,:,:], float32[:,:,:], float32, float32, float32[::1], "
    "float32[:,:,:,::1])"
)


_SIGNATURE_F32 = "void(float32[:,:,:,:], float32[:,:,:,:], float32[:,:,:,:], float32[:,:,:], float32, float32[:,:,:,::1])"
_COMPILE_LOCK = threading.Lock()


def _compiled(fn=_attend, sig: str = _SIGNATURE) -> None:  # type: ignore[no-untyped-def]
    """Compile (or load from the disk cache) on first use; attention groups call concurrently."""
    if fn.signatures:
        return
    with _COMPILE_LOCK:
        if not fn.signatures:
            fn.compile(sig)
            fn.disable_compile()


def _writable(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float32)
    if not a.flags.writeable or a.strides[-1] != 4:
        a = np.ascontiguousarray(a).copy()
    return a


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, scale: float, softcap: float | None,
              sinks: np.ndarray | None = None) -> np.ndarray:
    """softmax(f16(q) k^T * scale (soft-capped) + mask) rounded to f16, times v.

    q (S, H, Tq, D); k (S, Hkv, L, D) and v (S, Hkv, L, Dv) hold f16 values (the KV cache);
    mask (S, Tq, L) of 0 / -inf; sinks (H,) float32 or None. Returns (S, H, Tq, Dv) float32. A
    query row that sees no key (and has no sink) gets zeros."""
    _compiled()
    S, H, Tq, _ = q.shape
    out = np.empty((S, H, Tq, v.shape[3]), dtype=np.float32)
    cap = np.float32(softcap) if softcap else np.float32(0.0)
    sk = NO_SINKS if sinks is None else np.ascontiguousarray(sinks, dtype=np.float32)
    _attend(_writable(q), _writable(k), _writable(v), _writable(mask), np.float32(scale), cap, sk, out)
    return out


def attention_f32(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """softmax(q k^T * scale) v over every key, all in float32 (ggml's non-flash attention on
    float32 tensors: mtmd's encoders): the module's order with q and p not rounded, each
    product then rounded once in its fused multiply-add (the same bits on every CPU).

    q (S, H, Tq, D); k (S, H, L, D); v (S, H, L, Dv). Returns (S, H, Tq, Dv) float32."""
    _compiled(_attend_f32, _SIGNATURE_F32)
    S, H, Tq, _ = q.shape
    dv = v.shape[3]
    dp = -(-dv // 16) * 16  # v's columns padded to whole tiles: the same sums, none done one by one
    vp = np.zeros(v.shape[:3] + (dp,), dtype=np.float32)
    vp[..., :dv] = v
    out = np.empty((S, H, Tq, dp), dtype=np.float32)
    # no mask: one row of zeros seen by every query (a view of stride 0 stays in the cache)
    row = np.zeros(k.shape[2], dtype=np.float32)
    mask = np.lib.stride_tricks.as_strided(row, (S, Tq, k.shape[2]), (0, 0, 4), writeable=True)
    _attend_f32(_writable(q), _writable(k), vp, mask, np.float32(scale), out)
    return out[..., :dv]
