"""Input models of the `llama quantize` tests, written deterministically (the llama.cpp fixtures in
tests/fixtures/quantize/ were made from the same bytes; scripts/quantize_fixtures.py).

    write_input("llama-f32", path)       tests.tiny_models' llama F32 (256 wide, output.weight)
    write_input("qwen2-f16", path)       tiny qwen2 F16 (tied output, 1-D biases)
    write_input("llama-q8_0", path)      tiny llama Q8_0 (requantizing)
    write_input("gemma3-640", path)      a gemma3 640 wide like the demo model: K-quant fallbacks
    write_input("rules-llama32", path)   32 llama layers, 4 rows per matrix: mixture counters
    write_input("rules-gemma18", path)   18 gemma3 layers shaped like the demo model, 4 rows each

The "rules" models have the tensor names and row lengths of real ones but only 4 rows per
matrix, so every quantization type of their whole file is cheap to check.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import gguf
import numpy as np
import pytest

from llamacli.core.model.weights.gguf_file import GGUFFile

from tests.tiny_models import write_tiny_model

FIXTURES = Path(__file__).parent / "fixtures" / "quantize"
INPUTS = ("llama-f32", "qwen2-f16", "llama-q8_0", "gemma3-640", "rules-llama32", "rules-gemma18")


def _copy_vocab(w: gguf.GGUFWriter, src: GGUFFile) -> None:
    """The SPM vocabulary keys of a tiny gemma3 model, with their GGUF types."""
    m = src.metadata
    w.add_tokenizer_model(m["tokenizer.ggml.model"])
    w.add_tokenizer_pre(m["tokenizer.ggml.pre"])
    w.add_token_list(list(m["tokenizer.ggml.tokens"]))
    w.add_token_scores([float(s) for s in m["tokenizer.ggml.scores"]])
    w.add_token_types([int(t) for t in m["tokenizer.ggml.token_type"]])
    w.add_bos_token_id(m["tokenizer.ggml.bos_token_id"])
    w.add_eos_token_id(m["tokenizer.ggml.eos_token_id"])
    w.add_unk_token_id(m["tokenizer.ggml.unknown_token_id"])
    w.add_pad_token_id(m["tokenizer.ggml.padding_token_id"])
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)


def _header(w: gguf.GGUFWriter, n_ctx: int, n_embd: int, n_layer: int, n_ff: int, n_head: int,
            n_head_kv: int, head_dim: int, rope_dims: bool) -> None:
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    if rope_dims:
        w.add_rope_dimension_count(head_dim)
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)


def _gemma3(path: Path, n_embd: int, n_layer: int, n_ff: int, n_head: int, head_dim: int,
            rows: int | None, seed: int) -> None:
    """A gemma3 model (one KV head, tied output); `rows` caps every matrix's row count."""
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        vocab = GGUFFile(write_tiny_model("gemma3", "F32", Path(tmp) / "v.gguf"))
        n_vocab = len(vocab.metadata["tokenizer.ggml.tokens"])
        w = gguf.GGUFWriter(str(path), "gemma3")
        w.add_name(path.stem)
        _header(w, 256, n_embd, n_layer, n_ff, n_head, 1, head_dim, rope_dims=False)
        w.add_sliding_window(8)
        _copy_vocab(w, vocab)

    def mat(name: str, n_out: int, n_in: int) -> None:
        n = n_out if rows is None else min(rows, n_out)
        w.add_tensor(name, (rng.standard_normal((n, n_in)) * n_in ** -0.5).astype(np.float32))

    def norm(name: str, n: int) -> None:
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    mat("token_embd.weight", n_vocab, n_embd)
    norm("output_norm.weight", n_embd)
    q, kv = n_head * head_dim, head_dim
    for il in range(n_layer):
        p = f"blk.{il}."
        norm(p + "attn_norm.weight", n_embd)
        mat(p + "attn_q.weight", q, n_embd)
        mat(p + "attn_k.weight", kv, n_embd)
        mat(p + "attn_v.weight", kv, n_embd)
        norm(p + "attn_q_norm.weight", head_dim)
        norm(p + "attn_k_norm.weight", head_dim)
        mat(p + "attn_output.weight", n_embd, q)
        norm(p + "post_attention_norm.weight", n_embd)
        norm(p + "ffn_norm.weight", n_embd)
        mat(p + "ffn_gate.weight", n_ff, n_embd)
        mat(p + "ffn_up.weight", n_ff, n_embd)
        mat(p + "ffn_down.weight", n_embd, n_ff)
        norm(p + "post_ffw_norm.weight", n_embd)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _rules_llama32(path: Path) -> None:
    """32 llama layers, GQA 4 (n_head 32, n_head_kv 8), untied output, 4 rows per matrix."""
    rng = np.random.default_rng(7)
    n_embd, n_ff, n_layer = 256, 512, 32
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(path.stem)
    _header(w, 256, n_embd, n_layer, n_ff, 32, 8, 8, rope_dims=True)
    w.add_vocab_size(4)

    def mat(name: str, n_in: int) -> None:
        w.add_tensor(name, (rng.standard_normal((4, n_in)) * n_in ** -0.5).astype(np.float32))

    mat("token_embd.weight", n_embd)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    mat("output.weight", n_embd)
    for il in range(n_layer):
        p = f"blk.{il}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up"):
            mat(p + name + ".weight", n_embd)
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        mat(p + "ffn_down.weight", n_ff)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_input(name: str, path: str | os.PathLike[str]) -> Path:
    """Write the named test input to `path` (byte-identical every time) and return it."""
    path = Path(path)
    if name == "llama-f32":
        return write_tiny_model("llama", "F32", path)
    if name == "qwen2-f16":
        return write_tiny_model("qwen2", "F16", path)
    if name == "llama-q8_0":
        return write_tiny_model("llama", "Q8_0", path)
    if name == "qwen3moe-f32":  # not in INPUTS: only the option runs use it
        return write_tiny_model("qwen3moe", "F32", path)
    if name == "gemma3-640":
        _gemma3(path, n_embd=640, n_layer=2, n_ff=512, n_head=2, head_dim=128, rows=None, seed=640)
    elif name == "rules-gemma18":
        _gemma3(path, n_embd=640, n_layer=18, n_ff=2048, n_head=4, head_dim=256, rows=4, seed=18)
    elif name == "rules-llama32":
        _rules_llama32(path)
    else:
        raise ValueError(f"unknown quantize test input {name!r}")
    return path


