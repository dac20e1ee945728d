"""`gemma3`: the demo model's family.

Differences from the Llama block (llama.cpp src/models/gemma3.cpp): embeddings scaled by
sqrt(n_embd); Q/K RMS norms; post-attention and post-FFN norms; GELU-gated FFN; NeoX rope;
sliding-window layers (il % pattern < pattern - 1, pattern 6 unless the file says) with their
own rope base (10000 unless `rope.freq_base_swa`) and no rope scaling; Q scaled by
1/sqrt(head_dim) before attention (1/sqrt(n_embd/n_head) for the 27B); tied output.
`gemma_args` is the part Gemma 1 and 2 (gemma.py, gemma2.py) share.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.families.base import DecoderModel, ModelArgs, md_float, md_int, swa_pattern
from llamacli.core.model.families.llama import common_args


def inv_sqrt_f32(n: int) -> float:
    """1.0f / sqrtf(float(n)), as llama.cpp computes Gemma's Q scale."""
    return float(np.float32(1.0) / np.sqrt(np.float32(n)))


def gemma_args(g: GGUFFile, n_layer_27b: int | None, n_head_kv: int | None = None) -> ModelArgs:
    """What Gemma 1, 2 and 3 read alike: the common keys, NeoX rope, a GELU-gated FFN, embeddings
    times sqrt(n_embd), Q scaled before attention by 1/sqrt(head_dim), or 1/sqrt(n_embd / n_head)
    for a 27B (the family's layer count n_layer_27b; gemma_pytorch's query_pre_attn_scalar);
    n_head_kv: the family's own reading of `attention.head_count_kv` (Gemma 4: per layer)."""
    a = common_args(g, neox=True, n_head_kv=n_head_kv)
    a.activation = "gelu"
    # ggml_scale(inpL, sqrtf(n_embd)): a float32 sqrt
    a.embed_scale = float(np.sqrt(np.float32(a.n_embd)))
    # the 27B's n_embd / n_head an integer division
    a.attn_scale = inv_sqrt_f32(a.n_embd // a.n_head if a.n_layer == n_layer_27b else a.head_dim)
    a.scale_q = True
    return a


class Gemma3Model(DecoderModel):
    arch = "gemma3"
    has_qk_norm = True
    has_post_norms = True

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        md = g.metadata
        a = gemma_args(g, 62)
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
