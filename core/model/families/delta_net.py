"""The gated delta-net mixer (linear attention with a recurrent state: llama.cpp's
`build_layer_attn_linear` of src/models/qwen35.cpp, with src/models/delta-net-base.cpp), the
block the Qwen3.5 / Qwen3-Next families run in place of attention on their recurrent layers.

    qkv   = h @ W_qkv.T                                   (T, C), C = 2 H_k S + H_v S
    z     = h @ W_gate.T                                  (T, H_v S)
    beta  = sigmoid(h @ W_beta.T)                         (T, H_v)
    g     = softplus(h @ W_alpha.T + dt_b) * A            (T, H_v), A = -exp(A_log) (ssm_a)
    qkv   = silu(conv1d(qkv))                             causal, kernel W, no bias (kernels/ssm.ssm_conv)
    q, k, v = qkv's parts                                 (T, H_k, S), (T, H_k, S), (T, H_v, S)
    q, k  = each head / sqrt(sum(x^2) + eps)              build_gdn_l2_norm: rms_norm(x, eps / S) / sqrt(S)
    o     = gated_delta_net(q, k, v, g, beta)             kernels/delta_net.py, (T, H_v, S)
    o     = rms_norm(o, per head) * norm_w * silu(z)      build_norm_gated
    out   = o @ W_out.T                                   (T, n_embd)

S = `ssm.state_size` (the head size of keys and values), H_k = `ssm.group_count`, H_v =
`ssm.time_step_rank`, `ssm.inner_size` = H_v S, W = `ssm.conv_kernel`.

Qwen3-Next (src/models/qwen3next.cpp) differs in its layout only: its value heads are grouped
by key head (value head h reads key head h // (H_v / H_k), a repeat-interleave, where Qwen3.5
reads h % H_k); beta and alpha come from one matrix `ssm_ba` holding per key head its H_v / H_k
beta rows then as many alpha rows; and files from its first converter hold q, k, v and z in one
matrix `ssm_in`, per key head its q (S), k (S), v (S H_v / H_k) and z (as many) rows. The states (conv: the
last W - 1 inputs of C channels, delta rule: (H_v, S, S)) live in the cache
(state/recurrent.HybridCache), one per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.kernels.delta_net import gated_delta_net
from llamacli.core.model.kernels.qmm.router import sigmoid_rows
from llamacli.core.model.kernels.ssm import ssm_conv
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.recurrent import HybridCache
from llamacli.core.model.weights.tensors import Linear, WeightLoader

if TYPE_CHECKING:
    from llamacli.core.model.precision import Precision


@dataclass(frozen=True)
class DeltaNetArgs:
    """The `{arch}.ssm.*` keys as the delta-net families use them."""

    d_conv: int  # W
    d_inner: int  # H_v S
    d_state: int  # S
    n_v_head: int  # H_v (ssm.time_step_rank)
    n_k_head: int  # H_k (ssm.group_count)
    grouped: bool = False  # Qwen3-Next's layout (module docstring)

    @property
    def conv_dim(self) -> int:  # C
        return 2 * self.n_k_head * self.d_state + self.d_inner

    def check(self, path: str, arch: str) -> None:
        for key, v in (("conv_kernel", self.d_conv), ("inner_size", self.d_inner), ("state_size", self.d_state),
                       ("time_step_rank", self.n_v_head), ("group_count", self.n_k_head)):
            if v < 1:
                raise ModelLoadError(path, f"{arch}.ssm.{key} is {v}: it must be at least 1")
        if self.d_inner != self.n_v_head * self.d_state or self.n_v_head % self.n_k_head:
            raise ModelLoadError(path, f"{arch}.ssm.inner_size ({self.d_inner}) must be time_step_rank "
                                       f"({self.n_v_head}) times state_size ({self.d_state}), and time_step_rank a "
                                       f"multiple of group_count ({self.n_k_head}), as llama.cpp asserts")


@dataclass
class DeltaNetWeights:
    qkv: Linear | None  # (C, n_embd); None where `qkvz` holds it
    gate: Linear | None  # z: (H_v S, n_embd); None where `qkvz` holds it
    qkvz: Linear | None  # Qwen3-Next's ssm_in: per key head q, k, v, z rows
    beta: Linear | None  # (H_v, n_embd); None where `ba` holds it
    alpha: Linear | None
    ba: Linear | None  # Qwen3-Next's ssm_ba: per key head beta rows, then alpha rows
    conv_w: np.ndarray  # (C, W) float32
    dt_b: np.ndarray  # (H_v,)
    A: np.ndarray  # (H_v,): -exp(A_log), as the converter stores it
    norm: np.ndarray  # (S,)
    out: Linear  # (n_embd, H_v S)


def load_delta_net(ld: WeightLoader, prefix: str, n_embd: int, m: DeltaNetArgs) -> DeltaNetWeights:
    """A recurrent layer's tensors (names as llama.cpp's LLM_TENSOR_ATTN_QKV, ATTN_GATE, SSM_IN,
    SSM_BETA, SSM_ALPHA, SSM_BETA_ALPHA and SSM_*)."""
    conv = ld.vector(prefix + "ssm_conv1d.weight")
    if conv.size != m.conv_dim * m.d_conv:
        raise ModelLoadError(ld.gguf.path, f"tensor {prefix}ssm_conv1d.weight has {conv.size} values, expected "
                                           f"{m.conv_dim * m.d_conv} from the hyperparameters")
    fused_in = m.grouped and ld.has(prefix + "ssm_in.weight")
    fused_ba = m.grouped
    return DeltaNetWeights(
        qkv=None if fused_in else ld.linear(prefix + "attn_qkv", n_embd, m.conv_dim),
        gate=None if fused_in else ld.linear(prefix + "attn_gate", n_embd, m.d_inner),
        qkvz=ld.linear(prefix + "ssm_in", n_embd, m.conv_dim + m.d_inner) if fused_in else None,
        beta=None if fused_ba else ld.linear(prefix + "ssm_beta", n_embd, m.n_v_head),
        alpha=None if fused_ba else ld.linear(prefix + "ssm_alpha", n_embd, m.n_v_head),
        ba=ld.linear(prefix + "ssm_ba", n_embd, 2 * m.n_v_head) if fused_ba else None,
        conv_w=np.ascontiguousarray(conv, dtype=np.float32).reshape(m.conv_dim, m.d_conv),
        dt_b=ld.vector(prefix + "ssm_dt.bias", m.n_v_head),
        A=np.ascontiguousarray(ld.vector(prefix + "ssm_a", m.n_v_head), dtype=np.float32).reshape(-1),
        norm=ld.vector(prefix + "ssm_norm.weight", m.d_state),
        out=ld.linear(prefix + "ssm_out", m.d_inner, n_embd),
    )


def _projections(pr: Precision, mw: DeltaNetWeights, m: DeltaNetArgs,
                 h: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(qkv (T, C), z (T, H_v S), beta logits (T, H_v), alpha (T, H_v)) from h (T, n_embd), in
    either layout (module docstring)."""
    T, S, Hk = h.shape[0], m.d_state, m.n_k_head
    r = m.n_v_head // Hk  # value heads per key head
    if mw.qkvz is not None:
        x = pr.linear(h, mw.qkvz).reshape(T, Hk, 2 * S + 2 * S * r)
        parts = (x[:, :, :S], x[:, :, S:2 * S], x[:, :, 2 * S:(2 + r) * S])
        qkv = np.concatenate([p.reshape(T, -1) for p in parts], axis=1)
        z = x[:, :, (2 + r) * S:].reshape(T, -1)
    else:
        assert mw.qkv is not None and mw.gate is not None
        qkv, z = pr.linear(h, mw.qkv), pr.linear(h, mw.gate)
    if mw.ba is not None:
        ba = pr.linear(h, mw.ba).reshape(T, Hk, 2 * r)
        return qkv, z, ba[:, :, :r].reshape(T, -1), ba[:, :, r:].reshape(T, -1)
    assert mw.beta is not None and mw.alpha is not None
    return qkv, z, pr.linear(h, mw.beta), pr.linear(h, mw.alpha)


