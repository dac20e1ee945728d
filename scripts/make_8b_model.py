"""Dev-only: write an 8B-shaped Llama GGUF (Llama-3-8B hyperparameters, random weights, the
Q4_K_M type mix) to measure memory and speed on a real-size model (not run in CI).

    python scripts/make_8b_model.py [OUT.gguf]      (default: ~/.cache/llamacli-bench/llama3-8b-q4km.gguf)
    llama bench -m OUT.gguf -p 64 -n 16 --seqs 1

The weights are random bytes with sane fp16 block scales, so the numbers are noise but every
kernel, byte and page is what a real 4.9 GB Q4_K_M file costs. The vocabulary is a dummy SPM
one of Llama-3's size (128256 tokens), enough for both llama.cpp and us to load the file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter

QT = GGMLQuantizationType
N_VOCAB, N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF = 128256, 4096, 32, 32, 8, 14336


def _raw(rng: np.random.Generator, qt: QT, rows: int, cols: int) -> np.ndarray:
    """Random blocks of type qt for a (rows, cols) weight, with fp16 scales near 1e-2."""
    qk, size = GGML_QUANT_SIZES[qt]
    blocks = rng.integers(0, 256, size=(rows, cols // qk, size), dtype=np.uint8)
    half = np.array([0.01, 0.002], dtype=np.float16).view(np.uint8)
    if qt == QT.Q4_K:  # d | dmin | ...
        blocks[..., 0:4] = half
    elif qt == QT.Q6_K:  # ... | d at byte 208
        blocks[..., 208:210] = half[:2]
    return blocks.reshape(rows, -1)


def _type(name: str, il: int) -> QT:
    """llama-quantize's Q4_K_M choices for this shape: Q6_K for attn_v / ffn_down of the first
    and last eighth and every third layer between (use_more_bits), and for output; else Q4_K."""
    more = il < N_LAYER // 8 or il >= 7 * N_LAYER // 8 or (il - N_LAYER // 8) % 3 == 2
    return QT.Q6_K if name in ("attn_v", "ffn_down") and more else QT.Q4_K


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.home() / ".cache" / "llamacli-bench" / "llama3-8b-q4km.gguf"
    out.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    w = GGUFWriter(str(out), "llama")
    w.add_name("llama3-8b-shaped-random")
    w.add_context_length(8192)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_file_type(15)  # MOSTLY_Q4_K_M
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<t{i}>".encode() for i in range(N_VOCAB)])
    w.add_token_scores([0.0] * N_VOCAB)
    w.add_token_types([1] * N_VOCAB)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_tensor("token_embd.weight", _raw(rng, QT.Q4_K, N_VOCAB, N_EMBD), raw_dtype=QT.Q4_K)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor("output.weight", _raw(rng, QT.Q6_K, N_VOCAB, N_EMBD), raw_dtype=QT.Q6_K)
    kv = N_EMBD // N_HEAD * N_HEAD_KV
    for il in range(N_LAYER):
        p = f"blk.{il}."
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for name, rows, cols in (("attn_q", N_EMBD, N_EMBD), ("attn_k", kv, N_EMBD), ("attn_v", kv, N_EMBD),
                                 ("attn_output", N_EMBD, N_EMBD), ("ffn_gate", N_FF, N_EMBD),
                                 ("ffn_up", N_FF, N_EMBD), ("ffn_down", N_EMBD, N_FF)):
            qt = _type(name, il)
            w.add_tensor(p + name + ".weight", _raw(rng, qt, rows, cols), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=True)
    w.close()
    print(out, out.stat().st_size / 1e9, "GB")


if __name__ == "__main__":
    main()
