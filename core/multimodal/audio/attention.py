"""Full self-attention as ggml-cpu computes mtmd's non-flash path (clip_graph::build_attn) on
float32 Q, K, V, in the oracle's order of operations (its AVX-512 build):

    kq   = mul_mat(K, Q)          every score a ggml_vec_dot_f32 over the head dim
    kq   = soft_max_ext(kq, scale) x * scale, max, then `soft_max_sum`, times float(1 / sum)
    kqv  = mul_mat(V^T, kq)       every output a ggml_vec_dot_f32 over the keys

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

from llamacli.core.model.kernels.qmm.expf import exp_groups
from llamacli.core.model.kernels.qmm.fsimd import dot64_f32

f32 = np.float32


@njit(cache=True, nogil=True)
def dot_f32(x, y):  # type: ignore[no-untyped-def]
    """ggml_vec_dot_f32 of two contiguous float32 vectors (module docstring): the whole groups
    of 64 in vector registers (fsimd.dot64_f32), the rest one by one."""
    n = x.shape[0]
    np_ = n - n % 64
    s = dot64_f32(x, y, np_ // 64)
    for i in range(np_, n):
        s = s + x[i] * y[i]
    return s


@njit(cache=True, nogil=True)
def soft_max_sum(s, m):  # type: ignore[no-untyped-def]
    """ggml_vec_soft_max_f32 (AVX-512): s[i] = exp(s[i] - m), returning the float64 sum: whole
    groups of 16 through ggml_v_expf, each group reduced in float (expf.exp_groups); the rest through the C
    library's expf (numba's float32 math.exp), one by one."""
    n = s.shape[0]
    g = n - n % 16
    total = exp_groups(s, 0, g // 16, m)
    for i in range(g, n):
        s[i] = math.exp(s[i] - m)
        total += np.float64(s[i])
    return total


@njit(cache=True, nogil=True, parallel=True)
def _attend(q, k, vt, scale, out):  # type: ignore[no-untyped-def]
    """q, k (H, T, D); vt (H, D, T); out (H, T, D)."""
    n_head, t, d = q.shape
    for w in prange(n_head * t):
        h = w // t
        i = w % t
        row = np.empty(t, dtype=np.float32)
        m = f32(-np.inf)
        for j in range(t):
            s = dot_f32(k[h, j], q[h, i]) * scale
            row[j] = s
            if s > m:
                m = s
        total = soft_max_sum(row, m)
        inv = f32(1.0 / total)
        for j in range(t):
            row[j] = row[j] * inv
        for c in range(d):
            out[h, i, c] = dot_f32(vt[h, c], row)


def self_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, n_head: int, scale: float) -> np.ndarray:
    """Unmasked multi-head attention of q, k, v (T, H * D) float32 -> (T, H * D)."""
    t, width = q.shape
    d = width // n_head
    qh = np.ascontiguousarray(q.reshape(t, n_head, d).transpose(1, 0, 2), dtype=np.float32)  # (H, T, D)
    kh = np.ascontiguousarray(k.reshape(t, n_head, d).transpose(1, 0, 2), dtype=np.float32)
    vt = np.ascontiguousarray(v.reshape(t, n_head, d).transpose(1, 2, 0), dtype=np.float32)  # (H, D, T)
    out = np.empty((n_head, t, d), dtype=np.float32)
    _attend(qh, kh, vt, f32(scale), out)
    return np.ascontiguousarray(out.transpose(1, 0, 2).reshape(t, width))
