"""The mixture-of-experts feed-forward block (llama.cpp's `build_moe_ffn`, llama-graph.cpp),
composed by the families that have one: a router picks k of n_expert gated FFNs per token and
the block returns their weighted sum.

    logits  = h @ W_gate_inp.T (+ b_gate_inp)                (T, n_expert)
    probs   = softmax(logits)                                 (ggml_soft_max; "softmax_weight"
                                                              gating (gpt-oss): the logits)
    sel     = the first k of argsort(probs, descending)       (T, k)  (ggml_argsort_top_k)
    w       = probs[sel]; softmax(w) for "softmax_weight"; w /= max(sum(w), 2^-14) if
              normalised; w *= scale if scale not in (0, 1)
    y[t, j] = down_e(act(gate_e(h_t), up_e(h_t))),  e = sel[t, j]   (ggml_mul_mat_id, then
              ggml_add_id of expert e's bias where the file has one)
    act     = silu(g) * u, gelu(g) * u, or ggml_swiglu_oai(g, u) (gpt-oss: clamped at 7)
    out     = y[:, 0] * w[:, 0] + y[:, 1] * w[:, 1] + ...     (added slot by slot, in float32)

The expert matmuls group the batch's rows by expert (Precision.expert_linears): one matmul per
active expert, reading only its weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from llamacli.core.model.kernels import ops as K
from llamacli.core.model.kernels.qmm.router import softmax_rows, top_k_rows
from llamacli.core.model.weights.tensors import ExpertLinear, Linear, WeightLoader

if TYPE_CHECKING:
    from llamacli.core.model.precision import Precision

# ggml_clamp of the weights' sum: the smallest normal float16, against a division by zero
_MIN_WEIGHT_SUM = np.float32(6.103515625e-5)


@dataclass
class MoEArgs:
    """The router's hyperparameters (`{arch}.expert_*` keys)."""

    n_expert: int
    n_expert_used: int
    n_ff_exp: int  # rows of each expert's gate/up matrices
    norm_weights: bool = True  # expert_weights_norm: the k weights divided by their sum
    weights_scale: float = 0.0  # expert_weights_scale: applied unless 0 or 1
    gating: str = "softmax"  # "softmax": top k of the soft max; "softmax_weight": top k of the
    #                          logits, soft max over those k (LLAMA_EXPERT_GATING_FUNC_TYPE_*)


@dataclass
class MoEWeights:
    gate_inp: Linear  # the router (n_expert, n_embd)
    gate: ExpertLinear
    up: ExpertLinear
    down: ExpertLinear


def load_moe(ld: WeightLoader, prefix: str, n_embd: int, m: MoEArgs) -> MoEWeights:
    """A layer's router and expert tensors: `{prefix}ffn_gate_inp`, `ffn_{gate,up,down}_exps`."""
    return MoEWeights(
        gate_inp=ld.linear(prefix + "ffn_gate_inp", n_embd, m.n_expert),
        gate=ld.experts(prefix + "ffn_gate_exps.weight", m.n_expert, n_embd, m.n_ff_exp),
        up=ld.experts(prefix + "ffn_up_exps.weight", m.n_expert, n_embd, m.n_ff_exp),
        down=ld.experts(prefix + "ffn_down_exps.weight", m.n_expert, m.n_ff_exp, n_embd),
    )


def route(probs: np.ndarray, m: MoEArgs,
          softmax: Callable[[np.ndarray], np.ndarray] = softmax_rows) -> tuple[np.ndarray, np.ndarray]:
    """(selected experts (T, k) int64, their weights (T, k) float32) from probs (T, n_expert)
    (the logits for "softmax_weight" gating, whose k weights go through `softmax`)."""
    sel = top_k_rows(np.ascontiguousarray(probs, dtype=np.float32), m.n_expert_used)
    w = np.take_along_axis(probs, sel, axis=1).astype(np.float32)
    if m.gating == "softmax_weight":
        w = softmax(w)
    if m.norm_weights:
        total = np.sum(w.astype(np.float64), axis=1).astype(np.float32)  # ggml_sum_rows: a float64 sum
        w = w / np.maximum(total, _MIN_WEIGHT_SUM)[:, None]
    if m.weights_scale not in (0.0, 1.0):
        w = w * np.float32(m.weights_scale)
    return sel, w


def moe_ffn(pr: "Precision", mw: MoEWeights, h: np.ndarray, m: MoEArgs, activation: str = "silu") -> np.ndarray:
    """The block's output (T, n_embd) for its input h (T, n_embd)."""
    if h.shape[0] == 0:
        return np.zeros_like(h)
    logits = pr.linear(h, mw.gate_inp)  # (T, n_expert)
    probs = logits if m.gating == "softmax_weight" else pr.router_probs(logits)
    sel, w = route(probs, m, pr.router_probs)
    g, u = pr.expert_linears(h, [mw.gate, mw.up], sel)  # (T, k, n_ff_exp) each
    if activation == "swiglu_oai":
        act = K.swiglu_oai(g, u)
    else:
        act = (pr.gelu(g) if activation == "gelu" else pr.silu(g)) * u
    (y,) = pr.expert_linears(act, [mw.down], sel)  # (T, k, n_embd)
    y = y * w[:, :, None]
    out = y[:, 0].copy()
    for j in range(1, m.n_expert_used):  # ggml_add over the slots' views, in slot order
        out += y[:, j]
    return out
