"""A generic pre-norm transformer block (LayerNorm, full self-attention, LayerNorm, MLP), as
mtmd's `clip_graph::build_vit` builds one for Whisper-style encoders: no mask, no rope, biases
where the file has them. Matmuls go through the ggml numerics (core/model/precision.py): the
activation rounded or quantized to each weight's dot type, as ggml-cpu does."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from llamacli.core.model.kernels import ops as K
from llamacli.core.model.precision import Precision
from llamacli.core.model.weights.tensors import Linear


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


def layer_norm(x: np.ndarray, n: Norm, eps: float) -> np.ndarray:
    return K.layer_norm(x, n.w, n.b, eps)


def self_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, n_head: int) -> np.ndarray:
    """Full (unmasked) multi-head attention, ggml's non-flash path in float32: K Q^T, softmax of
    the scaled scores, then V times the probabilities. q, k, v (T, H * D) -> (T, H * D)."""
    t, width = q.shape
    d = width // n_head
    qh = q.reshape(t, n_head, d).transpose(1, 0, 2)  # (H, T, D)
    kh = k.reshape(t, n_head, d).transpose(1, 0, 2)
    vh = v.reshape(t, n_head, d).transpose(1, 0, 2)
    scores = np.matmul(qh, kh.transpose(0, 2, 1)) * np.float32(1.0 / math.sqrt(d))  # (H, Tq, Tk)
    probs = K.softmax(scores.astype(np.float32), axis=-1)
    out = np.matmul(probs, vh)  # (H, T, D)
    return np.ascontiguousarray(out.transpose(1, 0, 2).reshape(t, width), dtype=np.float32)


def block_forward(x: np.ndarray, w: BlockWeights, n_head: int, eps: float, p: Precision) -> np.ndarray:
    """One pre-norm block over x (T, n_embd): x + attn(ln1(x)), then + mlp(ln2(.)) with GELU (erf)."""
    h = layer_norm(x, w.ln1, eps)
    q, k, v = p.linear(h, w.q), p.linear(h, w.k), p.linear(h, w.v)
    x = x + p.linear(self_attention(q, k, v, n_head), w.o)
    h = layer_norm(x, w.ln2, eps)
    return x + p.linear(gelu_erf(p.linear(h, w.up)), w.down)
