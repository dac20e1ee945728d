"""`nemotron_h` (NVIDIA Nemotron-H, Nemotron Nano 2; llama.cpp's LLM_ARCH_NEMOTRON_H,
src/models/nemotron-h.cpp): a stack of single-purpose layers, each one block on the residual
stream

    x = x + f(rms_norm(x) * attn_norm)

where f is the layer's one part, chosen per layer by the metadata as llama.cpp does:
- `feed_forward_length[il]` > 0: an FFN of squared ReLU, down(relu(up(h))^2) (no gate;
  ffn_up/ffn_down, biases where the file has them);
- else `attention.head_count_kv[il]` > 0: attention without positions (llama.cpp's rope type
  NONE: Q and K as projected, Q.K times 1/sqrt(key_length); llama.cpp reads no
  attention.scale here), attn_q/k/v/output, biases where the file has them;
- else (both 0): a Mamba-2 mixer (families/mamba2.py; its ssm_conv1d bias optional).
`attention.head_count_kv` absent means head_count on every layer (llama.cpp's default), so then
every layer without an FFN attends. The RMS norms' epsilon is `attention.layer_norm_rms_epsilon`,
else `attention.layer_norm_epsilon` (the converter writes the latter only). No embedding,
residual or logit multipliers; the output matrix is its own (or the token embeddings when absent).
With `expert_count` > 0 (`nemotron_h_moe`, Nemotron 3 Nano; `_moe_args`) each FFN layer is a
mixture of ungated squared-ReLU experts plus a shared one; trailing `nextn_predict_layers` (MTP)
blocks are not run, as llama.cpp outside its draft context.

Only the attention layers hold K/V cells and only the Mamba-2 layers a recurrent state
(llama.cpp's hybrid memory filters); the FFN layers hold nothing. The states live in the cache
as granitehybrid's (state/recurrent.HybridCache: whole-prefix or checkpoint reuse, the context
shift keeps them, slot files carry them). With no rope a context shift leaves the keys as they
are (llama.cpp skips its K-shift graph for rope type NONE; here: a rotation by angle 0).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import AttnGroup, LayerWeights, ModelArgs, md_float, md_int
from llamacli.core.model.families.hybrid import Mamba2HybridModel, attention_args, per_layer, read_mamba2_args
from llamacli.core.model.families.mamba2 import load_mamba2
from llamacli.core.model.families.moe import MoEArgs, load_moe, relu_sqr_ffn
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import WeightLoader


def _norm_eps(g: GGUFFile) -> float:
    md, p, a = g.metadata, g.path, g.architecture
    key = f"{a}.attention.layer_norm_rms_epsilon"
    if key not in md:
        key = f"{a}.attention.layer_norm_epsilon"
    return md_float(md, p, key, positive=False)


def _moe_args(g: GGUFFile, n_ff: tuple[int, ...]) -> MoEArgs | None:
    """`expert_count` > 0 (Nemotron 3 Nano, `nemotron_h_moe`): on every FFN layer a sigmoid router
    whose top `expert_used_count` are chosen with `exp_probs_b` (expert groups where
    `expert_group_count` > 1), weights normalised where `expert_weights_norm`, times
    `expert_weights_scale`; experts of up and down only (squared ReLU) of
    `expert_feed_forward_length` rows (else the layer's feed_forward_length / expert_used_count),
    plus one shared expert of `expert_shared_feed_forward_length` rows."""
    md, p, a = g.metadata, g.path, g.architecture
    n_expert = md_int(md, p, f"{a}.expert_count", 0, lo=0)
    if not n_expert:
        return None
    if md_int(md, p, f"{a}.moe_latent_size", 0, lo=0):
        raise ModelLoadError(p, f"{a}.moe_latent_size: experts in a latent space (Nemotron 3 Super) are not supported")
    n_used = md_int(md, p, f"{a}.expert_used_count", hi=n_expert)
    sizes = {md_int(md, p, f"{a}.expert_feed_forward_length", f // n_used or 1) for f in n_ff if f}
    if len(sizes) > 1:
        raise ModelLoadError(p, f"experts of a different size per layer ({a}.feed_forward_length): not supported")
    norm = md.get(f"{a}.expert_weights_norm", False)
    if not isinstance(norm, (bool, np.bool_)):
        raise ModelLoadError(p, f"metadata key '{a}.expert_weights_norm' must be a boolean")
    n_group = md_int(md, p, f"{a}.expert_group_count", 0, lo=0, hi=n_expert)
    return MoEArgs(n_expert, n_used, sizes.pop() if sizes else 1, norm_weights=bool(norm),
                   weights_scale=md_float(md, p, f"{a}.expert_weights_scale", 0.0, positive=False), gating="sigmoid",
                   probs_bias=True, n_shared=1, n_ff_shared=md_int(md, p, f"{a}.expert_shared_feed_forward_length"),
                   n_group=n_group if n_group > 1 else 0,
                   n_group_used=md_int(md, p, f"{a}.expert_group_used_count", 0, lo=0) if n_group > 1 else 0,
                   gated=False)


class NemotronHModel(Mamba2HybridModel):
    arch = "nemotron_h"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        md, p, arch = g.metadata, g.path, g.architecture
        n_all = md_int(md, p, f"{arch}.block_count")
        # the trailing nextn (MTP) blocks: llama.cpp's draft head, not run by the model itself
        n_layer = n_all - md_int(md, p, f"{arch}.nextn_predict_layers", 0, lo=0, hi=n_all - 1)
        heads = per_layer(g, f"{arch}.attention.head_count", n_all)[:n_layer]
        kv_key = f"{arch}.attention.head_count_kv"
        kv = per_layer(g, kv_key, n_all)[:n_layer] if kv_key in md else heads
        n_ff = per_layer(g, f"{arch}.feed_forward_length", n_all)[:n_layer]
        recurrent = tuple(k == 0 and f == 0 for k, f in zip(kv, n_ff))
        attention = tuple(k > 0 and f == 0 for k, f in zip(kv, n_ff))
        if any(a and not h for a, h in zip(attention, heads)):
            raise ModelLoadError(p, f"metadata key '{arch}.attention.head_count' is 0 on a layer that attends")
        a = replace(attention_args(g, kv, attention, n_ff=max(n_ff) or 1), n_layer=n_layer, swa_layers=())
        a.rope = replace(a.rope, scale=0.0, freq_factors=None)  # no positions: every angle 0
        a.norm_eps = _norm_eps(g)
        a.moe = _moe_args(g, n_ff)
        a.extra.update(ssm=read_mamba2_args(g), recurrent=recurrent, attention=attention, n_ff=n_ff)
        return a

    @property
    def attention_layers(self) -> tuple[bool, ...]:
        a: tuple[bool, ...] = self.args.extra["attention"]
        return a

    def _load_layer(self, ld: WeightLoader, il: int) -> LayerWeights:
        a = self.args
        p = f"blk.{il}."
        norm = ld.vector(p + "attn_norm.weight", a.n_embd)
        n_ff = a.extra["n_ff"][il]
        if self.attention_layers[il]:
            return LayerWeights(attn_norm=norm, wq=ld.linear(p + "attn_q", a.n_embd, a.n_head * a.head_dim),
                                wk=ld.linear(p + "attn_k", a.n_embd, a.n_head_kv * a.head_dim),
                                wv=ld.linear(p + "attn_v", a.n_embd, a.n_head_kv * a.head_dim_v),
                                wo=ld.linear(p + "attn_output", a.n_head * a.head_dim_v, a.n_embd), ffn_norm=norm)
        lw = LayerWeights(attn_norm=norm, wq=None, wk=None, wv=None, wo=None, ffn_norm=norm)  # one norm per layer
        if n_ff and a.moe is not None:
            lw.moe = load_moe(ld, p, a.n_embd, a.moe)
        elif n_ff:
            lw.w_up = ld.linear(p + "ffn_up", a.n_embd, n_ff)
            lw.w_down = ld.linear(p + "ffn_down", n_ff, a.n_embd)
        else:
            lw.mixer = load_mamba2(ld, p, a.n_embd, self.ssm)
        return lw

    def block(self, il: int, lw: LayerWeights, x: np.ndarray, batch: Batch, cache: KVCache, groups: list[AttnGroup],
              cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """The layer's one part (FFN, attention or Mamba-2) on its normed input, added to x."""
        h = K.rms_norm(x, lw.attn_norm, self.args.norm_eps)
        if lw.mixer is None and lw.wq is None:
            return x + self.ffn(lw, h)
        return x + self.attention(il, lw, h, batch, cache, groups, cos, sin)

    def ffn(self, lw: LayerWeights, h: np.ndarray) -> np.ndarray:
        """The squared-ReLU FFN, or the experts (families/moe.py, ungated: squared ReLU)."""
        if lw.moe is not None:
            return super().ffn(lw, h)
        assert lw.w_up is not None and lw.w_down is not None
        return relu_sqr_ffn(self.precision, h, lw.w_up, lw.w_down)


class NemotronHMoeModel(NemotronHModel):
    """`nemotron_h_moe` (Nemotron 3 Nano 30B-A3B): nemotron_h whose FFN layers are experts
    (`_moe_args`); its trailing MTP block is skipped."""

    arch = "nemotron_h_moe"
