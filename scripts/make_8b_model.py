"""Dev-only: write an 8B-shaped Llama GGUF (Llama-3-8B hyperparameters, random weights, the
Q4_K_M type mix) to measure memory and speed on a real-size model (not run in CI).

    python scripts/make_8b_model.py [OUT.gguf] [--type IQ2_XXS]
    llama bench -m OUT.gguf -p 64 -n 16 --seqs 1

The weights are random bytes with sane fp16 block scales, so the numbers are noise but every
kernel, byte and page is what a real 4.9 GB Q4_K_M file costs. The vocabulary is a dummy SPM
one of Llama-3's size (128256 tokens), enough for both llama.cpp and us to load the file.
`--type T`: every layer matrix in T instead (e.g. IQ2_XXS, MXFP4: random valid blocks,
tests/lowbit_blocks.py), token_embd Q4_K and output Q6_K as llama-quantize's low-bit mixes
keep them; the default file name then ends in the type (llama3-8b-iq2_xxs.gguf).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gguf import GGUFWriter
from random_gguf import QT, LlamaShape, TensorSpec, llama_metadata, llama_tensors, q4_k_m_type, write_random_gguf

SHAPE = LlamaShape(n_vocab=128256, n_embd=4096, n_layer=32, n_head=32, n_head_kv=8, n_ff=14336)


def tensors(qt: QT | None = None) -> list[TensorSpec]:
    """The Q4_K_M mix, or every layer matrix in qt."""
    return llama_tensors(SHAPE, lambda name, il: q4_k_m_type(name, il, SHAPE.n_layer) if qt is None else qt)


def metadata(w: GGUFWriter, qt: QT | None = None) -> None:
    # file_type 15: MOSTLY_Q4_K_M; for one type, llama.cpp reads the tensors' own types
    llama_metadata(w, SHAPE, "llama3-8b-shaped-random", 8192, file_type=15 if qt is None else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", help="output path (default: ~/.cache/llamacli-bench/llama3-8b-<type>.gguf)")
    ap.add_argument("--type", default="", help="one ggml type for every layer matrix (default: the Q4_K_M mix)")
    a = ap.parse_args()
    qt = QT.__members__[a.type.upper()] if a.type else None
    name = "llama3-8b-q4km.gguf" if qt is None else f"llama3-8b-{qt.name.lower()}.gguf"
    out = Path(a.out) if a.out else Path.home() / ".cache" / "llamacli-bench" / name
    write_random_gguf(out, "llama", lambda w: metadata(w, qt), tensors(qt))


if __name__ == "__main__":
    main()
