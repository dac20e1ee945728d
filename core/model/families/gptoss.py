"""`gpt-oss` (gpt-oss-20b, gpt-oss-120b; llama.cpp's LLM_ARCH_OPENAI_MOE, src/models/openai-moe.cpp).

The Llama block with, per llama.cpp's graph:
- biases on Q, K, V and the attention output; NeoX rope with YaRN (`rope.scaling.type` "yarn",
  factor 32 from 4096 positions in the released files: families/llama.py `yarn_rope`), the same
  rope on every layer unless `rope.freq_base_swa` says otherwise;
- attention sinks: a learnt logit per head (`attn_sinks.weight`) in every row's softmax;
- sliding-window layers alternating with full ones (`attention.sliding_window` tokens; pattern
  2 unless `attention.sliding_window_pattern` says: layers 0, 2, 4, ... slide);
- Q.K scaled by 1/sqrt(n_rot);
- the pre-FFN norm stored as `post_attention_norm.weight`;
- a mixture of experts in every layer (families/moe.py): router with a bias, the top
  `expert_used_count` logits, soft max over those ("softmax_weight" gating), not normalised
  again; each expert's gate/up/down with a bias; ggml_swiglu_oai (alpha 1.702, clamped at 7).
"""

from __future__ import annotations

from dataclasses import replace

from llamacli.core.model.families.base import DecoderModel, ModelArgs, expert_counts, md_float, md_int, swa_pattern
from llamacli.core.model.families.llama import common_args
from llamacli.core.model.families.moe import MoEArgs
from llamacli.core.model.weights.gguf_file import GGUFFile


class GptOssModel(DecoderModel):
    arch = "gpt-oss"
    has_attn_sinks = True
    ffn_norm_name = "post_attention_norm"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        md, p, arch = g.metadata, g.path, g.architecture
        a = common_args(g, neox=True)
        n_expert, n_used = expert_counts(g)
        n_ff_exp = md_int(md, p, f"{arch}.expert_feed_forward_length")
        scale = md_float(md, p, f"{arch}.expert_weights_scale", 0.0, positive=False)
        a.moe = MoEArgs(n_expert, n_used, n_ff_exp, norm_weights=False, weights_scale=scale, gating="softmax_weight")
        a.activation = "swiglu_oai"
        a.attn_scale = 1.0 / float(a.rope.n_dims) ** 0.5  # 1.0f/sqrtf(float(n_rot))
        a.sliding_window = md_int(md, p, f"{arch}.attention.sliding_window")
        a.swa_layers = swa_pattern(md, p, f"{arch}.attention.sliding_window_pattern", a.n_layer, 2)
        if f"{arch}.rope.freq_base_swa" in md:
            a.rope_swa = replace(a.rope, base=md_float(md, p, f"{arch}.rope.freq_base_swa"))
        return a
