"""`gemma2`: Gemma 2 (2B, 9B, 27B).

As llama.cpp src/models/gemma2.cpp: Gemma 3's block (gemma3.gemma_args: embeddings times
sqrt(n_embd), GELU-gated FFN, post-attention and post-FFN norms, Q scaled before attention)
without Q/K norms, with soft-capped attention scores (cap * tanh(score / cap), cap
`attn_logit_softcapping`, 50 unless the file says) and soft-capped logits
(`final_logit_softcapping`, 30 unless the file says, always applied), and a sliding window
(`attention.sliding_window`, 4096 unless the file says) on every other layer from layer 0
(pattern 2 unless `attention.sliding_window_pattern`). The sliding layers rotate with the
file's rope base unless `rope.freq_base_swa` gives theirs, and with the same rope scale.
"""

from __future__ import annotations

from dataclasses import replace

from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.families.base import DecoderModel, ModelArgs, md_float, md_int, swa_pattern
from llamacli.core.model.families.gemma3 import gemma_args


class Gemma2Model(DecoderModel):
    arch = "gemma2"
    has_post_norms = True

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        md = g.metadata
        p = g.path
        a = gemma_args(g, 46)
        a.attn_softcap = md_float(md, p, "gemma2.attn_logit_softcapping", 50.0)
        a.final_softcap = md_float(md, p, "gemma2.final_logit_softcapping", 30.0)
        a.sliding_window = md_int(md, p, "gemma2.attention.sliding_window", 4096)
        a.swa_layers = swa_pattern(md, p, "gemma2.attention.sliding_window_pattern", a.n_layer, 2)
        if "gemma2.rope.freq_base_swa" in md:
            a.rope_swa = replace(a.rope, base=md_float(md, p, "gemma2.rope.freq_base_swa"))
        return a
