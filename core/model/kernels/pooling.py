"""Pooling of per-token hidden states into one vector per sequence (for embeddings)."""

from __future__ import annotations

import numpy as np

POOLING_TYPES = ("mean", "last", "cls", "none", "rank")


def pool(hidden: np.ndarray, seq_ids: np.ndarray, kind: str) -> np.ndarray:
    """hidden (T, n_embd) of the batch's tokens in order; seq_ids (T,).

    Returns (n_seq, n_embd), one row per distinct sequence id in ascending order:
    mean of its tokens, its last token, or its first (cls) token. "none" returns hidden as is;
    "rank" gives the first token too (the model's classification head then reads it).
    """
    if kind == "none":
        return hidden
    if kind not in POOLING_TYPES:
        raise ValueError(f"unknown pooling {kind!r} (choose from {', '.join(POOLING_TYPES)})")
    seqs, inverse = np.unique(seq_ids, return_inverse=True)
    if kind == "mean":
        sums = np.zeros((seqs.shape[0], hidden.shape[1]), dtype=np.float64)
        np.add.at(sums, inverse, hidden)
        counts = np.bincount(inverse, minlength=seqs.shape[0])[:, None]
        return (sums / counts).astype(np.float32)
    if kind in ("cls", "rank"):
        _, first = np.unique(inverse, return_index=True)
        return hidden[first]
    _, last_rev = np.unique(inverse[::-1], return_index=True)
    return hidden[hidden.shape[0] - 1 - last_rev]


def normalize(v: np.ndarray, norm: int = 2) -> np.ndarray:
    """llama.cpp's embd_normalize: 2 = Euclidean (default), 1 = taxicab, 0 = max-abs
    scaled to int16 range, -1 = none, >2 = p-norm."""
    if norm < 0:
        return v
    if norm == 0:
        m = np.abs(v).max(axis=-1, keepdims=True) / 32760.0
    elif norm == 1:
        m = np.abs(v).sum(axis=-1, keepdims=True)
    else:
        m = (np.abs(v.astype(np.float64)) ** norm).sum(axis=-1, keepdims=True) ** (1.0 / norm)
    m = np.where(m > 0, m, 1.0)
    return (v / m).astype(np.float32)
