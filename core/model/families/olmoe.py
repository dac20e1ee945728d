"""`olmoe` (AllenAI OLMoE-1B-7B; llama.cpp's LLM_ARCH_OLMOE, src/models/olmoe.cpp): the Llama
block with
- Q and K RMS-normed over each token's whole projection (`attn_q_norm` and `attn_k_norm` of
  n_embd values, before the reshape into heads; qwen3's norms are per head), then NeoX rope;
- a mixture of experts in every layer (families/moe.py): softmax router, the top
  `expert_used_count` of `expert_count`, weighted by their probabilities as they are (not
  renormalised to sum 1), SiLU-gated experts of `feed_forward_length` rows, no shared expert.
The K norm spans n_embd as in llama.cpp's loader, so the heads of K are those of Q (no GQA).
"""

from __future__ import annotations

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import DecoderModel, LayerWeights, ModelArgs, expert_counts
from llamacli.core.model.families.llama import common_args
from llamacli.core.model.families.moe import MoEArgs
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import WeightLoader


class OlmoeModel(DecoderModel):
    arch = "olmoe"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        p, arch = g.path, g.architecture
        a = common_args(g, neox=True)
        if a.n_head_kv != a.n_head or a.n_head * a.head_dim != a.n_embd:
            raise ModelLoadError(p, f"{arch}: Q and K norms span n_embd ({a.n_embd}), so {arch}.attention.head_count_kv "
                                    f"({a.n_head_kv}) must equal head_count ({a.n_head}) and heads times key_length "
                                    f"({a.n_head * a.head_dim}) must be n_embd")
        a.moe = MoEArgs(*expert_counts(g), a.n_ff, norm_weights=False)
        return a

    def _load_layer(self, ld: WeightLoader, il: int) -> LayerWeights:
        lw = super()._load_layer(ld, il)
        p = f"blk.{il}."
        lw.q_norm = ld.vector(p + "attn_q_norm.weight", self.args.n_embd)
        lw.k_norm = ld.vector(p + "attn_k_norm.weight", self.args.n_embd)
        return lw
