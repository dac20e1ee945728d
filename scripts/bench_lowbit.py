"""Decode and prompt speed of each low-bit weight type, ours beside llama.cpp's, in one run.

    python scripts/bench_lowbit.py [--types MXFP4,IQ2_XXS,...] [-n 8] [-p 64] [--reps 1]

Per type, a Llama-shaped random model (Llama-3.2-1B's layer shapes, 4 layers, a 32000-token
vocabulary; every layer matrix in the type, token_embd Q4_K and output Q6_K as llama-quantize's
low-bit mixes keep them) is written once to ~/.cache/llamacli-bench/, then timed as
scripts/bench_cpu_time.py times a model: CPU time on one thread, ours then llama.cpp's
(llama-cpp-python in a child process, `PYTHONPATH` chooses its build). tg-nologits is the layers
alone (the decode step without the vocabulary projection), where the weight type is all the work.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_cpu_time import ours  # noqa: E402
from gguf import GGUFWriter  # noqa: E402
from random_gguf import QT, TensorSpec, add_dummy_vocab, write_random_gguf  # noqa: E402

from tests.lowbit_blocks import LOW_BIT_TYPES  # noqa: E402

N_VOCAB, N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, N_FF = 32000, 2048, 4, 32, 8, 8192
CACHE = Path.home() / ".cache" / "llamacli-bench"


def tensors(qt: QT) -> list[TensorSpec]:
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
            ts.append(TensorSpec(p + name + ".weight", (rows, cols), qt))
    return ts


def metadata(w: GGUFWriter) -> None:
    w.add_name("llama-1b-shaped-random")
    w.add_context_length(4096)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    add_dummy_vocab(w, N_VOCAB)


def model_for(qt: QT) -> Path:
    path = CACHE / f"llama-1b-l{N_LAYER}-{qt.name.lower()}.gguf"
    if not path.exists():
        write_random_gguf(path, "llama", metadata, tensors(qt))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--types", default=",".join(t.name for t in (QT.Q4_K, *LOW_BIT_TYPES)),
                    help="comma-separated weight types (default: Q4_K for comparison, then the low-bit types)")
    ap.add_argument("-n", type=int, default=8, help="decode steps per measure")
    ap.add_argument("-p", type=int, default=64, help="prompt tokens of the pp measure")
    ap.add_argument("--reps", type=int, default=1)
    a = ap.parse_args()
    print(f"ms CPU per token, 1 thread   {'tg-nologits':>25s} {'tg':>25s} {'pp':>25s}")
    print(f"{'type':28s}" + " ".join(f"{'ours':>8s} {'llama.cpp':>9s} {'ratio':>6s}" for _ in range(3)))
    for name in a.types.split(","):
        qt = QT[name.strip().upper()]
        path = str(model_for(qt))
        mine = ours(path, a.n, a.p, a.reps)
        cmd = [sys.executable, str(ROOT / "scripts" / "bench_cpu_time.py"), "--child", "-m", path, "-n", str(a.n),
               "-p", str(a.p), "--reps", str(a.reps)]
        run = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), check=False)
        ref = json.loads(run.stdout.strip().splitlines()[-1]) if run.returncode == 0 and run.stdout.strip() else {}
        cells = []
        for k in ("tg-nologits", "tg", "pp"):
            r = ref.get(k, float("nan"))
            cells.append(f"{mine[k]:8.1f} {r:9.1f} {r / mine[k]:5.2f}x")
        print(f"{qt.name:28s}" + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
