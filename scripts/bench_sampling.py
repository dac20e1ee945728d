"""Time per sample() of the sampler chain on a 262k-token logits vector (Gemma 3's vocabulary).

    python scripts/bench_sampling.py [--n-vocab 262144] [--repeat 200]

Each configuration runs the full Sampler (copy of the logits, chain, draw, accept) on
model-like logits (a few strong tokens over a long Gaussian tail) and prints the median and
the 90th percentile in milliseconds. With llama-cpp-python installed, also times llama.cpp's
equivalent chain (common_sampler_init's order) over the same logits for comparison.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llamacli.core.sampling import Sampler, SamplingParams

CONFIGS: dict[str, dict[str, object]] = {
    "default": {},
    "greedy (temp 0)": {"temperature": 0.0},
    "penalties": {
        "repeat_penalty": 1.1,
        "frequency_penalty": 0.1,
        "presence_penalty": 0.1,
    },
    "dry (no breakers)": {"dry_multiplier": 0.8, "dry_sequence_breakers": []},
    "top_k 0, top_p 0.95": {"top_k": 0},
    "top_k 0, top_p 1, min_p": {"top_k": 0, "top_p": 1.0},
    "top_n_sigma 1": {"top_n_sigma": 1.0},
    "typical 0.9": {"typical_p": 0.9},
    "xtc": {"xtc_probability": 0.5, "xtc_threshold": 0.1},
    "mirostat 2": {"mirostat": 2},
    "mirostat 1": {"mirostat": 1},
}


def model_like_logits(n: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal(n).astype(np.float32) * 2.0
    x[rng.choice(n, 20, replace=False)] += rng.uniform(6, 14, 20).astype(np.float32)
    return x


def bench(params: SamplingParams, logits: list[np.ndarray], repeat: int) -> list[float]:
    s = Sampler(params, n_vocab=logits[0].shape[0])
    s.accept_prompt(list(range(200)))
    times = []
    for i in range(repeat):
        lg = logits[i % len(logits)]
        t0 = time.perf_counter()
        s.accept(s.sample(lg))
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def bench_llama_cpp(logits: list[np.ndarray], repeat: int) -> list[float] | None:
    """llama.cpp's default chain (top-k 40, top-p 0.95, min-p 0.05, temp 0.8, dist), the
    candidate array filled from the logits inside the timing, as common_sampler does."""
    try:
        import ctypes

        import llama_cpp as L
    except ImportError:
        return None
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    for smpl in (
        L.llama_sampler_init_top_k(40),
        L.llama_sampler_init_top_p(0.95, 0),
        L.llama_sampler_init_min_p(0.05, 0),
        L.llama_sampler_init_temp_ext(0.8, 0.0, 1.0),
        L.llama_sampler_init_dist(1),
    ):
        L.llama_sampler_chain_add(chain, smpl)
    n = logits[0].shape[0]
    buf = np.zeros(n, dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
    ptr = ctypes.cast(buf.ctypes.data, ctypes.POINTER(L.llama_token_data))
    ids = np.arange(n, dtype=np.int32)
    times = []
    for i in range(repeat):
        t0 = time.perf_counter()
        buf["id"] = ids
        buf["logit"] = logits[i % len(logits)]
        cur = L.llama_token_data_array(data=ptr, size=n, selected=-1, sorted=False)
        L.llama_sampler_apply(chain, ctypes.byref(cur))
        times.append((time.perf_counter() - t0) * 1e3)
    L.llama_sampler_free(chain)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-vocab", type=int, default=262144)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    logits = [model_like_logits(args.n_vocab, rng) for _ in range(8)]
    print(
        f"n_vocab {args.n_vocab}, {args.repeat} samples each: median / p90 ms per sample()"
    )
    for name, opts in CONFIGS.items():
        t = bench(SamplingParams(seed=1, **opts), logits, args.repeat)  # type: ignore[arg-type]
        q = statistics.quantiles(t, n=10)
        print(f"  {name:26s} {statistics.median(t):7.3f} {q[-1]:7.3f}")
    ref = bench_llama_cpp(logits, args.repeat)
    if ref is not None:
        q = statistics.quantiles(ref, n=10)
        print(
            f"  {'llama.cpp default (C++)':26s} {statistics.median(ref):7.3f} {q[-1]:7.3f}"
        )


if __name__ == "__main__":
    main()
