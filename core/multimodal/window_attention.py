"""Self-attention of mtmd's towers (the audio encoder; Qwen2.5-VL's vision tower, with window
masks) in the order of float operations ggml-cpu gives mtmd's non-flash path
(clip_graph::build_attn), on float32 Q, K, V:

    kq   = mul_mat(K, Q)            Q is a permuted view, so no sgemm: every score a
                                    ggml_vec_dot_f32 over the head dim
    kq   = soft_max_ext(kq, mask, scale)   x * scale + mask, max, `soft_max_sum`, times 1 / sum
    kqv  = mul_mat(V^T, kq)         kq is contiguous: llamafile's tinyBLAS when the keys are a
                                    multiple of 16 (16 fused multiply-add lanes, key j in lane
                                    j % 16, then _mm512_reduce_add_ps), ggml_vec_dot_f32 else

A key outside the query's window has score -FLT_MAX (clip.cpp's mask, which absorbs any score)
and probability exactly 0, so its terms change no sum: they are skipped, keeping every other
term in its lane and order (the cost is the window's, not the image's). Without windows
(full layers, clip.cpp passes no mask) every key is in.

ggml_vec_dot_f32 (AVX-512): 64 values per step into 4 x 16 fused multiply-add lanes; the four
accumulators added (0 + 2, 1 + 3, then 0 + 1) and reduced as _mm512_reduce_add_ps (16 -> 8 -> 4,
then (0 + 2) + (1 + 3)); the remaining n % 64 products added one by one in float, each a fused
multiply and add (measured: not contracted into a fused multiply-add).
All in float32 with llvm.fma, so the result is the same on every CPU.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from llamacli.core.model.kernels.qmm.expf import expf_ggml, fmaf

f32 = np.float32
LOWEST = f32(np.finfo(np.float32).min)


@njit(cache=True, nogil=True, inline="always")
def _reduce16(a):  # type: ignore[no-untyped-def]
    """_mm512_reduce_add_ps of 16 float32 lanes."""
    t0 = (a[8] + a[0]) + (a[12] + a[4])
    t1 = (a[9] + a[1]) + (a[13] + a[5])
    t2 = (a[10] + a[2]) + (a[14] + a[6])
    t3 = (a[11] + a[3]) + (a[15] + a[7])
    return (t0 + t2) + (t1 + t3)


@njit(cache=True, nogil=True)
def dot_f32(x, y, acc):  # type: ignore[no-untyped-def]
    """ggml_vec_dot_f32 of two float32 vectors (module docstring); acc: a (4, 16) scratch."""
    n = x.shape[0]
    np_ = n - n % 64
    if np_ > 0:
        acc[:, :] = 0.0
        for i in range(0, np_, 64):
            for j in range(4):
                for lane in range(16):
                    acc[j, lane] = fmaf(x[i + 16 * j + lane], y[i + 16 * j + lane], acc[j, lane])
        for lane in range(16):
            acc[0, lane] = acc[0, lane] + acc[2, lane]
            acc[1, lane] = acc[1, lane] + acc[3, lane]
            acc[0, lane] = acc[0, lane] + acc[1, lane]
        s = _reduce16(acc[0])
    else:
        s = f32(0.0)
    for i in range(np_, n):
        s = s + x[i] * y[i]
    return s


@njit(cache=True, nogil=True)
def soft_max_sum(s, m):  # type: ignore[no-untyped-def]
    """ggml_vec_soft_max_f32 (AVX-512): s[i] = exp(s[i] - m), returning the float64 sum: whole
    groups of 16 through ggml_v_expf, each group reduced in float; the rest through the C
    library's expf (numba's float32 math.exp), one by one."""
    n = s.shape[0]
    g = n - n % 16
    total = 0.0
    for c in range(0, g, 16):
        for lane in range(16):
            s[c + lane] = expf_ggml(s[c + lane] - m)
        total += np.float64(_reduce16(s[c:c + 16]))
    for i in range(g, n):
        s[i] = math.exp(s[i] - m)
        total += np.float64(s[i])
    return total



@njit(cache=True, nogil=True)
def _dot_range(x, y, a, b, acc):  # type: ignore[no-untyped-def]
    """ggml_vec_dot_f32 of x, y (length n) where only [a, b) of y is non-zero (module docstring)."""
    n = x.shape[0]
    np_ = n - n % 64
    s = f32(0.0)
    if np_ > 0:
        acc[:, :] = 0.0
        for i in range(a, min(b, np_)):
            r = i % 64
            acc[r // 16, r % 16] = fmaf(x[i], y[i], acc[r // 16, r % 16])
        for lane in range(16):
            acc[0, lane] = acc[0, lane] + acc[2, lane]
            acc[1, lane] = acc[1, lane] + acc[3, lane]
            acc[0, lane] = acc[0, lane] + acc[1, lane]
        s = _reduce16(acc[0])
    for i in range(max(a, np_), b):
        s = s + x[i] * y[i]
    return s


@njit(cache=True, nogil=True, parallel=True)
def _attend(q, k, vt, scale, starts, ends, out):  # type: ignore[no-untyped-def]
    """q, k (H, T, D); vt (H, D, T); starts, ends (T,): each query's keys; out (H, T, D)."""
    n_head, t, d = q.shape
    tiny = t % 16 == 0
    for w in prange(n_head * t):
        h = w // t
        i = w % t
        a, b = starts[i], ends[i]
        acc = np.empty((4, 16), dtype=np.float32)
        lanes = np.empty(16, dtype=np.float32)
        row = np.full(t, LOWEST, dtype=np.float32)
        m = f32(-np.inf)
        for j in range(a, b):
            s = dot_f32(k[h, j], q[h, i], acc) * scale
            row[j] = s
            if s > m:
                m = s
        total = soft_max_sum(row, m)
        inv = f32(1.0 / total)
        for j in range(t):
            row[j] = row[j] * inv
        for c in range(d):
            if tiny:
                lanes[:] = 0.0
                for j in range(a, b):
                    lanes[j % 16] = fmaf(vt[h, c, j], row[j], lanes[j % 16])
                out[h, i, c] = _reduce16(lanes)
            else:
                out[h, i, c] = _dot_range(vt[h, c], row, a, b, acc)


def window_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, n_head: int,
                     spans: tuple[tuple[int, int], ...], scale: float | None = None) -> np.ndarray:
    """Multi-head attention of q, k, v (T, H * D) float32, each row attending to the keys of its
    span (the spans cover the rows; one span of all: full attention) -> (T, H * D); scores
    times `scale` (None: 1 / sqrt(D))."""
    t, width = q.shape
    d = width // n_head
    starts = np.empty(t, dtype=np.int64)
    ends = np.empty(t, dtype=np.int64)
    for a, b in spans:
        starts[a:b], ends[a:b] = a, b
    qh = np.ascontiguousarray(q.reshape(t, n_head, d).transpose(1, 0, 2), dtype=np.float32)  # (H, T, D)
    kh = np.ascontiguousarray(k.reshape(t, n_head, d).transpose(1, 0, 2), dtype=np.float32)
    vt = np.ascontiguousarray(v.reshape(t, n_head, d).transpose(1, 2, 0), dtype=np.float32)  # (H, D, T)
    out = np.empty((n_head, t, d), dtype=np.float32)
    _attend(qh, kh, vt, f32(1.0) / f32(math.sqrt(d)) if scale is None else f32(scale), starts, ends, out)
    return np.ascontiguousarray(out.transpose(1, 0, 2).reshape(t, width))