def write_imatrix(model: str | os.PathLike[str], path: str | os.PathLike[str], legacy: bool = False) -> Path:
    """A deterministic importance matrix for a test input: every 2-D `blk.*` weight gets sums of
    squares from a seeded gamma distribution over 512 tokens (4 chunks of 128); the output and
    token embeddings get none, as llama-imatrix without --process-output; expert tensors get
    counts per expert, expert 1 none. GGUF or legacy .dat."""
    from llamacli.core.quantize.imatrix_file import ImatrixEntry, write_imatrix_dat, write_imatrix_gguf

    g = GGUFFile(model)
    rng = np.random.default_rng(4096)
    entries: dict[str, ImatrixEntry] = {}
    for name, t in sorted(g.tensors.items()):
        if name.startswith("blk.") and name.endswith(".weight") and len(t.shape) == 2:
            sums = (rng.gamma(0.7, 1.0, t.shape[-1]) * 512).astype(np.float32)
            entries[name] = ImatrixEntry(sums, np.array([512], dtype=np.int64))
        elif name.startswith("blk.") and len(t.shape) == 3:  # experts: counts per expert, one unused
            counts = rng.integers(1, 400, t.shape[0])
            counts[1] = 0
            sums = (rng.gamma(0.7, 1.0, t.shape[0] * t.shape[-1]) * np.repeat(counts, t.shape[-1])).astype(np.float32)
            entries[name] = ImatrixEntry(sums, counts.astype(np.int64))
    if legacy:
        write_imatrix_dat(str(path), entries, 128, 4, "train.txt")
    else:
        write_imatrix_gguf(str(path), entries, ["train.txt"], 4, 128)
    return Path(path)


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@pytest.mark.parametrize("name", INPUTS)
def test_inputs_are_the_fixture_inputs(name: str, tmp_path: Path) -> None:
    """The llama.cpp fixtures stay valid only while the inputs are byte-identical."""
    meta = json.loads((FIXTURES / "inputs.json").read_text())
    assert sha256_file(write_input(name, tmp_path / f"{name}.gguf")) == meta[name]["sha256"]
