"""Token sampling over a NumPy logits vector, as llama.cpp's default sampler chain:
top_k -> top_p -> min_p -> temperature -> draw (greedy argmax when temperature <= 0).

Each step is a pure function on (candidate ids, logits) so that later steps (penalties,
DRY, XTC, mirostat, ...) slot into the same chain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_SEED = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: pick a random seed


@dataclass
class SamplingParams:
    """llama.cpp's common_params_sampling defaults and names."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    min_keep: int = 1
    seed: int = DEFAULT_SEED


Candidates = tuple[np.ndarray, np.ndarray]  # (ids int64 (n,), logits float32 (n,)), sorted desc


def top_k(c: Candidates, k: int, min_keep: int = 1) -> Candidates:
    """Keep the k highest logits (k <= 0: keep all). Returns candidates sorted descending."""
    ids, lg = c
    n = lg.shape[0]
    k = n if k <= 0 else max(k, min_keep)
    k = min(k, n)
    if k < n:
        part = np.argpartition(-lg, k - 1)[:k]
        ids, lg = ids[part], lg[part]
    order = np.argsort(-lg, kind="stable")
    return ids[order], lg[order]


def _probs(lg: np.ndarray) -> np.ndarray:
    e = np.exp((lg - lg[0]).astype(np.float64))  # lg sorted descending: lg[0] is the max
    return e / e.sum()


def top_p(c: Candidates, p: float, min_keep: int = 1) -> Candidates:
    """Smallest prefix whose probability mass reaches p (p >= 1: no-op)."""
    if p >= 1.0:
        return c
    ids, lg = c
    cum = np.cumsum(_probs(lg))
    keep = int(np.searchsorted(cum, p, side="left")) + 1
    keep = max(min_keep, min(keep, lg.shape[0]))
    return ids[:keep], lg[:keep]


def min_p(c: Candidates, p: float, min_keep: int = 1) -> Candidates:
    """Drop tokens whose probability is below p times the top token's (p <= 0: no-op)."""
    if p <= 0.0:
        return c
    ids, lg = c
    # prob_i / prob_max >= p  <=>  logit_i >= logit_max + ln(p)
    keep = int(np.count_nonzero(lg >= lg[0] + np.log(p)))
    keep = max(min_keep, keep)
    return ids[:keep], lg[:keep]


class Sampler:
    """One sequence's sampler: the chain and its random state."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        seed = params.seed
        if seed == DEFAULT_SEED or seed < 0:
            seed = int(np.random.SeedSequence().entropy % (1 << 32))
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def sample(self, logits: np.ndarray) -> int:
        """Choose the next token from logits (n_vocab,)."""
        p = self.params
        if p.temperature <= 0.0:
            return int(np.argmax(logits))
        c: Candidates = (np.arange(logits.shape[0]), logits.astype(np.float32))
        c = top_k(c, p.top_k, p.min_keep)
        c = top_p(c, p.top_p, p.min_keep)
        c = min_p(c, p.min_p, p.min_keep)
        ids, lg = c
        probs = _probs(lg / np.float32(p.temperature))
        return int(ids[self.rng.choice(ids.shape[0], p=probs)])
