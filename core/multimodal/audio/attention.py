"""The audio encoder's self-attention: full (no mask), in ggml-cpu's order of float
operations for mtmd's non-flash path (core/multimodal/window_attention.py, one span of every
key)."""

from __future__ import annotations

import numpy as np

from llamacli.core.multimodal.window_attention import window_attention


def self_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, n_head: int, scale: float) -> np.ndarray:
    """Unmasked multi-head attention of q, k, v (T, H * D) float32 -> (T, H * D)."""
    return window_attention(q, k, v, n_head, ((0, q.shape[0]),), scale)
