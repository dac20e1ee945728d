"""Truncation and temperature samplers, each as llama.cpp's src/llama-sampler.cpp does it:
top-k, top-p, min-p, locally typical, temperature (plain and dynamic), top-n-sigma, XTC.

Parameters are held as float32, as llama.cpp's structs hold them, so that comparisons such as
`cum_sum >= p` round the same way.
"""

from __future__ import annotations

import numpy as np
from llamacli.core.sampling.candidates import (
    F32,
    Candidates,
    logf,
    sum_f32,
    top_indices,
)
from llamacli.core.sampling.rng import Mt19937
from llamacli.core.sampling.step import Stateless

_NEG_INF = F32(-np.inf)
_FLT_MAX = F32(np.finfo(np.float32).max)


def _first_true(mask: np.ndarray) -> int:
    """Index of the first True, or -1."""
    i = int(np.argmax(mask)) if mask.shape[0] else 0
    return i if mask.shape[0] and mask[i] else -1


def apply_temperature(c: Candidates, temp: np.float32) -> None:
    """llama_sampler_temp_impl: divide logits by temp; temp <= 0 keeps only the first highest
    logit (the others become -inf, the list keeps its length)."""
    if len(c) == 0:
        return
    if temp <= 0:
        i = int(np.argmax(c.logits))
        keep = c.logits[i]
        c.logits = np.full(len(c), _NEG_INF, dtype=F32)
        c.logits[i] = keep
        return
    c.logits = c.logits / temp


class TopK(Stateless):
    """Keep the k highest logits, sorted (k <= 0: off)."""

    def __init__(self, k: int) -> None:
        self.k = int(k)

    def apply(self, c: Candidates) -> None:
        if self.k <= 0:
            return
        k = min(self.k, len(c))
        if c.sorted:
            c.truncate(k)
        else:
            c.partial_sort(k)


class TopP(Stateless):
    """Nucleus: the shortest head of the sorted list whose probability reaches p, at least
    min_keep tokens (p >= 1: off)."""

    def __init__(self, p: float, min_keep: int = 0) -> None:
        self.p = F32(p)
        self.min_keep = int(min_keep)

    def _cut(self, probs: np.ndarray) -> int:
        """1 + the first index where the float32 running sum reaches p with min_keep kept."""
        cum = np.cumsum(probs, dtype=F32)
        ok = (cum >= self.p) & (np.arange(1, probs.shape[0] + 1) >= self.min_keep)
        i = _first_true(ok)
        return -1 if i < 0 else i + 1

    def apply(self, c: Candidates) -> None:
        if self.p >= 1:
            return
        c.softmax(do_sort=False)
        n = len(c)
        if c.sorted:
            last = self._cut(c.p)
            c.truncate(n if last < 0 else last)
            return
        if n > 1024:
            # llama.cpp tries the top 256, then sorts everything; growing the sorted head
            # step by step gives the same cut without sorting the whole vocabulary
            k = min(256, n)
            while True:
                head = top_indices(c.logits, k)
                last = self._cut(c.p[head])
                if last >= 0 or k >= n:
                    break
                k = min(n, k * 16)
            c.take(head[: n if last < 0 else last], sorted=True)
            return
        c.partial_sort(n)
        last = self._cut(c.p)
        c.truncate(n if last < 0 else last)


class MinP(Stateless):
    """Drop tokens whose probability is below p times the top one's (p <= 0: off)."""

    def __init__(self, p: float, min_keep: int = 0) -> None:
        self.p = F32(p)
        self.min_keep = int(min_keep)

    def apply(self, c: Candidates) -> None:
        if self.p <= 0 or len(c) == 0:
            return
        log_p = logf(np.array([self.p]))[0]
        if not c.sorted:
            max_logit = max(F32(c.logits.max()), -_FLT_MAX)
            keep = np.flatnonzero(c.logits >= F32(max_logit + log_p))
            if keep.shape[0] > 0 and keep.shape[0] >= self.min_keep:
                if keep.shape[0] < len(c):
                    c.take(keep, sorted=False)
                return
            c.partial_sort(len(c))
        min_logit = F32(c.logits[0] + log_p)
        start = max(1, self.min_keep)
        n = len(c)
        if start >= n:
            return
        j = _first_true(c.logits[start:] < min_logit)
        c.truncate(n if j < 0 else start + j)


