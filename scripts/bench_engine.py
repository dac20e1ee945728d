"""Engine throughput, in-process, on the demo model (or -m MODEL):

1. aggregate generated tokens/s for N = 1, 2, 4, 8, 16 concurrent greedy tasks;
2. time to first token of a short prompt submitted while 8 long prompts are prefilling
   (chunked prefill must not make it wait for their whole prompts).

    python scripts/bench_engine.py [-m MODEL] [--tokens 32] [--batch-invariant]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llamacli.core.runtime.engine import Engine, EngineConfig  # noqa: E402
from llamacli.core.sampling import SamplingParams  # noqa: E402
from llamacli.core.runtime.tasks import Final, Partial, Task, TaskParams  # noqa: E402
from llamacli.loading import open_model  # noqa: E402

PROMPTS = [
    "The history of the printing press", "def quicksort(xs):", "Les fleurs du jardin", "Water boils at",
    "Once upon a time in a small village", "The three laws of motion are", "import json\n", "My favourite recipe",
]


def aggregate(rt, n: int, n_tokens: int) -> float:  # type: ignore[no-untyped-def]
    prompts = [rt.tokenizer.tokenize(PROMPTS[i % len(PROMPTS)] + f" ({i})", True, True) for i in range(n)]
    params = TaskParams(n_predict=n_tokens, ignore_eos=True, cache_prompt=False, sampling=SamplingParams(temperature=0))
    with Engine(rt.model, rt.tokenizer, EngineConfig(n_ctx=n * 256, n_parallel=n, n_batch=512)) as eng:
        eng.run(Task(prompts[0], TaskParams(n_predict=2, sampling=SamplingParams(temperature=0))))  # warm-up
        t0 = time.perf_counter()
        tasks = [eng.submit(Task(p, params)) for p in prompts]
        n_gen = 0
        for t in tasks:
            for r in t.results:
                if isinstance(r, Final):
                    n_gen += len(r.tokens)
        return n_gen / (time.perf_counter() - t0)


def ttft_during_prefill(rt, long_tokens: int = 480) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(time to first token of a short prompt while 8 long prompts prefill, time for one long prefill alone)."""
    long_text = " ".join(["The quick brown fox jumps over the lazy dog."] * 60)
    long_ids = rt.tokenizer.tokenize(long_text, True, True)[:long_tokens]
    short = rt.tokenizer.tokenize("Hello", True, True)
    p_long = TaskParams(n_predict=1, cache_prompt=False, sampling=SamplingParams(temperature=0))
    with Engine(rt.model, rt.tokenizer, EngineConfig(n_ctx=9 * 512, n_parallel=9, n_batch=512)) as eng:
        t0 = time.perf_counter()
        eng.run(Task(long_ids, p_long))
        one_prefill = time.perf_counter() - t0
        longs = [eng.submit(Task(long_ids[:-i - 1] + [5], p_long)) for i in range(8)]
        time.sleep(0.05)
        t0 = time.perf_counter()
        task = eng.submit(Task(short, TaskParams(n_predict=4, sampling=SamplingParams(temperature=0))))
        first = None
        for r in task.results:
            if isinstance(r, Partial) and r.tokens and first is None:
                first = time.perf_counter() - t0
        for t in longs:
            for _ in t.results:
                pass
    return float(first or 0.0), one_prefill


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--batch-invariant", action="store_true")
    a = ap.parse_args()
    rt = open_model(a.model, batch_invariant=a.batch_invariant)
    print(f"load average {os.getloadavg()[0]:.2f}; batch-invariant {a.batch_invariant}")
    base = None
    for n in (1, 2, 4, 8, 16):
        tps = aggregate(rt, n, a.tokens)
        base = base or tps
        print(f"{n:2d} concurrent tasks: {tps:7.1f} generated tok/s  ({tps / base:.2f}x one)")
    ttft, prefill = ttft_during_prefill(rt)
    print(f"first token of a short prompt while 8 x 480-token prompts prefill: {ttft:.2f} s "
          f"(one 480-token prefill alone: {prefill:.2f} s; all 8: ~{8 * prefill:.1f} s)")


if __name__ == "__main__":
    main()
