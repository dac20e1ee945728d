"""Dev-only: wall time of `llama quantize` (in-process) beside llama.cpp's quantizer
(llama-cpp-python's `llama_model_quantize`) on the same input, and whether the files are equal.

    python scripts/bench_quantize.py MODEL.gguf Q8_0,Q4_K_M [--threads 2] [--repeat 2]
    python scripts/bench_quantize.py MODEL.gguf IQ2_XS,IQ3_XXS --imatrix imatrix.gguf \
        [--llama-quantize /work/ref/build512/bin/llama-quantize]

Quantized inputs are requantized (--allow-requantize). Best of --repeat runs each, one after the
other. With --imatrix the reference is the llama-quantize binary (the Python binding takes no
importance matrix), its wall time including its process start and imatrix load.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llamacli.core.quantize import QuantizeOptions, parse_file_type, quantize_model  # noqa: E402
from llamacli.core.quantize.importance import load_importance  # noqa: E402
from scripts.quantize_fixtures import llama_quantize  # noqa: E402
from tests.test_quantize_inputs import sha256_file  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("types", help="comma-separated, e.g. Q8_0,Q4_K_M")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--imatrix", help="importance matrix for both quantizers")
    ap.add_argument("--llama-quantize", default="/work/ref/build512/bin/llama-quantize")
    args = ap.parse_args()
    importance = load_importance(args.imatrix) if args.imatrix else None

    def reference(out: Path, type_name: str) -> float:
        if importance is None:
            return llama_quantize(Path(args.model), out, type_name, {"allow_requantize": True}, args.threads)
        t0 = time.perf_counter()
        subprocess.run([args.llama_quantize, "--allow-requantize", "--imatrix", args.imatrix, args.model, str(out),
                        type_name, str(args.threads)], check=True, capture_output=True)
        return time.perf_counter() - t0

    with tempfile.TemporaryDirectory(dir=Path(args.model).parent) as d:
        ref, ours = Path(d) / "ref.gguf", Path(d) / "ours.gguf"
        for name in args.types.split(","):
            ft = parse_file_type(name)
            opts = QuantizeOptions(ft, allow_requantize=True, n_threads=args.threads, importance=importance)
            t_ref = t_ours = float("inf")
            for _ in range(args.repeat):
                t_ref = min(t_ref, reference(ref, ft.name))
                t0 = time.perf_counter()
                quantize_model(args.model, str(ours), opts)
                t_ours = min(t_ours, time.perf_counter() - t0)
            same = sha256_file(ref) == sha256_file(ours)
            print(f"{ft.name:7} llama.cpp {t_ref:6.2f} s   ours {t_ours:6.2f} s   x{t_ours / t_ref:4.2f}   identical={same}", flush=True)


if __name__ == "__main__":
    main()
