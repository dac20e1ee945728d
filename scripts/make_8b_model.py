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

from gguf import GGUFWriter
from random_gguf import QT, TensorSpec, add_dummy_vocab, q4_k_m_type, write_random_gguf

N_VOCAB, N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF = 128256, 4096, 32, 32, 8, 14336


def tensors() -> list[TensorSpec]:
    kv = N_EMBD // N_HEAD * N_HEAD_KV
    ts = [TensorSpec("token_embd.weight", (N_VOCAB, N_EMBD), QT.Q4_K),
          TensorSpec("output_norm.weight", (N_EMBD,), QT.F32),
          TensorSpec("output.weight", (N_VOCAB, N_EMBD), QT.Q6_K)]
    for il in range(N_LAYER):
        p = f"blk.{il}."
        ts += [TensorSpec(p + n, (N_EMBD,), QT.F32) for n in ("attn_norm.weight", "ffn_norm.weight")]
        for name, rows, cols in (("attn_q", N_EMBD, N_EMBD), ("attn_k", kv, N_EMBD), ("attn_v", kv, N_EMBD),
                                 ("attn_output", N_EMBD, N_EMBD), ("ffn_gate", N_FF, N_EMBD),
                                 ("ffn_up", N_FF, N_EMBD), ("ffn_down", N_EMBD, N_FF)):
            ts.append(TensorSpec(p + name + ".weight", (rows, cols), q4_k_m_type(name, il, N_LAYER)))
    return ts


def metadata(w: GGUFWriter) -> None:
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
    add_dummy_vocab(w, N_VOCAB)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.home() / ".cache" / "llamacli-bench" / "llama3-8b-q4km.gguf"
    write_random_gguf(out, "llama", metadata, tensors())


if __name__ == "__main__":
    main()
