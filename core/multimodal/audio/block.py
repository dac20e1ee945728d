"""The Whisper-style encoder's numerics for the shared pre-norm block (core/multimodal/block.py):
matmuls go through the ggml numerics (core/model/precision.py), the activation rounded or
quantized to each weight's dot type as ggml-cpu does; the LayerNorm, the attention (attention.py)
and GELU (erf) follow ggml-cpu's order of float operations."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from llamacli.core.model.kernels.ops import softmax
from llamacli.core.model.precision import Precision
from llamacli.core.multimodal.audio.attention import self_attention
from llamacli.core.multimodal.block import BlockOps, BlockWeights, Norm, block_forward


@njit(cache=True, nogil=True)
def _gelu_erf(x, out):  # type: ignore[no-untyped-def]
    inv_sqrt2 = np.float32(0.70710678118654752440)
    for i in range(x.size):
        v = x.flat[i]
        e = np.float32(math.erf(np.float64(v * inv_sqrt2)))  # erff: the correctly rounded erf
        out.flat[i] = np.float32(0.5) * v * (np.float32(1.0) + e)


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """ggml_gelu_erf on float32: 0.5 x (1 + erf(x / sqrt 2)), exact (no lookup table)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty_like(x)
    _gelu_erf(x, out)
    return out


@njit(cache=True, nogil=True)
def _norm_rows(x, eps, y):  # type: ignore[no-untyped-def]
    """ggml_norm as ggml-cpu computes it on AVX-512 (the oracle's build): the mean from a double
    sum, divided in float; the centred squares reduced in float 16 at a time in
    _mm512_reduce_add_ps's order (halves, quarters, pairs) and those partial sums added in
    double; the rest one by one; 1 / sqrtf(variance + eps) in float."""
    n = x.shape[1]
    nf = np.float32(n)
    sq = np.empty(16, dtype=np.float32)
    for t in range(x.shape[0]):
        s = 0.0
        for i in range(n):
            s += np.float64(x[t, i])
        mean = np.float32(s) / nf
        acc = 0.0
        i = 0
        while i + 15 < n:
            for lane in range(16):
                v = x[t, i + lane] - mean
                y[t, i + lane] = v
                sq[lane] = v * v
            for lane in range(8):
                sq[lane] = sq[lane + 8] + sq[lane]
            for lane in range(4):
                sq[lane] = sq[lane + 4] + sq[lane]
            acc += np.float64((sq[0] + sq[2]) + (sq[1] + sq[3]))
            i += 16
        while i < n:
            v = x[t, i] - mean
            y[t, i] = v
            acc += np.float64(v * v)
            i += 1
        var = np.float32(acc / n)
        scale = np.float32(1.0) / np.float32(math.sqrt(var + eps))
        for i in range(n):
            y[t, i] = y[t, i] * scale


def layer_norm(x: np.ndarray, n: Norm, eps: float) -> np.ndarray:
    """ggml_norm (see _norm_rows), times the weight, plus the bias; x (T, n) float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.empty_like(x)
    _norm_rows(x, np.float32(eps), y)
    y *= n.w
    if n.b is not None:
        y += n.b
    return y


def blas_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, n_head: int, scale: float) -> np.ndarray:
    """The same attention in plain float32 with BLAS (the `f32` numerics mode): fast, not ggml's bits."""
    t, width = q.shape
    d = width // n_head
    qh, kh, vh = (a.reshape(t, n_head, d).transpose(1, 0, 2) for a in (q, k, v))  # (H, T, D)
    probs = softmax(np.matmul(qh, kh.transpose(0, 2, 1)) * np.float32(scale), axis=-1)  # (H, Tq, Tk)
    return np.ascontiguousarray(np.matmul(probs, vh).transpose(1, 0, 2).reshape(t, width), dtype=np.float32)


def audio_block(x: np.ndarray, w: BlockWeights, n_head: int, eps: float, p: Precision) -> np.ndarray:
    """One block over x (T, n_embd) with the encoder's numerics: ggml_norm, attention at scale
    1 / sqrtf(d_head) (ggml's bits, or BLAS in the f32 mode), GELU (erf)."""
    scale = float(np.float32(1.0) / np.float32(math.sqrt(w.q.n_out // n_head)))  # 1.0f / sqrtf(d_head)
    attention = self_attention if p.quantized_weights else blas_attention  # ggml's bits, or plain f32
    ops = BlockOps(layer_norm, lambda q, k, v: attention(q, k, v, n_head, scale), gelu_erf)
    return block_forward(x, w, eps, ops, p)