def _softplus(x: np.ndarray) -> np.ndarray:
    """ggml's op_softplus: x above 20, else log(1 + exp(x)), in float32."""
    with np.errstate(over="ignore"):
        return np.where(x > 20, x, np.log(np.float32(1.0) + np.exp(x))).astype(np.float32)


def _l2_norm(x: np.ndarray, eps: float) -> np.ndarray:
    """build_gdn_l2_norm over the last axis: rms_norm(x, eps / n) / sqrt(n)."""
    n = x.shape[-1]
    return K.rms_norm(x, None, eps / n) * np.float32(1.0 / np.sqrt(np.float32(n)))


def delta_net_mixer(pr: Precision, mw: DeltaNetWeights, m: DeltaNetArgs, h: np.ndarray, batch: Batch,
                    cache: HybridCache, il: int, eps: float) -> np.ndarray:
    """The mixer over the batch's rows h (T, n_embd), advancing each sequence's states of layer
    il (and copying them into the checkpoints the cache plans within this batch); returns
    (T, n_embd)."""
    T = h.shape[0]
    S, Hk, Hv, C = m.d_state, m.n_k_head, m.n_v_head, m.conv_dim
    qkv, z, b, alpha = _projections(pr, mw, m, h)
    beta = sigmoid_rows(np.ascontiguousarray(b, dtype=np.float32))  # (T, H_v)
    g = _softplus(alpha + mw.dt_b) * mw.A  # (T, H_v)
    o = np.empty((T, Hv, S), dtype=np.float32)

    def step(rows: np.ndarray | slice) -> None:
        seq = batch.seq_ids[rows]
        x = K.silu(ssm_conv(qkv[rows], seq, mw.conv_w, cache.conv[il]))  # (t, C)
        t = x.shape[0]
        q = _l2_norm(x[:, :Hk * S].reshape(t, Hk, S), eps)
        k = _l2_norm(x[:, Hk * S:2 * Hk * S].reshape(t, Hk, S), eps)
        v = x[:, 2 * Hk * S:C].reshape(t, Hv, S)
        o[rows] = gated_delta_net(q, k, v, g[rows], beta[rows], seq, cache.ssm[il], m.grouped)

    cache.advance(il, batch.seq_ids, batch.positions, step)
    y = K.rms_norm(o, mw.norm, eps) * K.silu(z).reshape(T, Hv, S)
    return pr.linear(np.ascontiguousarray(y.reshape(T, Hv * S)), mw.out)
