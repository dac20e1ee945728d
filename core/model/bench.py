"""Throughput measurements of the model forward, as llama-bench reports them.

pp: prompt processing (one batch of n tokens), tg: generation (n single-token steps),
parallel: n sequences decoding together (aggregate tokens/s). Token ids are random.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from llamacli.core.model.state.batch import Batch
from llamacli.core.model.families.base import DecoderModel


@dataclass
class BenchResult:
    test: str  # "pp512", "tg128", "parallel16", ...
    n_tokens: int
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        return self.n_tokens / self.seconds if self.seconds > 0 else 0.0


def _tokens(model: DecoderModel, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, model.args.n_vocab, size=n)


def bench_pp(model: DecoderModel, n_prompt: int = 512, reps: int = 2) -> BenchResult:
    """Best of `reps` prefills of n_prompt tokens into an empty cache, after one unmeasured
    warm-up prefill (as llama-bench warms up: first-touch page faults of the mapped weights
    and of the cache, the thread pools' start)."""
    toks = _tokens(model, n_prompt, 1)
    cache = model.new_cache(1, n_prompt)
    model.forward(Batch.single(toks), cache)
    best = float("inf")
    for _ in range(reps):
        cache.clear()
        t = time.perf_counter()
        model.forward(Batch.single(toks), cache)
        best = min(best, time.perf_counter() - t)
    return BenchResult(f"pp{n_prompt}", n_prompt, best)


def bench_tg(model: DecoderModel, n_gen: int = 128) -> BenchResult:
    """n_gen single-token decode steps from an empty cache (after one warm-up step)."""
    toks = _tokens(model, n_gen + 1, 2)
    cache = model.new_cache(1, n_gen + 1)
    model.forward(Batch.single(toks[:1]), cache)
    t = time.perf_counter()
    for i in range(1, n_gen + 1):
        model.forward(Batch(toks[i : i + 1], np.zeros(1), np.array([i]), decode=np.ones(1, bool)), cache)
    return BenchResult(f"tg{n_gen}", n_gen, time.perf_counter() - t)


def bench_parallel(model: DecoderModel, n_seq: int, n_steps: int = 32, n_prompt: int = 32) -> BenchResult:
    """n_seq sequences, each with an n_prompt-token prompt, then n_steps decode steps in
    which every sequence adds one token: one forward of n_seq tokens per step."""
    toks = _tokens(model, n_prompt + n_steps, 3)
    cache = model.new_cache(n_seq, n_prompt + n_steps)
    seqs = np.repeat(np.arange(n_seq), n_prompt)
    pos = np.tile(np.arange(n_prompt), n_seq)
    model.forward(Batch(np.tile(toks[:n_prompt], n_seq), seqs, pos), cache)
    t = time.perf_counter()
    for i in range(n_steps):
        p = n_prompt + i
        model.forward(Batch(np.full(n_seq, toks[p]), np.arange(n_seq), np.full(n_seq, p), decode=np.ones(n_seq, bool)), cache)
    return BenchResult(f"parallel{n_seq}", n_seq * n_steps, time.perf_counter() - t)
