"""One sequence's one-token decode step with each layer in one compiled call (ggml numerics).

`DecoderModel.forward_hidden` hands a one-token batch to `DecodeStep.run` when `DecodeStep.plan`
accepted the model: quantized weights (the ggml numerics), the base class's own attention and
FFN blocks (a family that overrides one keeps its code; the base's per-layer shapes, V norm, V
from K and layer output scale are the step's too: gemma4), a gated GELU or SiLU FFN, and no LoRA
adapter active for the step. Each layer is then `decode_layer` (GELU) or `attention_block`,
the SiLU gate in NumPy (as `Precision.silu`), `ffn_out` (core/model/kernels/qmm/layer.py): the
kernels, values and order of the step through `attention` and `ffn`, so the same bits
(tests/test_decode_step.py), from 1 (GELU) or 2 calls a layer instead of ~25.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from llamacli.core.model.kernels import ops as K
from llamacli.core.model.kernels.qmm import experts as X
from llamacli.core.model.kernels.qmm import layer as L
from llamacli.core.model.kernels.qmm import threads
from llamacli.core.model.kernels.qmm.matrix import DecodeCall, QuantMatrix, decode_weights, plan_decode_calls, supports_decode_plan
from llamacli.core.model.kernels.qmm.weight_types import FLOAT_FORMATS
from llamacli.core.model.precision import _gelu_f16_table
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.model.weights.tensors import Linear

if TYPE_CHECKING:
    from llamacli.core.model.families.base import DecoderModel, LayerWeights
    from llamacli.core.model.families.moe import MoEArgs, MoEWeights

_NONE = np.zeros(0, dtype=np.float32)  # an absent norm or bias
# Layers with experts in the compiled step (core/model/kernels/qmm/experts.py: moe_up, moe_down):
# on. The same bits as moe.py's operations one by one (tests run both), and faster: on the
# 30B-A3B-shaped file a one-thread decode step takes 35 ms of CPU time against 44 ms
# (docs/benchmarks.md). A test turns it off to compare the two paths.
MOE_LAYERS = True


def _vec(a: np.ndarray | None) -> np.ndarray:
    return _NONE if a is None else np.array(a, dtype=np.float32, order="C").reshape(-1)


@dataclass
class _LayerPlan:
    """A layer's arguments to the compiled calls (core/model/kernels/qmm/layer.py)."""

    norms: tuple[np.ndarray, ...]  # layer.ATTN_NORM .. RESIDUAL_SCALE: (n,) float32 or empty
    biases: tuple[np.ndarray, ...]  # layer.BQ ..
    qkv: tuple[DecodeCall, ...]
    o: tuple[DecodeCall, ...]
    up: tuple[DecodeCall, ...]
    down: tuple[DecodeCall, ...]
    ints: np.ndarray  # layer.N_HEAD .. V_NORM (SEQ, POS, K_START filled per step)
    swa: bool  # rotated with the sliding-window layers' rope
    window: int | None
    moe: _MoEPlan | None = None  # a layer with experts: `up` and `down` are unused
    out_scale: np.float32 | None = None  # the layer's output times this (LayerWeights.out_scale)


@dataclass
class _MoEPlan:
    """A mixture-of-experts layer's arguments to experts.moe_up / moe_down."""

    router: np.ndarray  # (n_expert, row bytes) float weights
    router_type: int  # weight_types.FLOAT_FORMATS
    router_b: np.ndarray  # (n_expert,) or empty
    ints: np.ndarray  # experts.N_USED ..
    scale: np.float32  # expert_weights_scale
    up: tuple[DecodeCall, ...]  # the gate and up expert tensors, as whole matrices
    down: tuple[DecodeCall, ...]


