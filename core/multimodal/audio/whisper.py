"""The Whisper-style audio encoder as mtmd's `clip_graph_whisper_enc` builds it
(tools/mtmd/models/whisper-enc.cpp), for one 30 s log-mel window.

    mel (n_mel, 3000)
    -> conv1d k3 s1 p1 + bias, GELU(erf)      (n_embd, 3000)
    -> conv1d k3 s2 p1 + bias, GELU(erf)      (n_embd, 1500), then transposed to (1500, n_embd)
    -> + position embeddings[:1500]
    -> n_layer pre-LN blocks (core/multimodal/block.py, numerics in audio/block.py)
    -> qwen2a: average pooling by 2 over time  (750, n_embd)
    -> post LayerNorm
    -> projector (qwen2a: one linear + bias)   (750, n_out)

ggml's conv1d is im2col then a matmul; with an F16 kernel im2col writes F16 (ggml_conv_1d passes
the kernel's type to ggml_im2col), so the input is rounded to f16, as before any F16 matmul.
"""

from __future__ import annotations

import numpy as np

from llamacli.core.model.precision import GGMLPrecision, Precision
from llamacli.core.multimodal.audio.block import audio_block, gelu_erf, layer_norm
from llamacli.core.multimodal.audio.projector import AudioProjector, Conv1d


def conv1d(x: np.ndarray, c: Conv1d, stride: int, p: Precision) -> np.ndarray:
    """ggml_conv_1d_ph (padding k // 2) of x (IC, L) -> (OL, OC), plus the bias: im2col, then
    the matmul on the kernel's own type (an F16 kernel: im2col writes F16, i.e. x rounded to
    f16, and the dots are ggml's F16 dots)."""
    k = c.kernel
    ic = x.shape[0]
    pad = k // 2
    xp = np.zeros((ic, x.shape[1] + 2 * pad), dtype=np.float32)
    xp[:, pad:pad + x.shape[1]] = x
    ol = (x.shape[1] + 2 * pad - k) // stride + 1
    # im2col (OL, IC * K): column ic * K + kk holds xp[ic, t * stride + kk]
    cols = np.stack([xp[:, kk:kk + stride * (ol - 1) + 1:stride] for kk in range(k)], axis=-1)  # (IC, OL, K)
    return p.linear(np.ascontiguousarray(cols.transpose(1, 0, 2).reshape(ol, ic * k)), c.w)


def avg_pool2(x: np.ndarray) -> np.ndarray:
    """ggml_pool_1d AVG, kernel 2, stride 2, over time: (T, C) -> (T // 2, C)."""
    t = x.shape[0] // 2
    return ((x[0:2 * t:2] + x[1:2 * t:2]) / np.float32(2.0)).astype(np.float32)


def encode_window(proj: AudioProjector, mel: np.ndarray, p: Precision | None = None) -> np.ndarray:
    """One log-mel window (n_mel, n_frames) -> embeddings (n_tokens, n_out) float32."""
    hp = proj.hp
    p = p or (GGMLPrecision() if proj.quantized else Precision())
    if mel.shape[0] != hp.n_mel:
        raise ValueError(f"mel has {mel.shape[0]} bins, the projector wants {hp.n_mel}")
    h = gelu_erf(conv1d(mel, proj.conv1, 1, p))  # (3000, n_embd)
    h = gelu_erf(conv1d(np.ascontiguousarray(h.T), proj.conv2, 2, p))  # (1500, n_embd)
    if h.shape[0] > hp.n_pos:
        raise ValueError(f"{h.shape[0]} positions, the projector has {hp.n_pos}")
    h = h + proj.pos[: h.shape[0]]
    for bw in proj.blocks:
        h = audio_block(h, bw, hp.n_head, hp.eps, p)
    h = avg_pool2(h)  # qwen2a
    if proj.post_ln is not None:
        h = layer_norm(h, proj.post_ln, hp.eps)
    return p.linear(h, proj.fc)
