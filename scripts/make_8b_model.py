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
from random_gguf import LlamaShape, TensorSpec, llama_metadata, llama_tensors, q4_k_m_type, write_random_gguf

SHAPE = LlamaShape(n_vocab=128256, n_embd=4096, n_layer=32, n_head=32, n_head_kv=8, n_ff=14336)


def tensors() -> list[TensorSpec]:
    return llama_tensors(SHAPE, lambda name, il: q4_k_m_type(name, il, SHAPE.n_layer))


def metadata(w: GGUFWriter) -> None:
    llama_metadata(w, SHAPE, "llama3-8b-shaped-random", 8192, file_type=15)  # MOSTLY_Q4_K_M


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.home() / ".cache" / "llamacli-bench" / "llama3-8b-q4km.gguf"
    write_random_gguf(out, "llama", metadata, tensors())


if __name__ == "__main__":
    main()
