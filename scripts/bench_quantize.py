"""Dev-only: wall time of `llama quantize` (in-process) beside llama.cpp's quantizer
(llama-cpp-python's `llama_model_quantize`) on the same input, and whether the files are equal.

    python scripts/bench_quantize.py MODEL.gguf Q8_0,Q4_K_M [--threads 2] [--repeat 2]

Quantized inputs are requantized (--allow-requantize). Best of --repeat runs each.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llamacli.core.quantize import QuantizeOptions, parse_file_type, quantize_model  # noqa: E402
from scripts.quantize_fixtures import llama_quantize  # noqa: E402
from tests.test_quantize_inputs import sha256_file  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("types", help="comma-separated, e.g. Q8_0,Q4_K_M")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=Path(args.model).parent) as d:
        ref, ours = Path(d) / "ref.gguf", Path(d) / "ours.gguf"
        for name in args.types.split(","):
            ft = parse_file_type(name)
            opts = QuantizeOptions(ft, allow_requantize=True, n_threads=args.threads)
            t_ref = t_ours = float("inf")
            for _ in range(args.repeat):
                t_ref = min(t_ref, llama_quantize(Path(args.model), ref, ft.name, {"allow_requantize": True}, args.threads))
                t0 = time.perf_counter()
                quantize_model(args.model, str(ours), opts)
                t_ours = min(t_ours, time.perf_counter() - t0)
            same = sha256_file(ref) == sha256_file(ours)
            print(f"{ft.name:7} llama.cpp {t_ref:6.2f} s   ours {t_ours:6.2f} s   x{t_ours / t_ref:4.2f}   identical={same}", flush=True)


if __name__ == "__main__":
    main()
