"""Mamba-2's two recurrent operations, as ggml-cpu computes them (ops.cpp
`ggml_compute_forward_ssm_conv_f32`, `ggml_compute_forward_ssm_scan_f32`), over a unified
batch: the tokens of several sequences in one call, each token reading and writing the state
of its own sequence. Tokens of one sequence must come in position order (they may interleave
with other sequences' tokens). Channels (conv) and heads (scan) are independent, so the loop
over tokens runs inside each channel's or head's loop, split across the kernels' threads.

Shapes (C = conv channels = d_inner + 2 n_group d_state, W = d_conv, S = sequences of the cache):
    conv_state (S, C, W - 1)         the last W - 1 inputs of each channel (ggml {W-1, C})
    ssm_state  (S, H, P, N)          H heads of P = d_inner / H rows of N = d_state (ggml
                                     {N, P, H})
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from llamacli.core.model.kernels.qmm.threads import split_rows


@njit(cache=True, nogil=True)
def _conv_rows(x, seq, w, state, out, c0, c1):  # type: ignore[no-untyped-def]
    # x (T, C), seq (T,), w (C, W), state (S, C, W-1), out (T, C); channels [c0, c1)
    T = x.shape[0]
    W = w.shape[1]
    for c in range(c0, c1):
        for t in range(T):
            s = seq[t]
            acc = np.float32(0.0)  # ggml sums the window in float32, oldest input first
            for i in range(W - 1):
                acc += state[s, c, i] * w[c, i]
            acc += x[t, c] * w[c, W - 1]
            out[t, c] = acc
            for i in range(W - 2):  # the window slides by one input
                state[s, c, i] = state[s, c, i + 1]
            if W > 1:
                state[s, c, W - 2] = x[t, c]


def ssm_conv(x: np.ndarray, seq: np.ndarray, w: np.ndarray, state: np.ndarray) -> np.ndarray:
    """The causal depthwise convolution: out[t, c] = sum_i window_t[c, i] * w[c, i], where
    window_t is the sequence's last W - 1 inputs then x[t]; `state` (S, C, W - 1) advances in
    place. x (T, C) float32, seq (T,) the token's sequence; returns (T, C)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty_like(x)
    seq = np.ascontiguousarray(seq, dtype=np.int64)
    C = x.shape[1]
    split_rows(lambda a, b: _conv_rows(x, seq, w, state, out, a, b), C, x.shape[0] * w.shape[1])
    return out


@njit(cache=True, nogil=True)
def _scan_heads(x, dt, A, B, C, seq, state, y, h0, h1):  # type: ignore[no-untyped-def]
    # x (T, H, P), dt (T, H), A (H,), B/C (T, G, N), state (S, H, P, N), y (T, H, P); heads [h0, h1)
    T, H, P = x.shape
    N = B.shape[2]
    per_group = H // B.shape[1]
    for h in range(h0, h1):
        g = h // per_group  # repeat_interleave of the groups over the heads
        for t in range(T):
            s = seq[t]
            d = dt[t, h]
            # ggml_compute_softplus_f32: log(1 + exp(d)) in float32, d itself above 20
            dsp = d if d > np.float32(20.0) else np.float32(math.log(np.float32(1.0) + np.float32(math.exp(d))))
            dA = np.float32(math.exp(dsp * A[h]))
            for p in range(P):
                x_dt = x[t, h, p] * dsp
                acc = np.float32(0.0)
                for n in range(N):
                    v = state[s, h, p, n] * dA + B[t, g, n] * x_dt  # state = prev * dA + dB * x
                    acc += v * C[t, g, n]  # y = state . C
                    state[s, h, p, n] = v
                y[t, h, p] = acc


def ssm_scan(x: np.ndarray, dt: np.ndarray, A: np.ndarray, B: np.ndarray, C: np.ndarray,
             seq: np.ndarray, state: np.ndarray) -> np.ndarray:
    """Mamba-2's selective scan (a scalar decay per head): for each token, per head h,
    dt' = softplus(dt), state = state * exp(dt' A[h]) + dt' x B^T, y = state . C; `state`
    (S, H, P, N) advances in place. x (T, H, P), dt (T, H) (bias already added), A (H,),
    B and C (T, G, N) with H a multiple of G; returns y (T, H, P)."""
    f32 = np.float32
    x = np.ascontiguousarray(x, dtype=f32)
    dt = np.ascontiguousarray(dt, dtype=f32)
    B = np.ascontiguousarray(B, dtype=f32)
    C = np.ascontiguousarray(C, dtype=f32)
    A = np.ascontiguousarray(A, dtype=f32).reshape(-1)
    seq = np.ascontiguousarray(seq, dtype=np.int64)
    y = np.empty_like(x)
    H = x.shape[1]
    split_rows(lambda a, b: _scan_heads(x, dt, A, B, C, seq, state, y, a, b), H, x.shape[0] * x.shape[2] * B.shape[2])
    return y
