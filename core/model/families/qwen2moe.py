"""`qwen2moe` (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B; llama.cpp's LLM_ARCH_QWEN2MOE,
src/models/qwen2moe.cpp): qwen2's attention (Q/K/V biases, NeoX rope) with, in every layer, a
mixture of experts (families/moe.py): softmax router, the top `expert_used_count` of
`expert_count` weighted by their probabilities as they are (not renormalised), SiLU-gated
experts of `expert_feed_forward_length` rows (else feed_forward_length / expert_used_count),
plus a shared SiLU-gated FFN of `expert_shared_feed_forward_length` rows (else
`feed_forward_length`) whose output is scaled by a gate of one logit per token,
x = h . ffn_gate_inp_shexp, taken as ggml_div(ggml_silu(x), x): the sigmoid, as llama.cpp
computes it.
"""

from __future__ import annotations

from dataclasses import replace

from llamacli.core.model.families.base import DecoderModel, ModelArgs
from llamacli.core.model.families.llama import common_args
from llamacli.core.model.families.qwen35 import read_shared_moe
from llamacli.core.model.weights.gguf_file import GGUFFile


class Qwen2MoeModel(DecoderModel):
    arch = "qwen2moe"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        # The Q/K/V (and, where a file has it, output) biases are picked up by the weight loader.
        a = common_args(g, neox=True)
        a.moe = replace(read_shared_moe(g, a), norm_weights=False, shared_gate_silu=True)
        return a
