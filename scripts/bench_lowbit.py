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
from random_gguf import QT, LlamaShape, TensorSpec, llama_metadata, llama_tensors, write_random_gguf  # noqa: E402

from tests.lowbit_blocks import LOW_BIT_TYPES  # noqa: E402

SHAPE = LlamaShape(n_vocab=32000, n_embd=2048, n_layer=4, n_head=32, n_head_kv=8, n_ff=8192)
CACHE = Path.home() / ".cache" / "llamacli-bench"


def tensors(qt: QT) -> list[TensorSpec]:
    return llama_tensors(SHAPE, lambda name, il: qt)


def metadata(w: GGUFWriter) -> None:
    llama_metadata(w, SHAPE, "llama-1b-shaped-random", 4096)


def model_for(qt: QT) -> Path:
    path = CACHE / f"llama-1b-l{SHAPE.n_layer}-{qt.name.lower()}.gguf"
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