class DecodeStep:
    """The planned layers of a model (`plan`), run for one-token batches (`run`)."""

    def __init__(self, layers: list[_LayerPlan], eps: float, q_scale: float, attn_scale: float, cap: float, gelu: bool) -> None:
        self.layers = layers
        self.ints = np.stack([lp.ints for lp in layers])  # (n_layer, 12)
        self.eps = np.float32(eps)
        self.q_scale = np.float32(q_scale)
        self.attn_scale = np.float32(attn_scale)
        self.cap = np.float32(cap)
        self.gelu = gelu
        self.table = _gelu_f16_table()

    @classmethod
    def plan(cls, model: DecoderModel) -> DecodeStep | None:
        """The step for this model, or None when its layers cannot run this way (module)."""
        from llamacli.core.model.families.base import DecoderModel

        a = model.args
        kind = type(model)
        if (
            not model.precision.quantized_weights
            or kind.attention is not DecoderModel.attention
            or kind.ffn is not DecoderModel.ffn
            or a.activation not in ("gelu", "silu")
            or (a.moe is not None and not (MOE_LAYERS and _moe_fits(a.moe, a.activation, model.layers)))
            or any(lw.attn_sinks is not None for lw in model.layers)  # sinks: the base attention's
            or (a.attn_temp is not None and a.scale_q)  # one Q factor per step: the temperature's
        ):
            return None
        mats = [lin.q for lw in model.layers for lin in _linears(lw) if lin is not None]
        mats += [ex.whole for lw in model.layers if lw.moe is not None
                 for ex in (lw.moe.gate, lw.moe.up, lw.moe.down) if ex is not None]
        if any(m is None or not supports_decode_plan(m) for m in mats):
            return None
        if len({decode_weights(m).flags.writeable for m in mats if m is not None}) != 1:
            return None  # one compiled signature for all layers
        layers = [_plan_layer(model, il, lw) for il, lw in enumerate(model.layers)]
        q_scale, attn_scale = (a.attn_scale, 1.0) if a.scale_q else (0.0, a.attn_scale)
        return cls(layers, a.norm_eps, q_scale, attn_scale, a.attn_softcap or 0.0, a.activation == "gelu")

    @property
    def kind(self) -> str:
        """What warmup compiles for it (base.one_token_step_kind)."""
        return "moe" if any(lp.moe is not None for lp in self.layers) else "gelu" if self.gelu else "silu"

    def takes(self, model: DecoderModel, batch: Batch) -> bool:
        """Whether `run` takes this batch: one token, or several of distinct sequences (an
        aggregate decode step) in a model without experts or a per-position Q temperature."""
        if batch.n_tokens == 1:
            return True
        return (self.kind != "moe" and model.args.attn_temp is None and batch.see_upto is None
                and np.unique(batch.seq_ids).shape[0] == batch.n_tokens)

    def run(self, model: DecoderModel, x: np.ndarray, batch: Batch, cache: KVCache,
            cs_global: tuple[np.ndarray, np.ndarray], cs_swa: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """The residual stream x (T, n_embd) after every layer, for the batch's T tokens (`takes`:
        each of its own sequence); their K and V written to the cache."""
        if int(batch.seq_ids.min()) < 0 or int(batch.seq_ids.max()) >= cache.n_seq:  # (compiled code checks no index)
            raise ValueError(f"sequence {int(batch.seq_ids.max())} is beyond the cache's {cache.n_seq} sequences")
        x = np.array(x, dtype=np.float32, order="C")
        pos = batch.positions
        q_scale = self.q_scale
        if model.args.attn_temp is not None:  # Q times the position's temperature (base.attention)
            q_scale = K.attn_temperature(batch.positions[:1], *model.args.attn_temp)[0]
        ints = self.ints.copy()
        ints[:, L.SEQ] = int(batch.seq_ids[0])  # (one token: what experts.moe_up reads)
        ints[:, L.POS] = int(pos[0])
        rows = np.zeros((batch.n_tokens, 3), dtype=np.int64)
        rows[:, L.ROW_SEQ], rows[:, L.ROW_POS] = batch.seq_ids, pos
        by_window = {w: _with_start(rows, w) for w in {lp.window for lp in self.layers}}
        serial, want = threads.policy()
        try:
            for il, lp in enumerate(self.layers):
                ints[il, L.K_START] = 0 if lp.window is None else max(0, int(pos[0]) - lp.window + 1)
                cos, sin = cs_swa if lp.swa else cs_global
                wrows = by_window[lp.window]
                args = (lp.norms, lp.biases, lp.qkv, lp.o, lp.up)
                if lp.moe is not None:
                    ok = self._moe_layer(model, x, lp, lp.moe, ints[il], q_scale, cos, sin, cache.k[il], cache.v[il], serial, want)
                elif self.gelu:
                    ok = L.decode_layer(x, *args, lp.down, ints[il], wrows, self.eps, q_scale, self.attn_scale, self.cap,
                                        cos, sin, cache.k[il], cache.v[il], self.table, serial, want)
                else:
                    ok, g, u = L.attention_block(x, *args, ints[il], wrows, self.eps, q_scale, self.attn_scale, self.cap,
                                                 cos, sin, cache.k[il], cache.v[il], serial, want)
                    ok = ok and L.ffn_out(x, model.precision.silu(g) * u, lp.norms, lp.biases, lp.down, self.eps, serial, want)
                if not ok:
                    raise RuntimeError(f"layer {il}'s decode kernels failed (their error is printed above)")
                if lp.out_scale is not None:  # (in place: the bits of base.block's x * scale)
                    x *= lp.out_scale
        finally:
            threads.forget()
        return x

    def _moe_layer(self, model: DecoderModel, x: np.ndarray, lp: _LayerPlan, mp: _MoEPlan, ints: np.ndarray,
                   q_scale: np.float32, cos: np.ndarray, sin: np.ndarray, kc: np.ndarray, vc: np.ndarray,
                   serial: int, want: int) -> bool:
        """A layer with experts (experts.py): its attention, router and gate/up in one call, the
        SiLU gate in NumPy (as moe_ffn), the down matrices and weighted sum in another."""
        ok, sel, w, g, u = X.moe_up(x, lp.norms, lp.biases, lp.qkv, lp.o, ints, self.eps, q_scale, self.attn_scale,
                                    self.cap, cos, sin, kc, vc, mp.router, mp.router_type, mp.router_b, mp.ints,
                                    mp.scale, mp.up, serial, want)
        return bool(ok) and bool(X.moe_down(x, model.precision.silu(g) * u, sel, w, mp.down, lp.norms, self.eps, mp.ints,
                                            serial, want))


def _with_start(rows: np.ndarray, window: int | None) -> np.ndarray:
    """rows (T, 3) with each row's first attended key for a layer of this sliding window
    (None: every key from 0)."""
    r = rows.copy()
    if window is not None:
        r[:, L.ROW_K_START] = np.maximum(0, r[:, L.ROW_POS] - window + 1)
    return r


def _linears(lw: LayerWeights) -> list[Linear | None]:
    """The layer's matrices: attention's four (wv None where V is K's projection: gemma4), then
    the dense FFN's three (none with experts)."""
    ffn = [] if lw.moe is not None else [lw.w_gate, lw.w_up, lw.w_down]
    assert all(lin is not None for lin in ffn)
    return [lw.wq, lw.wk, lw.wv, lw.wo, *ffn]


def _moe_fits(m: MoEArgs, activation: str, layers: list[LayerWeights]) -> bool:
    """Whether the layers with experts run in experts.py's calls: qwen3moe's and olmoe's block
    (soft max gating, weights normalised or not, SiLU experts without biases, no selection bias,
    no shared experts), a float router, quantized experts."""
    if m.gating != "softmax" or m.probs_bias or m.n_shared or activation != "silu" or not m.gated:
        return False
    for lw in layers:
        mw = lw.moe
        if mw is None:
            continue
        exs = (mw.gate, mw.up, mw.down)
        if (mw.gate_inp.q is None or mw.gate is None or mw.gate_inp.qtype not in FLOAT_FORMATS
                or any(ex is None or ex.whole is None or ex.b is not None or not supports_decode_plan(ex.whole)
                       for ex in exs)):
            return False
    return True


def _moe_plan(m: MoEArgs, mw: MoEWeights) -> _MoEPlan:
    assert mw.gate_inp.q is not None and mw.gate is not None and mw.gate.whole is not None and mw.up.whole is not None and mw.down.whole is not None
    ints = np.zeros(5, dtype=np.int64)
    ints[[X.N_USED, X.N_FF_EXP, X.NORM_WEIGHTS]] = [m.n_expert_used, m.n_ff_exp, int(m.norm_weights)]
    ints[X.STEP_UP] = X.task_rows(m.n_ff_exp, m.n_expert_used, 2)
    ints[X.STEP_DOWN] = X.task_rows(mw.down.n_out, m.n_expert_used, 1)
    return _MoEPlan(
        router=mw.gate_inp.q.data,
        router_type=FLOAT_FORMATS[mw.gate_inp.qtype],
        router_b=_vec(mw.gate_inp.b),
        ints=ints,
        scale=np.float32(m.weights_scale),
        up=plan_decode_calls([mw.gate.whole, mw.up.whole], 2),
        down=plan_decode_calls([mw.down.whole], 1),
    )


def _q(lin: Linear) -> QuantMatrix:
    assert lin.q is not None
    return lin.q


def _plan_layer(model: DecoderModel, il: int, lw: LayerWeights) -> _LayerPlan:
    a = model.args
    swa = a.swa_layers[il]
    rope = model._rope_swa if swa else model._rope
    lins = _linears(lw)
    wq, wk, wv, wo = lins[:4]
    assert wq is not None and wk is not None and wo is not None
    # a layer with experts: its attention's matrices stand in for the dense FFN's (never run)
    w_gate, w_up, w_down = lins[4:] if lw.moe is None else (wq, wq, wo)
    assert w_gate is not None and w_up is not None and w_down is not None
    n_kv, d, d_v = model.attn_shape(il)
    ints = np.zeros(12, dtype=np.int64)
    ints[[L.N_HEAD, L.N_HEAD_KV, L.HEAD_DIM, L.HEAD_DIM_V, L.N_FF, L.ROPE_HALF, L.ROPE_NEOX, L.V_FROM_K, L.V_NORM]] = [
        a.n_head, n_kv, d, d_v, w_gate.n_out, rope.n_dims // 2, int(rope.neox), int(wv is None), int(model.v_norm)]
    return _LayerPlan(
        norms=tuple(_vec(v) for v in (lw.attn_norm, lw.q_norm, lw.k_norm, lw.post_attn_norm, lw.ffn_norm, lw.post_ffn_norm,
                                      np.array([a.residual_scale], dtype=np.float32) if a.residual_scale else None)),
        biases=tuple(_NONE if lin is None else _vec(lin.b) for lin in lins) + (_NONE,) * (7 - len(lins)),
        qkv=plan_decode_calls([_q(wq), _q(wk)] + ([] if wv is None else [_q(wv)]), 3),
        o=plan_decode_calls([_q(wo)], 1),
        up=plan_decode_calls([_q(w_gate), _q(w_up)], 2),
        down=plan_decode_calls([_q(w_down)], 1),
        ints=ints,
        swa=swa,
        window=a.layer_window(il),
        moe=None if lw.moe is None else _moe_plan(model.args.moe, lw.moe),  # type: ignore[arg-type]
        out_scale=lw.out_scale,
    )
