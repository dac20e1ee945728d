"""`glm4moe` (GLM-4.5, GLM-4.5-Air, GLM-4.6; llama.cpp's LLM_ARCH_GLM4_MOE, src/models/glm4-moe.cpp).

The Llama block with, per llama.cpp's graph:
- biases on Q, K, V (optional, as every llama.cpp loader has them), optional Q/K RMS norms
  (GLM-4.5 355B) before rope; NeoX rope over `rope.dimension_count` dims (half of each head
  in the released files); Q.K scaled by 1/sqrt(head_dim);
- the pre-FFN norm stored as `post_attention_norm.weight`;
- the first `leading_dense_block_count` layers with a dense SiLU-gated FFN, the others with a
  mixture of experts (families/moe.py): sigmoid gating (`expert_gating_func`, 2 when absent),
  the top `expert_used_count` of sigmoid + `exp_probs_b.bias` (the bias only chooses), weights
  the chosen sigmoids normalised (`expert_weights_norm`) and scaled (`expert_weights_scale`),
  plus `expert_shared_count` shared experts (`ffn_*_shexp`) added to the routed sum;
- `nextn_predict_layers` multi-token-prediction layers at the end of `block_count`: skipped,
  as llama.cpp skips them outside its MTP draft context (their tensors stay unread).
M-RoPE sections (`rope.dimension_sections`, the vision variants) are refused.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import DecoderModel, LayerWeights, ModelArgs, expert_counts, md_float, md_int
from llamacli.core.model.families.llama import common_args
from llamacli.core.model.families.moe import MoEArgs, gating_name
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import WeightLoader



class Glm4MoeModel(DecoderModel):
    arch = "glm4moe"
    ffn_norm_name = "post_attention_norm"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        md, p, arch = g.metadata, g.path, g.architecture
        a = common_args(g, neox=True)
        sections = np.asarray(md.get(f"{arch}.rope.dimension_sections", [0, 0])).reshape(-1)
        if sections.size >= 2 and sections[0] > 0 and sections[1] > 0:
            raise ModelLoadError(p, f"{arch}.rope.dimension_sections: M-RoPE (the vision models) is not supported")
        n_nextn = md_int(md, p, f"{arch}.nextn_predict_layers", 0, lo=0, hi=a.n_layer - 1)
        n_expert, n_used = expert_counts(g)
        gating = md_int(md, p, f"{arch}.expert_gating_func", 0, lo=0)
        norm = md.get(f"{arch}.expert_weights_norm", False)
        if not isinstance(norm, (bool, np.bool_)):
            raise ModelLoadError(p, f"metadata key '{arch}.expert_weights_norm' must be a boolean")
        a.moe = MoEArgs(
            n_expert, n_used,
            md_int(md, p, f"{arch}.expert_feed_forward_length", max(a.n_ff // n_used, 1)),
            norm_weights=bool(norm),
            weights_scale=md_float(md, p, f"{arch}.expert_weights_scale", 0.0, positive=False),
            gating=gating_name(g, gating, none="sigmoid"),
            probs_bias=True,
            n_shared=md_int(md, p, f"{arch}.expert_shared_count", lo=0),
        )
        n_layer = a.n_layer - n_nextn
        a = replace(a, n_layer=n_layer, swa_layers=(),
                    n_dense_lead=md_int(md, p, f"{arch}.leading_dense_block_count", 0, lo=0, hi=n_layer))
        return a

    def _load_layer(self, ld: WeightLoader, il: int) -> LayerWeights:
        lw = super()._load_layer(ld, il)
        p = f"blk.{il}."
        if ld.has(p + "attn_q_norm.weight") or ld.has(p + "attn_k_norm.weight"):
            lw.q_norm = ld.vector(p + "attn_q_norm.weight", self.args.head_dim)
            lw.k_norm = ld.vector(p + "attn_k_norm.weight", self.args.head_dim)
        return lw
