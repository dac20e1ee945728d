"""A generic pre-norm transformer block (LayerNorm, full self-attention, LayerNorm, MLP), as
mtmd's `clip_graph::build_vit` builds one for Whisper-style encoders: no mask, no rope, biases
where the file has them. Matmuls go through the ggml numerics (core/model/precision.py): the
activation rounded or quantized to each weight's dot type, as ggml-cpu does; the LayerNorm and
the attention (attention.py) follow ggml-cpu's order of float operations."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from llamacli.core.model.kernels.ops import softmax
from llamacli.core.model.precision import Precision
from llamacli.core.model.weights.tensors import Linear
from llamacli.core.multimodal.audio.attention import self_attention


@dataclass
class Norm:
    """LayerNorm weight and bias (n,)."""

    w: np.ndarray
    b: np.ndarray | None


@dataclass
class BlockWeights:
    ln1: Norm
    q: Linear
    k: Linear
    v: Linear
    o: Linear
    ln2: Norm
    up: Linear
    down: Linear


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


def block_forward(x: np.ndarray, w: BlockWeights, n_head: int, eps: float, p: Precision) -> np.ndarray:
    """One pre-norm block over x (T, n_embd): x + attn(ln1(x)), then + mlp(ln2(.)) with GELU (erf)."""
    h = layer_norm(x, w.ln1, eps)
    q, k, v = p.linear(h, w.q), p.linear(h, w.k), p.linear(h, w.v)
    scale = float(np.float32(1.0) / np.float32(math.sqrt(q.shape[1] // n_head)))  # 1.0f / sqrtf(d_head)
    attend = self_attention if p.quantized_weights else blas_attention  # ggml's bits, or plain f32
    x = x + p.linear(attend(q, k, v, n_head, scale), w.o)
    h = layer_norm(x, w.ln2, eps)
    return x + p.linear(gelu_erf(p.linear(h, w.up)), w.down)
