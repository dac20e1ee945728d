"""`llama`: Llama 2/3, Mistral, TinyLlama, SmolLM. Normal (GPT-J) rope, SiLU-gated FFN,
optional Llama-3 rope scaling through the `rope_freqs.weight` tensor."""

from __future__ import annotations

from typing import Any

import numpy as np

from llamacli.core.model.kernels import ops as K
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import DecoderModel, ModelArgs, md_float, md_int


def common_args(g: GGUFFile, neox: bool) -> ModelArgs:
    """ModelArgs from the keys every llama-like architecture shares (`{arch}.*`)."""
    md: dict[str, Any] = g.metadata
    a = g.architecture
    p = g.path
    n_embd = md_int(md, p, f"{a}.embedding_length")
    n_head = md_int(md, p, f"{a}.attention.head_count")
    n_head_kv = md_int(md, p, f"{a}.attention.head_count_kv", n_head)
    head_dim = md_int(md, p, f"{a}.attention.key_length", max(n_embd // n_head, 1))
    head_dim_v = md_int(md, p, f"{a}.attention.value_length", head_dim)
    n_rot = md_int(md, p, f"{a}.rope.dimension_count", head_dim)
    base = md_float(md, p, f"{a}.rope.freq_base", 10000.0)
    scale = 1.0
    if md.get(f"{a}.rope.scaling.type") == "linear" and md.get(f"{a}.rope.scaling.factor"):
        scale = 1.0 / md_float(md, p, f"{a}.rope.scaling.factor")
    elif md.get(f"{a}.rope.scale_linear"):
        scale = 1.0 / md_float(md, p, f"{a}.rope.scale_linear")
    freq_factors = None
    if "rope_freqs.weight" in g.tensors:  # Llama 3.1+ scaling, as llama.cpp reads it
        t = g.tensors["rope_freqs.weight"]
        freq_factors = np.frombuffer(g.raw("rope_freqs.weight"), dtype=np.float32).copy()
        if t.shape != (n_rot // 2,):
            raise ModelLoadError(p, f"rope_freqs.weight has shape {t.shape}, expected ({n_rot // 2},)")
    n_vocab = len(md.get("tokenizer.ggml.tokens", ())) or md_int(md, p, f"{a}.vocab_size")
    if "token_embd.weight" in g.tensors:
        n_vocab = g.tensors["token_embd.weight"].shape[0]
    n_layer = md_int(md, p, f"{a}.block_count")
    n_ff = md_int(md, p, f"{a}.feed_forward_length")  # per-layer arrays: uniform only
    return ModelArgs(
        arch=a,
        n_vocab=n_vocab,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        head_dim_v=head_dim_v,
        n_ff=n_ff,
        norm_eps=md_float(md, p, f"{a}.attention.layer_norm_rms_epsilon", 1e-5, positive=False),
        n_ctx_train=md_int(md, p, f"{a}.context_length", 4096),
        rope=K.RopeConfig(n_rot, base, scale, neox, freq_factors),
    )


class LlamaModel(DecoderModel):
    arch = "llama"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        return common_args(g, neox=False)
