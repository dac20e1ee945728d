"""One quantized matmul at a time, as CPU time on one thread: the kernels' speed on given shapes.

    python scripts/bench_matmul.py [--types Q4_K,Q6_K] [--shapes 4096x4096,...] [--rows 1,32] [--reps 5]

Each case is an n_out x n_in matrix of random blocks (codes and scales random, d a small fp16
so that no sum overflows), stored and packed (core/model/kernels/qmm/packed.py), times an
activation of R rows: best of `--reps` of the kernel alone (the activation quantized once),
ms and G MAC/s. The default shapes are Llama-3-8B's (attn_q/o, ffn_gate/up, ffn_down, output);
NUMBA_CPU_NAME / NUMBA_CPU_FEATURES choose the code path as for the other benchmarks.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType  # noqa: E402

QT = GGMLQuantizationType
SHAPES = "4096x4096,14336x4096,4096x14336,128256x4096"
D_AT = {QT.Q4_K: (0, 2), QT.Q6_K: (208,), QT.Q8_0: (0,), QT.Q5_0: (0,), QT.Q4_0: (0,)}  # fp16 scales' byte offsets


def random_matrix(qtype: QT, n_out: int, n_in: int, seed: int = 0):  # type: ignore[no-untyped-def]
    from llamacli.core.model.kernels.qmm import QuantMatrix

    qk, size = GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(n_out, n_in // qk, size), dtype=np.uint8)
    for at in D_AT[qtype]:
        blocks[:, :, at : at + 2] = np.array([0.002], dtype=np.float16).view(np.uint8)
    return QuantMatrix(blocks.reshape(n_out, -1), qtype, n_in)


def cpu_ms(fn, reps: int) -> float:  # type: ignore[no-untyped-def]
    fn()
    best = float("inf")
    for _ in range(reps):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default="Q4_K,Q6_K")
    ap.add_argument("--shapes", default=SHAPES, help="n_out x n_in, comma-separated")
    ap.add_argument("--rows", default="1")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--stored", action="store_true", help="also the stored (unpacked) matrix")
    ap.add_argument("--distinct", type=int, default=1, help="matrices of each shape, taken in turn (more than the last-level cache: memory-bound figures)")
    a = ap.parse_args()
    from llamacli.core.model.kernels.qmm import matmul, prepare, threads
    from llamacli.core.model.kernels.qmm.matrix import pack_matrix

    threads.set_threads(1)
    for name in a.types.split(","):
        qt = QT[name]
        for shape in a.shapes.split(","):
            n_out, n_in = (int(v) for v in shape.split("x"))
            forms = []
            if a.stored:
                forms.append(("stored", [random_matrix(qt, n_out, n_in, s) for s in range(a.distinct)]))
            ps = [random_matrix(qt, n_out, n_in, s) for s in range(a.distinct)]
            if all(pack_matrix(p) for p in ps):
                forms.append(("packed", ps))
            for rows in (int(r) for r in a.rows.split(",")):
                x = np.random.default_rng(1).standard_normal((rows, n_in)).astype(np.float32)
                xa = prepare(x, qt)
                for form, mms in forms:
                    ms = cpu_ms(lambda: [matmul(xa, mm) for mm in mms], a.reps) / len(mms)
                    print(f"{name} {shape} {form} rows {rows}: {ms:.3f} ms, {rows * n_out * n_in / ms / 1e6:.1f} G MAC/s", flush=True)
            del forms


if __name__ == "__main__":
    main()
