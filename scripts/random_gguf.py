"""Dev-only helpers for the real-shaped random-weight GGUFs (make_8b_model.py, make_moe_model.py):
random quantized blocks with sane scales, llama-quantize's Q4_K_M type choice, and a writer that
streams the tensors one at a time (a multi-GB file never sits in memory)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import sys

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.lowbit_blocks import RANDOM_BLOCK_TYPES, set_scale  # noqa: E402

QT = GGMLQuantizationType


@dataclass
class TensorSpec:
    name: str
    shape: tuple[int, ...]  # numpy order: (..., rows, cols); cols is the contiguous dimension
    qtype: QT  # F32 for norms and routers (values: ones / small normals)


def random_blocks(rng: np.random.Generator, qt: QT, rows: int, cols: int) -> np.ndarray:
    """Random blocks of type qt for a (rows, cols) weight, with fp16 scales near 1e-2."""
    qk, size = GGML_QUANT_SIZES[qt]
    blocks = rng.integers(0, 256, size=(rows, cols // qk, size), dtype=np.uint8)
    half = np.array([0.01, 0.002], dtype=np.float16).view(np.uint8)
    if qt == QT.Q4_K:  # d | dmin | ...
        blocks[..., 0:4] = half
    elif qt == QT.Q6_K:  # ... | d at byte 208
        blocks[..., 208:210] = half[:2]
    elif qt == QT.Q8_0:  # d | 32 int8
        blocks[..., 0:2] = half[:2]
    elif qt in RANDOM_BLOCK_TYPES:  # (where each stores its scale: tests/lowbit_blocks.py)
        flat = blocks.reshape(-1, size)
        set_scale(qt, flat, np.full(flat.shape[0], 2e-3, dtype=np.float32))
    return blocks.reshape(rows, -1)


def q4_k_m_type(name: str, il: int, n_layer: int) -> QT:
    """llama-quantize's Q4_K_M choice for a layer's weight: Q6_K for attn_v / ffn_down(_exps)
    of the first and last eighth and every third layer between (use_more_bits); else Q4_K."""
    more = il < n_layer // 8 or il >= 7 * n_layer // 8 or (il - n_layer // 8) % 3 == 2
    return QT.Q6_K if name in ("attn_v", "ffn_down", "ffn_down_exps") and more else QT.Q4_K


def _data(rng: np.random.Generator, t: TensorSpec) -> np.ndarray:
    if t.qtype == QT.F32:
        if t.name.endswith("norm.weight"):
            return np.ones(t.shape, dtype=np.float32)
        return rng.normal(0.0, 0.02, size=t.shape).astype(np.float32)
    rows = int(np.prod(t.shape[:-1]))
    return random_blocks(rng, t.qtype, rows, t.shape[-1])


def write_random_gguf(out: Path, arch: str, set_metadata: Callable[[GGUFWriter], None], tensors: list[TensorSpec]) -> None:
    """Write out: metadata by set_metadata, then each tensor generated and written in turn."""
    out.parent.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(str(out), arch)
    set_metadata(w)
    for t in tensors:
        qk, size = GGML_QUANT_SIZES[t.qtype]
        if t.qtype == QT.F32:
            w.add_tensor_info(t.name, t.shape, np.dtype(np.float32), int(np.prod(t.shape)) * 4)
        else:  # the byte shape: (..., rows, row bytes)
            byte_shape = (*t.shape[:-1], t.shape[-1] // qk * size)
            w.add_tensor_info(t.name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)), raw_dtype=t.qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(0)
    for i, t in enumerate(tensors):
        w.write_tensor_data(_data(rng, t))
        print(f"\r{i + 1}/{len(tensors)} {t.name}", end="", flush=True)
    w.close()
    print(f"\n{out} {out.stat().st_size / 1e9:.2f} GB")


def add_dummy_vocab(w: GGUFWriter, n_vocab: int) -> None:
    """A dummy SPM vocabulary of n_vocab tokens: enough for llama.cpp and us to load the file."""
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<t{i}>".encode() for i in range(n_vocab)])
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types([1] * n_vocab)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


@dataclass(frozen=True)
class LlamaShape:
    """A Llama model's sizes, for random models of a real model's shape."""

    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int


def llama_tensors(s: LlamaShape, layer_type: Callable[[str, int], QT]) -> list[TensorSpec]:
    """Llama's tensors (token_embd Q4_K, output Q6_K, norms F32), each layer matrix in
    layer_type(name, layer)."""
    kv = s.n_embd // s.n_head * s.n_head_kv
    ts = [TensorSpec("token_embd.weight", (s.n_vocab, s.n_embd), QT.Q4_K),
          TensorSpec("output_norm.weight", (s.n_embd,), QT.F32),
          TensorSpec("output.weight", (s.n_vocab, s.n_embd), QT.Q6_K)]
    for il in range(s.n_layer):
        p = f"blk.{il}."
        ts += [TensorSpec(p + n, (s.n_embd,), QT.F32) for n in ("attn_norm.weight", "ffn_norm.weight")]
        for name, rows, cols in (("attn_q", s.n_embd, s.n_embd), ("attn_k", kv, s.n_embd), ("attn_v", kv, s.n_embd),
                                 ("attn_output", s.n_embd, s.n_embd), ("ffn_gate", s.n_ff, s.n_embd),
                                 ("ffn_up", s.n_ff, s.n_embd), ("ffn_down", s.n_embd, s.n_ff)):
            ts.append(TensorSpec(p + name + ".weight", (rows, cols), layer_type(name, il)))
    return ts


def llama_metadata(w: GGUFWriter, s: LlamaShape, name: str, n_ctx: int, file_type: int | None = None) -> None:
    """The llama.* keys of such a model (rope base 500000, RMS eps 1e-5) and a dummy vocabulary."""
    w.add_name(name)
    w.add_context_length(n_ctx)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layer)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(s.n_embd // s.n_head)
    if file_type is not None:
        w.add_file_type(file_type)
    add_dummy_vocab(w, s.n_vocab)
