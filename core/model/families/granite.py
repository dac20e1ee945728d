"""`granite` (IBM Granite 3.x dense, llama.cpp's LLM_ARCH_GRANITE, src/models/granite.cpp) and
`granitemoe` (Granite 3.x MoE: granite-3.1-1b-a400m, 3b-a800m, and GraniteMoeShared; the same
graph), and Granite's hyperparameters, which granitehybrid (Granite 4.0-H) shares (`granite_args`).

The Llama block (normal rope, RMS norms, SiLU-gated FFN) with four scalings, each a ModelArgs
field the base decoder (and its compiled one-token step) applies:
- the input rows times `embedding_scale` (ggml_scale in build_inp_embd): token embeddings and
  given (media) embeddings alike (`scale_media_embd`);
- Q.K times `attention.scale` (1/sqrt(head_dim) when absent or 0);
- each block's output (attention's, then the FFN's) times `residual_scale` before it joins the
  residual stream;
- logits divided by `logit_scale` (multiplied by its float32 reciprocal, as ggml_scale). granite
  and granitemoe require the key (llama.cpp reads it as required); granitehybrid's is optional.
Absent or 0: no scaling.

`rope.scaling.finetuned` (granite, granitehybrid; not read for granitemoe) switches rope on (the
default) or off: off is a rope of frequency scale 0, every angle 0, Q and K unchanged.

With `expert_count` > 0 (granitemoe; granite and granitehybrid files may have experts too): a
mixture of experts in every layer (families/moe.py, build_moe_ffn as the graph calls it):
softmax router, top `expert_used_count` weights normalised, experts of `feed_forward_length`
rows, and (GraniteMoeShared) a shared SiLU-gated FFN of `expert_shared_feed_forward_length` rows
added (0: none).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import DecoderModel, ModelArgs, md_float, md_int
from llamacli.core.model.families.llama import common_args
from llamacli.core.model.families.moe import MoEArgs
from llamacli.core.model.weights.gguf_file import GGUFFile


def granite_moe_args(g: GGUFFile, n_ff: int) -> MoEArgs | None:
    """The experts of a Granite file (`expert_count` > 0), or None for a dense one."""
    md, p, a = g.metadata, g.path, g.architecture
    n_expert = md_int(md, p, f"{a}.expert_count", 0, lo=0)
    if not n_expert:
        return None
    n_used = md_int(md, p, f"{a}.expert_used_count", hi=n_expert)
    n_ff_shexp = md_int(md, p, f"{a}.expert_shared_feed_forward_length", 0, lo=0)
    return MoEArgs(n_expert, n_used, n_ff, norm_weights=True, gating="softmax", n_shared=1 if n_ff_shexp else 0,
                   n_ff_shared=n_ff_shexp)


def _scale(g: GGUFFile, key: str) -> float:
    return md_float(g.metadata, g.path, key, 0.0, positive=False)


def granite_args(g: GGUFFile, a: ModelArgs, rope_switch: bool = True, logit_required: bool = True) -> ModelArgs:
    """`a` (common_args) with Granite's multipliers, rope switch (rope_switch: the family reads
    `rope.scaling.finetuned`) and experts; `logit_scale` a required key where logit_required."""
    md, p, arch = g.metadata, g.path, g.architecture
    if rope_switch:
        rope = md.get(f"{arch}.rope.scaling.finetuned", True)
        if not isinstance(rope, (bool, np.bool_)):
            raise ModelLoadError(p, f"metadata key '{arch}.rope.scaling.finetuned' must be a boolean")
        if not rope:
            a = replace(a, rope=replace(a.rope, scale=0.0, freq_factors=None))
    emb = _scale(g, f"{arch}.embedding_scale")
    attn = _scale(g, f"{arch}.attention.scale")
    logit = md_float(md, p, f"{arch}.logit_scale") if logit_required else _scale(g, f"{arch}.logit_scale")
    return replace(a, embed_scale=emb or None, attn_scale=attn or 0.0, moe=granite_moe_args(g, a.n_ff),
                   residual_scale=_scale(g, f"{arch}.residual_scale"), logit_scale=logit)


class GraniteModel(DecoderModel):
    arch = "granite"
    scale_media_embd = True

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        md, p, arch = g.metadata, g.path, g.architecture
        mapping = md.get(f"{arch}.deepstack_mapping")
        if mapping is not None and (np.asarray(mapping) >= 0).any():
            raise ModelLoadError(p, f"metadata key '{arch}.deepstack_mapping' (Granite 4 Vision's deepstack "
                                    "layers) is not supported")
        return granite_args(g, common_args(g, neox=False), rope_switch=arch == "granite")


class GraniteMoeModel(GraniteModel):
    arch = "granitemoe"