class Typical(Stateless):
    """Locally typical sampling (p >= 1: off)."""

    def __init__(self, p: float, min_keep: int = 0) -> None:
        self.p = F32(p)
        self.min_keep = int(min_keep)

    def apply(self, c: Candidates) -> None:
        if self.p >= 1:
            return
        c.softmax(do_sort=True)
        with np.errstate(invalid="ignore"):
            log_p = logf(c.p)
            entropy = sum_f32(-c.p * log_p)
            shifted = np.abs(-log_p - entropy)
        order = np.argsort(shifted, kind="stable")
        cum = np.cumsum(c.p[order], dtype=F32)
        idx = np.arange(cum.shape[0])
        ok = cum > self.p
        if self.min_keep > 0:
            ok &= idx >= self.min_keep - 1
        i = _first_true(ok)
        last = cum.shape[0] if i < 0 else i + 1
        c.take(order[:last], sorted=False)


class Temperature(Stateless):
    """Plain temperature (llama_sampler_init_temp), used before mirostat."""

    def __init__(self, temp: float) -> None:
        self.temp = F32(temp)

    def apply(self, c: Candidates) -> None:
        if self.temp == 1:
            return
        apply_temperature(c, self.temp)


class TemperatureExt(Stateless):
    """Temperature with llama.cpp's entropy-based dynamic range (dynatemp_range > 0)."""

    def __init__(self, temp: float, delta: float = 0.0, exponent: float = 1.0) -> None:
        self.temp = F32(temp)
        self.delta = F32(delta)
        self.exponent = F32(exponent)

    def apply(self, c: Candidates) -> None:
        if self.delta <= 0:
            if self.temp != 1:
                apply_temperature(c, self.temp)
            return
        min_temp = max(F32(0), F32(self.temp - self.delta))
        max_temp = F32(self.temp + self.delta)
        n = len(c)
        if n <= 1:
            return
        max_entropy = -logf(np.array([F32(1) / F32(n)]))[0]
        c.softmax(do_sort=True)
        pos = c.p[c.p > 0]
        entropy = sum_f32(-(pos * logf(pos)))
        norm = F32(entropy / max_entropy)
        powed = F32(np.power(np.float64(norm), np.float64(self.exponent)))
        dyn = F32(min_temp + F32((max_temp - min_temp) * powed))
        apply_temperature(c, dyn)
        with np.errstate(under="ignore"):
            e = np.exp(c.logits.astype(np.float64) - np.float64(c.logits[0]))
        total = float(np.cumsum(e)[-1])
        c.p = (e.astype(F32).astype(np.float64) / total).astype(F32)


class TopNSigma(Stateless):
    """Keep logits within n standard deviations of the highest (n <= 0: off). -inf logits
    are masked, not removed, as llama.cpp does."""

    def __init__(self, n: float) -> None:
        self.n = F32(n)

    def apply(self, c: Candidates) -> None:
        if self.n <= 0 or len(c) <= 1:
            return
        lg = c.logits
        valid = lg[lg != _NEG_INF]
        count = valid.shape[0]
        top = max(F32(lg[0]), F32(valid.max())) if count else F32(lg[0])
        mean = F32(sum_f32(valid) / F32(count)) if count else F32(0)
        dev = (valid - mean).astype(np.float64)
        acc = sum_f32((dev * dev).astype(F32))
        std = F32(np.sqrt(np.float64(F32(acc / F32(count))))) if count else F32(0)
        cut = F32(top - F32(self.n * std))
        c.logits = np.where(lg < cut, _NEG_INF, lg).astype(F32)


class Xtc:
    """Exclude Top Choices: with chance `probability`, drop every token at or above
    `threshold` except the least likely of them (threshold > 0.5 or probability <= 0: off)."""

    def __init__(
        self, probability: float, threshold: float, min_keep: int, seed: int
    ) -> None:
        self.probability = F32(probability)
        self.threshold = F32(threshold)
        self.min_keep = int(min_keep)
        self.seed = seed
        self.rng = Mt19937(seed)

    def apply(self, c: Candidates) -> None:
        if self.probability <= 0 or self.threshold > F32(0.5) or len(c) < 2:
            return
        if F32(self.rng.uniform_float()) > self.probability:
            return
        c.softmax(do_sort=True)
        above = c.p >= self.threshold
        j = _first_true(~above)
        n_above = len(c) if j < 0 else j
        pos_last = max(n_above - 1, 0)
        if len(c) - pos_last >= self.min_keep and pos_last > 0:
            c.drop_front(pos_last)

    def accept(self, token: int) -> None:
        return None

    def reset(self) -> None:
        self.rng.seed(self.seed)
