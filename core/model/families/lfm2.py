"""`lfm2` (Liquid AI LFM2, LFM2.5; llama.cpp's LLM_ARCH_LFM2, src/models/lfm2.cpp): short-convolution
layers (families/shortconv.py) mixed with attention layers, each followed by a SiLU-gated FFN:

    x = x + mixer(rms_norm(x) * attn_norm)       the short conv, or attention
    x = x + ffn(rms_norm(x) * ffn_norm)

- A layer is recurrent (a short conv) where `attention.head_count_kv` (a per-layer array) is 0.
- Attention: Q/K RMS norms per head (`attn_q_norm`, `attn_k_norm`) before a NeoX rope,
  Q.K times 1/sqrt(head_dim) (llama.cpp reads no `attention.scale` here).
- `shortconv.l_cache` (L, above 1) is the conv's kernel size; the norms' epsilon is
  `attention.layer_norm_rms_epsilon` (required, as llama.cpp's loader requires it).
- The final norm's tensor is `token_embd_norm` (llama.cpp's LLM_TENSOR_OUTPUT_NORM_LFM2); the
  output matrix is its own or, as the released files have it, the token embeddings.

The conv states live in the cache (state/recurrent.HybridCache, as the Mamba-2 families'): a
prompt reuses a cached prefix whole or back to a context checkpoint, a context shift drops
attention cells (their keys turned back by the NeoX rope) and keeps the states, slot files carry
them. Files with sliding-window attention layers (`attention.sliding_window` > 0: llama.cpp's
hybrid-iSWA memory) and LFM2-ColBert's `dense_2_out` projection are refused on load.

`lfm2moe` (LFM2-8B-A1B, LFM2-24B-A2B; the same graph) has after its first
`leading_dense_block_count` layers a mixture of experts in place of the dense FFN: the router's
`expert_gating_func` (sigmoid in the released files; softmax and softmax-over-the-top-k also run),
the top `expert_used_count` chosen with `exp_probs_b`, their weights normalised, no weight scale
(llama.cpp reads no `expert_weights_scale` for it); experts of `expert_feed_forward_length` rows.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import LayerWeights, ModelArgs, expert_counts, md_float, md_int
from llamacli.core.model.families.hybrid import HybridModel, kv_recurrent_args
from llamacli.core.model.families.moe import MoEArgs, gating_name
from llamacli.core.model.families.shortconv import ShortConvWeights, load_shortconv, shortconv_mixer
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.recurrent import HybridCache
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import WeightLoader


class Lfm2Model(HybridModel):
    arch = "lfm2"
    has_qk_norm = True
    output_norm_name = "token_embd_norm"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        md, p, arch = g.metadata, g.path, g.architecture
        a = kv_recurrent_args(g)
        a.rope = replace(a.rope, neox=True)
        a.norm_eps = md_float(md, p, f"{arch}.attention.layer_norm_rms_epsilon", positive=False)
        if md_int(md, p, f"{arch}.attention.sliding_window", 0, lo=0):
            raise ModelLoadError(p, f"{arch}.attention.sliding_window: sliding-window attention layers are not supported")
        if "dense_2_out.weight" in g.tensors:
            raise ModelLoadError(p, "dense_2_out.weight: LFM2-ColBert's output projection is not supported")
        a.extra["l_cache"] = md_int(md, p, f"{arch}.shortconv.l_cache", lo=2)
        return a

    def state_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (self.args.n_embd, self.args.extra["l_cache"] - 1), (0,)  # the conv's inputs; no second state

    def _load_layer(self, ld: WeightLoader, il: int) -> LayerWeights:
        if not self.recurrent[il]:
            return super()._load_layer(ld, il)
        a = self.args
        return self._mixer_layer(ld, il, load_shortconv(ld, f"blk.{il}.", a.n_embd, a.extra["l_cache"]))

    def recurrent_mixer(self, il: int, lw: LayerWeights, h: np.ndarray, batch: Batch, cache: HybridCache) -> np.ndarray:
        assert isinstance(lw.mixer, ShortConvWeights)
        return shortconv_mixer(self.precision, lw.mixer, h, batch, cache, il)




class Lfm2MoeModel(Lfm2Model):
    arch = "lfm2moe"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        md, p, arch = g.metadata, g.path, g.architecture
        a = Lfm2Model.read_args(g)
        gating = md_int(md, p, f"{arch}.expert_gating_func", lo=0)
        a.moe = MoEArgs(*expert_counts(g), md_int(md, p, f"{arch}.expert_feed_forward_length"), norm_weights=True,
                        gating=gating_name(g, gating), probs_bias=True)
        a.n_dense_lead = md_int(md, p, f"{arch}.leading_dense_block_count", 0, lo=0, hi=a.n_layer)
        return a
