"""`gemma`: Gemma (the first), 2B and 7B.

As llama.cpp src/models/gemma.cpp: Gemma 3's shared block (gemma3.gemma_args: embeddings times
sqrt(n_embd), NeoX rope, a GELU-gated FFN, the output tied to token_embd) with Q scaled before
attention by 1/sqrt(value head size); no Q/K norms, no post norms, no sliding window, no soft caps.
"""

from __future__ import annotations

from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.families.base import DecoderModel, ModelArgs
from llamacli.core.model.families.gemma3 import gemma_args, inv_sqrt_f32


class GemmaModel(DecoderModel):
    arch = "gemma"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        a = gemma_args(g, None)
        a.attn_scale = inv_sqrt_f32(a.head_dim_v)  # gemma.cpp: 1.0f / sqrtf(n_embd_head_v)
        return a
