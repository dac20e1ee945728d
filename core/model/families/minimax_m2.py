"""`minimax-m2` (MiniMax-M2, MiniMax-M2.1; llama.cpp's LLM_ARCH_MINIMAX_M2, src/models/minimax-m2.cpp):
the Llama block with
- Q and K RMS-normed over each token's whole projection (`attn_q_norm` of n_head * head_dim
  values, `attn_k_norm` of n_head_kv * head_dim: GQA allowed, unlike olmoe's n_embd K norm),
  before the reshape into heads, then NeoX rope over the first `rope.dimension_count` dims of
  each head (64 of 128 in the released files; the rest pass unrotated); Q.K scaled by
  1/sqrt(head_dim);
- a mixture of experts in every layer (families/moe.py): the file's `expert_gating_func`
  (sigmoid in the released files; llama.cpp aborts without the key), the top `expert_used_count`
  of the probabilities plus `exp_probs_b.bias` (the bias only chooses), weights the chosen
  probabilities normalised to sum 1 and never scaled (llama.cpp reads no `expert_weights_scale`
  for this family), SiLU-gated experts of `feed_forward_length` rows (the tensors' shape in
  llama.cpp's loader; `expert_feed_forward_length` is read there but unused), no shared expert.
"""

from __future__ import annotations

from llamacli.core.model.families.base import DecoderModel, LayerWeights, ModelArgs, expert_counts, md_int
from llamacli.core.model.families.llama import common_args
from llamacli.core.model.families.moe import MoEArgs, gating_name
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.tensors import WeightLoader

# expert_gating_func 0 (none, or the key absent) makes llama.cpp's build_moe_ffn abort: refused


class MinimaxM2Model(DecoderModel):
    arch = "minimax-m2"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        md, p, arch = g.metadata, g.path, g.architecture
        a = common_args(g, neox=True)
        n_expert, n_used = expert_counts(g)
        gating = md_int(md, p, f"{arch}.expert_gating_func", 0, lo=0)
        a.moe = MoEArgs(n_expert, n_used, a.n_ff, norm_weights=True, gating=gating_name(g, gating), probs_bias=True)
        return a

    def _load_layer(self, ld: WeightLoader, il: int) -> LayerWeights:
        lw = super()._load_layer(ld, il)
        a, p = self.args, f"blk.{il}."
        lw.q_norm = ld.vector(p + "attn_q_norm.weight", a.n_head * a.head_dim)
        lw.k_norm = ld.vector(p + "attn_k_norm.weight", a.n_head_kv * a.head_dim)
        return lw
