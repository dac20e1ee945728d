"""`granitehybrid` (IBM Granite 4.0-H, Bamba; llama.cpp's LLM_ARCH_GRANITE_HYBRID,
src/models/granite-hybrid.cpp): Mamba-2 layers (families/mamba2.py) mixed with attention layers,
each followed by a SiLU-gated FFN.

- A layer is recurrent where `attention.head_count_kv` (a per-layer array) is 0.
- Granite's multipliers: token embeddings times `embedding_scale`; each block's output (the
  mixer's or attention's, then the FFN's) times `residual_scale` before it joins the residual
  stream; Q.K times `attention.scale` (1/sqrt(head_dim) when absent); logits divided by
  `logit_scale` (multiplied by its float32 reciprocal, as ggml_scale). Absent or 0: no scaling.
- `rope.scaling.finetuned` switches rope on (the default) or off: Granite 4.0-H files say false
  (no positional encoding in the attention layers; the Mamba layers carry the order). Rope off
  is a rope of frequency scale 0: every angle 0, cos 1 and sin 0, Q and K unchanged.
- Granite 4.0-H Tiny/Small (`expert_count` > 0): a mixture of experts in every layer
  (families/moe.py: softmax router, top `expert_used_count` normalised, plus a shared FFN of
  `expert_shared_feed_forward_length` rows), as llama.cpp's build_layer_ffn.

The recurrent states live in the cache (state/recurrent.HybridCache): a prompt reuses a cached
prefix only whole, a context shift drops attention cells and keeps the recurrent state, slot
files carry the states (docs/models.md).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import AttnGroup, LayerWeights, ModelArgs, md_float, md_int
from llamacli.core.model.families.hybrid import Mamba2HybridModel, kv_recurrent_args, read_mamba2_args
from llamacli.core.model.families.mamba2 import Mamba2Args, load_mamba2
from llamacli.core.model.families.moe import MoEArgs
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import WeightLoader


def _moe_args(g: GGUFFile, n_ff: int) -> MoEArgs | None:
    """Granite 4.0-H Tiny/Small (`expert_count` > 0): in every layer a softmax router, the top
    `expert_used_count` weights normalised, experts of `feed_forward_length` rows, and a shared
    SiLU-gated FFN of `expert_shared_feed_forward_length` rows added (0: none)."""
    md, p, a = g.metadata, g.path, g.architecture
    n_expert = md_int(md, p, f"{a}.expert_count", 0, lo=0)
    if not n_expert:
        return None
    n_used = md_int(md, p, f"{a}.expert_used_count", hi=n_expert)
    n_ff_shexp = md_int(md, p, f"{a}.expert_shared_feed_forward_length", 0, lo=0)
    return MoEArgs(n_expert, n_used, n_ff, norm_weights=True, gating="softmax", n_shared=1 if n_ff_shexp else 0,
                   n_ff_shared=n_ff_shexp)


def _scale(g: GGUFFile, key: str) -> float:
    return md_float(g.metadata, g.path, key, 0.0, positive=False)


class GraniteHybridModel(Mamba2HybridModel):
    arch = "granitehybrid"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        md, p, arch = g.metadata, g.path, g.architecture
        a = kv_recurrent_args(g)
        rope = md.get(f"{arch}.rope.scaling.finetuned", True)
        if not isinstance(rope, (bool, np.bool_)):
            raise ModelLoadError(p, f"metadata key '{arch}.rope.scaling.finetuned' must be a boolean")
        if not rope:
            a.rope = replace(a.rope, scale=0.0, freq_factors=None)
        emb = _scale(g, f"{arch}.embedding_scale")
        attn = _scale(g, f"{arch}.attention.scale")
        a = replace(a, embed_scale=emb or None, attn_scale=attn or 0.0, moe=_moe_args(g, a.n_ff))
        a.extra.update(ssm=read_mamba2_args(g),
                       residual_scale=_scale(g, f"{arch}.residual_scale"), logit_scale=_scale(g, f"{arch}.logit_scale"))
        ssm: Mamba2Args = a.extra["ssm"]
        if ssm.d_inner != 2 * a.n_embd:
            raise ModelLoadError(p, f"{arch}.ssm.inner_size ({ssm.d_inner}) must be twice {arch}.embedding_length "
                                    f"({a.n_embd}), as llama.cpp requires")
        return a

    def _load_layer(self, ld: WeightLoader, il: int) -> LayerWeights:
        if not self.recurrent[il]:
            return super()._load_layer(ld, il)
        return self._mixer_layer(ld, il, load_mamba2(ld, f"blk.{il}.", self.args.n_embd, self.ssm))

    def _residual(self, h: np.ndarray) -> np.ndarray:
        rs = self.args.extra["residual_scale"]
        return h * np.float32(rs) if rs else h

    def attention(self, il: int, lw: LayerWeights, h: np.ndarray, batch: Batch, cache: KVCache,
                  groups: list[AttnGroup], cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """The layer's mixer (Mamba-2 or attention) times residual_scale."""
        return self._residual(super().attention(il, lw, h, batch, cache, groups, cos, sin))

    def ffn(self, lw: LayerWeights, h: np.ndarray) -> np.ndarray:
        return self._residual(super().ffn(lw, h))

    def logits(self, hidden: np.ndarray) -> np.ndarray:
        out = super().logits(hidden)
        ls = self.args.extra["logit_scale"]
        return out * (np.float32(1.0) / np.float32(ls)) if ls else out
