"""The mixture-of-experts feed-forward block (llama.cpp's `build_moe_ffn`, llama-graph.cpp),
composed by the families that have one: a router picks k of n_expert gated FFNs per token and
the block returns their weighted sum.

    logits  = h @ W_gate_inp.T (+ b_gate_inp)                (T, n_expert)
    probs   = softmax(logits)                                 (ggml_soft_max; "sigmoid" gating
                                                              (glm4moe): ggml_sigmoid;
                                                              "softmax_weight" (gpt-oss): the logits)
    choice  = probs (+ exp_probs_b); with expert groups (DeepSeek-V3), -inf outside the
              n_group_used groups of highest (first + second of argsort within the group)
    sel     = the first k of argsort(choice, descending)   (T, k)
                                                              (ggml_argsort_top_k; the selection
                                                              bias only picks, it never weights)
    w       = probs[sel]; softmax(w) for "softmax_weight"; w /= max(sum(w), 2^-14) if
              normalised; w *= scale if scale not in (0, 1)
    y[t, j] = down_e(act(gate_e(h_t), up_e(h_t))),  e = sel[t, j]   (ggml_mul_mat_id, then
              ggml_add_id of expert e's bias where the file has one)
    act     = silu(g) * u, gelu(g) * u, or ggml_swiglu_oai(g, u) (gpt-oss: clamped at 7);
              experts without a gate (Nemotron-H MoE): relu(u)^2
    out     = y[:, 0] * w[:, 0] + y[:, 1] * w[:, 1] + ...     (added slot by slot, in float32)
    out    += down_s(silu(gate_s(h)) * up_s(h))              (shared experts, where the family
                                                              has them: one dense gated FFN of
                                                              n_shared * n_ff_exp rows; Qwen3.5
                                                              MoE: times sigmoid(h . gate_inp_s),
                                                              qwen2moe: times silu(x) / x of it;
                                                              without gates: down_s(relu(up_s(h))^2))

The expert matmuls group the batch's rows by expert (Precision.expert_linears): one matmul per
active expert, reading only its weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from llamacli.core.model.kernels import ops as K
from llamacli.core.model.kernels.qmm.router import sigmoid_rows, softmax_rows, top_k_rows
from llamacli.core.errors import ModelLoadError
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import ExpertLinear, FusedLinear, Linear, WeightLoader

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
    #                          logits, soft max over those k; "sigmoid": top k of the sigmoids
    #                          (LLAMA_EXPERT_GATING_FUNC_TYPE_*)
    probs_bias: bool = False  # `exp_probs_b.bias` (n_expert,) added to the probs for the choice only
    n_shared: int = 0  # expert_shared_count: a dense FFN of n_shared * n_ff_exp rows beside the experts
    n_ff_shared: int = 0  # the shared FFN's rows where the family gives them (expert_shared_feed_forward_length)
    n_group: int = 0  # expert_group_count (DeepSeek-V3): > 1, experts chosen only from the best groups
    n_group_used: int = 0  # expert_group_used_count: how many groups
    shared_gate: bool = False  # the shared FFN's output times sigmoid(h . ffn_gate_inp_shexp) (Qwen3.5 MoE)
    gated: bool = True  # False: experts and shared experts of up and down only, squared ReLU (Nemotron-H MoE)
    shared_gate_silu: bool = False  # that sigmoid as silu(x) / x (qwen2moe's ggml_div(ggml_silu(x), x))


@dataclass
class MoEWeights:
    gate_inp: Linear  # the router (n_expert, n_embd)
    gate: ExpertLinear | None  # None: MoEArgs.gated false
    up: ExpertLinear
    down: ExpertLinear
    probs_bias: np.ndarray | None = None  # (n_expert,): MoEArgs.probs_bias
    shared: tuple[Linear | None, Linear, Linear] | None = None  # the shared experts' gate (None: ungated), up, down
    shared_gate: np.ndarray | None = None  # (n_embd,): MoEArgs.shared_gate


# LLAMA_EXPERT_GATING_FUNC_TYPE_* (`{arch}.expert_gating_func`): 1 soft max, 2 sigmoid, 3 soft max
# over the chosen k; 0 (none) is what each family makes of it (`gating_name`)
GATING_FUNCS = {1: "softmax", 2: "sigmoid", 3: "softmax_weight"}


def gating_name(g: GGUFFile, value: int, none: str | None = None) -> str:
    """MoEArgs.gating for an `expert_gating_func` value (0: `none`, where the family gives it
    one); one clear load error for a value we do not run."""
    if value == 0 and none is not None:
        return none
    if value not in GATING_FUNCS:
        raise ModelLoadError(g.path, f"{g.architecture}.expert_gating_func is {value}: not a gating function we run "
                                     "(1 softmax, 2 sigmoid, 3 softmax over the chosen experts)")
    return GATING_FUNCS[value]


def load_moe(ld: WeightLoader, prefix: str, n_embd: int, m: MoEArgs) -> MoEWeights:
    """A layer's router and expert tensors: `{prefix}ffn_gate_inp`, `ffn_{gate,up,down}_exps`,
    and where the family has them `exp_probs_b.bias`, `ffn_{gate,up,down}_shexp`."""
    mw = MoEWeights(
        gate_inp=ld.linear(prefix + "ffn_gate_inp", n_embd, m.n_expert),
        gate=ld.experts(prefix + "ffn_gate_exps.weight", m.n_expert, n_embd, m.n_ff_exp) if m.gated else None,
        up=ld.experts(prefix + "ffn_up_exps.weight", m.n_expert, n_embd, m.n_ff_exp),
        down=ld.experts(prefix + "ffn_down_exps.weight", m.n_expert, m.n_ff_exp, n_embd),
    )
    if m.probs_bias:
        mw.probs_bias = ld.vector(prefix + "exp_probs_b.bias", m.n_expert)
    if m.n_shared:
        n_ff = m.n_ff_shared or m.n_shared * m.n_ff_exp
        mw.shared = (ld.linear(prefix + "ffn_gate_shexp", n_embd, n_ff) if m.gated else None,
                     ld.linear(prefix + "ffn_up_shexp", n_embd, n_ff),
                     ld.linear(prefix + "ffn_down_shexp", n_ff, n_embd))
    if m.shared_gate:
        mw.shared_gate = ld.vector(prefix + "ffn_gate_inp_shexp.weight", n_embd)
    return mw


def gated_ffn(pr: "Precision", h: np.ndarray, gate: Linear, up: Linear, down: Linear,
              fused: FusedLinear | None = None, activation: str = "silu") -> np.ndarray:
    """A dense gated FFN (llama.cpp's build_ffn, LLM_FFN_PAR): down(act(gate(h)) * up(h))."""
    g, u = pr.linears(h, [gate, up], fused)
    return pr.linear(pr.gated(g, u, activation), down)


def relu_sqr(u: np.ndarray) -> np.ndarray:
    """ggml_relu then ggml_sqr (llama.cpp's LLM_FFN_RELU_SQR): exact in float32."""
    r = np.maximum(u, np.float32(0.0))
    return r * r


def relu_sqr_ffn(pr: "Precision", h: np.ndarray, up: Linear, down: Linear) -> np.ndarray:
    """llama.cpp's build_ffn with LLM_FFN_RELU_SQR and no gate: down(relu(up(h))^2), h (T, n_embd)."""
    return pr.linear(relu_sqr(pr.linear(h, up)), down)


def route(probs: np.ndarray, m: MoEArgs, softmax: Callable[[np.ndarray], np.ndarray] = softmax_rows,
          bias: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(selected experts (T, k) int64, their weights (T, k) float32) from probs (T, n_expert)
    (the logits for "softmax_weight" gating, whose k weights go through `softmax`); `bias`
    (n_expert,) is added to the probs to choose the experts, not to weight them."""
    choice = probs if bias is None else probs + bias  # ggml_add, float32
    if m.n_group > 1:
        choice = best_groups(np.ascontiguousarray(choice, dtype=np.float32), m.n_group, m.n_group_used)
    sel = top_k_rows(np.ascontiguousarray(choice, dtype=np.float32), m.n_expert_used)
    w = np.take_along_axis(probs, sel, axis=1).astype(np.float32)
    if m.gating == "softmax_weight":
        w = softmax(w)
    if m.norm_weights:
        total = np.sum(w.astype(np.float64), axis=1).astype(np.float32)  # ggml_sum_rows: a float64 sum
        w = w / np.maximum(total, _MIN_WEIGHT_SUM)[:, None]
    if m.weights_scale not in (0.0, 1.0):
        w = w * np.float32(m.weights_scale)
    return sel, w


def best_groups(choice: np.ndarray, n_group: int, n_used: int) -> np.ndarray:
    """choice (T, n_expert) with -inf outside each token's n_used best groups of n_expert /
    n_group consecutive experts, a group's score the sum of its two highest (llama.cpp's
    build_moe_ffn: ggml_argsort_top_k 2, ggml_sum_rows (a float64 sum of two float32 values:
    their float32 sum), ggml_argsort_top_k n_used)."""
    t, n = choice.shape
    groups = choice.reshape(t * n_group, n // n_group)
    top2 = np.take_along_axis(groups, top_k_rows(groups, 2), axis=1)
    scores = (top2[:, 0] + top2[:, 1]).reshape(t, n_group)
    keep = top_k_rows(np.ascontiguousarray(scores, dtype=np.float32), n_used)  # (T, n_used)
    out = np.full((t, n_group, n // n_group), -np.inf, dtype=np.float32)
    rows = np.arange(t)[:, None]
    out[rows, keep] = choice.reshape(t, n_group, -1)[rows, keep]
    return out.reshape(t, n)


def moe_ffn(pr: "Precision", mw: MoEWeights, h: np.ndarray, m: MoEArgs, activation: str = "silu") -> np.ndarray:
    """The block's output (T, n_embd) for its input h (T, n_embd)."""
    if h.shape[0] == 0:
        return np.zeros_like(h)
    logits = pr.linear(h, mw.gate_inp)  # (T, n_expert)
    if m.gating == "softmax_weight":
        probs = logits
    elif m.gating == "sigmoid":
        probs = sigmoid_rows(np.ascontiguousarray(logits, dtype=np.float32))
    else:
        probs = pr.router_probs(logits)
    sel, w = route(probs, m, pr.router_probs, mw.probs_bias)
    if mw.gate is None:
        (u,) = pr.expert_linears(h, [mw.up], sel)  # (T, k, n_ff_exp)
        act = relu_sqr(u)
    else:
        g, u = pr.expert_linears(h, [mw.gate, mw.up], sel)  # (T, k, n_ff_exp) each
        act = _gated_act(pr, g, u, activation)
    (y,) = pr.expert_linears(act, [mw.down], sel)  # (T, k, n_embd)
    y = y * w[:, :, None]
    out = y[:, 0].copy()
    for j in range(1, m.n_expert_used):  # ggml_add over the slots' views, in slot order
        out += y[:, j]
    if mw.shared is not None:
        gate, up, down = mw.shared
        shared = relu_sqr_ffn(pr, h, up, down) if gate is None else gated_ffn(pr, h, gate, up, down)
        if mw.shared_gate is not None:  # one gate logit per token: a row-wise sum, the same for any batch
            logit = np.ascontiguousarray((h * mw.shared_gate).sum(axis=1, dtype=np.float32)[:, None])
            shared = shared * (pr.silu(logit) / logit if m.shared_gate_silu else sigmoid_rows(logit))
        out += shared
    return out


def _gated_act(pr: "Precision", g: np.ndarray, u: np.ndarray, activation: str) -> np.ndarray:
    """The experts' gated activation of their gate and up outputs g, u (T, k, n_ff_exp)."""
    if activation == "swiglu_oai":
        return K.swiglu_oai(g, u)
    return (pr.gelu(g) if activation == "gelu" else pr.silu(g)) * u
