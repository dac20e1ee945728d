"""`gemma3`: the demo model's family.

Differences from the Llama block (llama.cpp src/models/gemma3.cpp): embeddings scaled by
sqrt(n_embd); Q/K RMS norms; post-attention and post-FFN norms; GELU-gated FFN; NeoX rope;
sliding-window layers (il % pattern < pattern - 1, pattern 6 unless the file says) with their
own rope base (10000 unless `rope.freq_base_swa`) and no rope scaling; Q scaled by
1/sqrt(head_dim) before attention (1/sqrt(n_embd/n_head) for the 27B); tied output.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.families.base import DecoderModel, ModelArgs, md_float, md_int, swa_pattern
from llamacli.core.model.families.llama import common_args


class Gemma3Model(DecoderModel):
    arch = "gemma3"
    has_qk_norm = True
    has_post_norms = True

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        md = g.metadata
        a = common_args(g, neox=True)
        a.activation = "gelu"
        # ggml_scale(inpL, sqrtf(n_embd)): a float32 sqrt
        a.embed_scale = float(np.sqrt(np.float32(a.n_embd)))
        if a.n_layer == 62:  # 27B
            a.attn_scale = 1.0 / math.sqrt(a.n_embd / a.n_head)
        else:
            a.attn_scale = 1.0 / math.sqrt(a.head_dim)
        a.scale_q = True
        p = g.path
        softcap = md.get("gemma3.final_logit_softcapping")
        a.final_softcap = md_float(md, p, "gemma3.final_logit_softcapping") if softcap else None
        window = md_int(md, p, "gemma3.attention.sliding_window", 0, lo=0)
        if window > 0:
            a.sliding_window = window
            a.swa_layers = swa_pattern(md, p, "gemma3.attention.sliding_window_pattern", a.n_layer, 6)
            base_swa = md_float(md, p, "gemma3.rope.freq_base_swa", 10000.0)
            a.rope_swa = replace(a.rope, base=base_swa, scale=1.0, freq_factors=None)
        return a
