"""`seed_oss` (ByteDance Seed-OSS-36B; llama.cpp's LLM_ARCH_SEED_OSS, src/models/seed-oss.cpp): the
Llama block with NeoX rope over the whole head (llama.cpp asserts `rope.dimension_count` ==
head_dim), optional Q/K/V biases (the released files have them; no output bias), Q.K scaled by
1/sqrt(head_dim) (llama.cpp reads no `attention.scale` for this family), the pre-FFN norm stored
as `post_attention_norm.weight`, a dense SiLU-gated FFN, and the output tied to `token_embd`
when the file has no `output.weight`.
"""

from __future__ import annotations

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import DecoderModel, ModelArgs
from llamacli.core.model.families.llama import common_args
from llamacli.core.model.weights.gguf_file import GGUFFile


class SeedOssModel(DecoderModel):
    arch = "seed_oss"
    ffn_norm_name = "post_attention_norm"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        a = common_args(g, neox=True)
        if a.rope.n_dims != a.head_dim:
            raise ModelLoadError(g.path, f"{a.arch}.rope.dimension_count ({a.rope.n_dims}) must equal the head size "
                                         f"({a.head_dim}): llama.cpp rotates whole heads for this architecture")
        return a
