"""`llama`: Llama 2/3, Mistral, TinyLlama, SmolLM. Normal (GPT-J) rope, SiLU-gated FFN,
optional Llama-3 rope scaling through the `rope_freqs.weight` tensor."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from llamacli.core.model.kernels import ops as K
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import DecoderModel, ModelArgs, md_float, md_int


def common_args(g: GGUFFile, neox: bool, n_head_kv: int | None = None, n_ff: int | None = None) -> ModelArgs:
    """ModelArgs from the keys every llama-like architecture shares (`{arch}.*`); n_head_kv,
    n_ff: the family's own reading of `attention.head_count_kv` and `feed_forward_length`
    (hybrids: per-layer arrays)."""
    md: dict[str, Any] = g.metadata
    a = g.architecture
    p = g.path
    n_embd = md_int(md, p, f"{a}.embedding_length")
    n_head = md_int(md, p, f"{a}.attention.head_count")
    if n_head_kv is None:
        n_head_kv = md_int(md, p, f"{a}.attention.head_count_kv", n_head)
    head_dim = md_int(md, p, f"{a}.attention.key_length", max(n_embd // n_head, 1))
    head_dim_v = md_int(md, p, f"{a}.attention.value_length", head_dim)
    n_rot = md_int(md, p, f"{a}.rope.dimension_count", head_dim)
    base = md_float(md, p, f"{a}.rope.freq_base", 10000.0)
    scale = 1.0
    scaling = md.get(f"{a}.rope.scaling.type")
    if scaling in ("linear", "yarn") and md.get(f"{a}.rope.scaling.factor"):
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
    if n_ff is None:
        n_ff = md_int(md, p, f"{a}.feed_forward_length")  # per-layer arrays: uniform only
    n_ctx_train = md_int(md, p, f"{a}.context_length", 4096)
    rope = K.RopeConfig(n_rot, base, scale, neox, freq_factors)
    if scaling == "yarn":
        n_orig = md_int(md, p, f"{a}.rope.scaling.original_context_length", n_ctx_train)
        rope = yarn_rope(rope, n_orig, md_float(md, p, f"{a}.rope.scaling.attn_factor", 1.0))
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
        n_ctx_train=n_ctx_train,
        rope=rope,
    )


def yarn_rope(rope: K.RopeConfig, n_ctx_orig: int, attn_factor: float = 1.0,
              beta_fast: float = 32.0, beta_slow: float = 1.0, log_mul: float = 0.0) -> K.RopeConfig:
    """YaRN as llama.cpp applies it (`rope.scaling.type` "yarn": gpt-oss, Qwen long-context files,
    mistral3): ext_factor 1, ggml_rope_yarn_corr_dims' range of pairs from the betas, and the
    magnitude factor in float32 as llama_context sets it (get_mscale(1/scale), or with
    `rope.scaling.yarn_log_multiplier` m: get_mscale(1/scale, 1) / get_mscale(1/scale, m); times
    1 / (1 + 0.1 ln(1/scale)) and `rope.scaling.attn_factor`) and ggml's rope_yarn multiplies it
    (by 1 + 0.1 ln(1/scale))."""
    f32 = np.float32
    freq_scale = f32(rope.scale)
    factor = f32(1.0) / freq_scale
    ln = f32(np.log(factor))

    def get_mscale(m: float) -> np.float32:  # 0.1f * mscale * logf(scale) + 1.0f
        return f32(1.0) if factor <= 1 else f32(f32(f32(0.1) * f32(m)) * ln + f32(1.0))

    mscale = get_mscale(1.0) if log_mul == 0 else f32(get_mscale(1.0) / get_mscale(log_mul))
    mscale = f32(mscale * (f32(1.0) / (f32(1.0) + f32(0.1) * ln))) * f32(attn_factor)
    mscale = f32(mscale * (f32(1.0) + f32(0.1) * f32(np.log(f32(1.0) / freq_scale))))
    corr = K.yarn_corr_dims(rope.n_dims, n_ctx_orig, rope.base, beta_fast, beta_slow)
    return replace(rope, attn_factor=float(mscale), ext_factor=1.0, corr_dims=corr)


class LlamaModel(DecoderModel):
    arch = "llama"

    @staticmethod
    def read_args(g: GGUFFile) -> ModelArgs:
        return common_args(g, neox=False)
