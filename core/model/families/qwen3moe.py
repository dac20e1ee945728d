"""`qwen3moe` (Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder-30B-A3B): the qwen3 attention block
(Q/K RMS norms before NeoX rope) with a mixture-of-experts FFN in every layer (families/moe.py):
softmax router, top `expert_used_count` of `expert_count`, weights normalised to sum 1, SiLU-gated
experts of `expert_feed_forward_length` rows, no shared expert (llama.cpp src/models/qwen3moe.cpp).
"""

from __future__ import annotations

from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.families.base import DecoderModel, ModelArgs, expert_counts, md_int
from llamacli.core.model.families.llama import common_args
from llamacli.core.model.families.moe import MoEArgs


class Qwen3MoeModel(DecoderModel):
    arch = "qwen3moe"
    has_qk_norm = True

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        a = common_args(g, neox=True)
        md, p, arch = g.metadata, g.path, g.architecture
        n_expert, n_used = expert_counts(g)
        # llama.cpp: n_ff_exp, else n_ff / n_expert_used
        n_ff_exp = md_int(md, p, f"{arch}.expert_feed_forward_length", max(a.n_ff // n_used, 1))
        a.moe = MoEArgs(n_expert, n_used, n_ff_exp, norm_weights=True)
        return a
