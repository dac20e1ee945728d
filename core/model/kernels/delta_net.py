"""The gated delta rule (ggml's GGML_OP_GATED_DELTA_NET, ops.cpp
`ggml_compute_forward_gated_delta_net_f32`) over a unified batch: the tokens of several
sequences in one call, each token reading and writing its own sequence's state. Tokens of one
sequence come in position order (they may interleave with other sequences'). Heads are
independent, so the loop over tokens runs inside each head's loop, split across threads.

Per token t and value head h (S = head size, the same for keys and values), with M the head's
state stored as ggml stores it, transposed: M[j, i] = S[i][j] (row j: value channel j):

    M      = M * exp(g[t, h])                          the head's decay (g <= 0)
    d[j]   = (v[t, h, j] - M[j] . k) * beta[t, h]      the delta rule's correction
    M[j]  += d[j] * k                                  S += k d^T
    o[j]   = (M[j] . q) / sqrt(S)

k and q of value head h are key head h % H_k (ggml's broadcast of H_k key heads over H_v value
heads, H_v a multiple of H_k: Qwen3.5), or, `grouped`, key head h // (H_v / H_k) (Qwen3-Next's
repeat-interleave: each key head's value heads side by side). Shapes: q, k (T, H_k, S), v (T, H_v, S), g and beta (T, H_v),
state (n_seq, H_v, S, S) float32.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from llamacli.core.model.kernels.qmm.threads import split_rows


@njit(cache=True, nogil=True)
def _gdn_heads(q, k, v, g, beta, seq, state, out, group, h0, h1):  # type: ignore[no-untyped-def]
    # q, k (T, Hk, S), v (T, Hv, S), g/beta (T, Hv), state (n_seq, Hv, S, S), out (T, Hv, S); heads [h0, h1);
    # group: value heads per key head when grouped, else 0
    T, _, S = v.shape
    Hk = q.shape[1]
    scale = np.float32(1.0) / np.float32(math.sqrt(np.float32(S)))
    for h in range(h0, h1):
        hk = h // group if group > 0 else h % Hk
        for t in range(T):
            M = state[seq[t], h]
            decay = np.float32(math.exp(g[t, h]))
            b = beta[t, h]
            for j in range(S):
                acc = np.float32(0.0)
                for i in range(S):
                    m = M[j, i] * decay
                    M[j, i] = m
                    acc += m * k[t, hk, i]
                d = (v[t, h, j] - acc) * b
                acc = np.float32(0.0)
                for i in range(S):
                    m = M[j, i] + d * k[t, hk, i]
                    M[j, i] = m
                    acc += m * q[t, hk, i]
                out[t, h, j] = acc * scale


def gated_delta_net(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray,
                    seq: np.ndarray, state: np.ndarray, grouped: bool = False) -> np.ndarray:
    """The attention output (T, H_v, S) of the gated delta rule (module docstring); `state`
    (n_seq, H_v, S, S) advances in place. seq (T,): each token's sequence; grouped: key heads
    repeat-interleaved over the value heads (module docstring)."""
    f32 = np.float32
    q, k, v = (np.ascontiguousarray(x, dtype=f32) for x in (q, k, v))
    g = np.ascontiguousarray(g, dtype=f32)
    beta = np.ascontiguousarray(beta, dtype=f32)
    seq = np.ascontiguousarray(seq, dtype=np.int64)
    out = np.empty_like(v)
    T, H, S = v.shape
    group = H // q.shape[1] if grouped else 0
    split_rows(lambda a, b: _gdn_heads(q, k, v, g, beta, seq, state, out, group, a, b), H, T * S * S)
    return out
