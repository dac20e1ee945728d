"""The last step of a chain, which picks the token: dist (a draw from the softmax), mirostat
v1 and v2 (which track the surprise `mu`) and adaptive-p. Each owns a std::mt19937 seeded as
llama.cpp seeds it, so a given seed picks the same token as llama.cpp."""

from __future__ import annotations

import numpy as np
from llamacli.core.sampling.candidates import F32, Candidates, expf, logf, top_indices
from llamacli.core.sampling.filters import TopK
from llamacli.core.sampling.rng import Mt19937


def _log2f(x: np.float32) -> np.float32:
    with np.errstate(divide="ignore"):
        return F32(np.log2(np.float64(x)))


class Dist:
    """llama_sampler_dist: softmax in float32, one double draw, first index whose running
    (double) sum reaches draw * total; probabilities normalised on the way."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = Mt19937(seed)

    def apply(self, c: Candidates) -> None:
        n = len(c)
        if n == 0:
            c.selected = -1
            return
        c.selected = 0
        if n == 1:
            self.rng.uniform_double()
            c.p = np.ones(1, dtype=F32)
            return
        e = expf(c.logits - c.max_logit())
        cum = np.cumsum(e, dtype=np.float64)
        total = float(cum[-1])
        target = total * self.rng.uniform_double()
        i = int(np.searchsorted(cum, target, side="left"))
        c.selected = min(i, n - 1)
        c.p = (e.astype(np.float64) / total).astype(F32)

    def accept(self, token: int) -> None:
        return None

    def reset(self) -> None:
        self.rng.seed(self.seed)


class Mirostat:
    """Mirostat 1.0: estimate the Zipf exponent from the top m tokens, keep the top k that
    matches the target surprise, draw, then move mu toward tau."""

    def __init__(
        self, n_vocab: int, seed: int, tau: float, eta: float, m: int = 100
    ) -> None:
        self.n_vocab = int(n_vocab)
        self.seed = seed
        self.tau = F32(tau)
        self.eta = F32(eta)
        self.m = int(m)
        self.mu = F32(2) * self.tau
        self.rng = Mt19937(seed)

    def apply(self, c: Candidates) -> None:
        c.softmax(do_sort=True)
        n_est = min(self.m - 1, len(c) - 1)
        if n_est > 0:
            i = np.arange(n_est, dtype=np.float64)
            t = logf((i + 2).astype(F32) / (i + 1).astype(F32))
            with np.errstate(divide="ignore", invalid="ignore"):
                b = logf(c.p[:n_est] / c.p[1 : n_est + 1])
            sum_tb = np.cumsum(t * b, dtype=F32)[-1]
            sum_tt = np.cumsum(t * t, dtype=F32)[-1]
            with np.errstate(divide="ignore", invalid="ignore"):
                s_hat = F32(sum_tb / sum_tt)
        else:
            s_hat = F32(np.nan)  # 0 / 0, as in llama.cpp
        eps = F32(s_hat - F32(1))
        with np.errstate(all="ignore"):
            num = F32(eps * F32(np.power(2.0, np.float64(self.mu))))
            den = F32(
                F32(1) - F32(np.power(np.float64(F32(self.n_vocab)), -np.float64(eps)))
            )
            k = F32(
                np.power(np.float64(F32(num / den)), np.float64(F32(F32(1) / s_hat)))
            )
        k_int = int(k) if np.isfinite(k) and abs(k) < 2**31 else -(2**31)
        TopK(max(k_int, 1)).apply(c)
        c.softmax(do_sort=True)
        idx = self.rng.discrete(c.p)
        c.selected = idx
        surprise = -_log2f(c.p[idx])
        self.mu = F32(self.mu - F32(self.eta * F32(surprise - self.tau)))

    def accept(self, token: int) -> None:
        return None

    def reset(self) -> None:
        self.mu = F32(2) * self.tau
        self.rng.seed(self.seed)


class MirostatV2:
    """Mirostat 2.0: drop tokens more surprising than mu, draw, then move mu toward tau."""

    def __init__(self, seed: int, tau: float, eta: float) -> None:
        self.seed = seed
        self.tau = F32(tau)
        self.eta = F32(eta)
        self.mu = F32(2) * self.tau
        self.rng = Mt19937(seed)

    def apply(self, c: Candidates) -> None:
        n = len(c)
        if n > 4096:
            # avoid sorting the whole vocabulary: the surprising tail is cut anyway
            c.softmax(do_sort=False)
            keep = np.flatnonzero(~(-_log2_arr(c.p) > self.mu))
            head = top_indices(c.logits, max(int(keep.shape[0]), 1))
            c.take(head, sorted=True)
        else:
            c.softmax(do_sort=True)
            cut = -_log2_arr(c.p) > self.mu
            j = int(np.argmax(cut)) if cut.any() else n
            c.truncate(max(j, 1))
        c.softmax(do_sort=True)
        idx = self.rng.discrete(c.p)
        c.selected = idx
        surprise = -_log2f(c.p[idx])
        self.mu = F32(self.mu - F32(self.eta * F32(surprise - self.tau)))

    def accept(self, token: int) -> None:
        return None

    def reset(self) -> None:
        self.mu = F32(2) * self.tau
        self.rng.seed(self.seed)


def _log2_arr(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log2(p.astype(np.float64)).astype(F32)


class AdaptiveP:
    """adaptive-p: reshape the distribution toward tokens near a target probability, the
    target moving with an exponential average of the chosen tokens' original probabilities
    (target < 0: a plain draw from the distribution)."""

    _WIDTH = F32(0.3)
    _PEAK = F32(5.0)
    _SHARPNESS = F32(10.0)

    def __init__(self, target: float, decay: float, seed: int) -> None:
        self.target = F32(target)
        self.decay = F32(min(max(decay, 0.0), 0.99))
        self.seed = seed
        self.rng = Mt19937(seed)
        self.reset()

    def reset(self) -> None:
        self.weighted_sum = F32(self.target / F32(F32(1) - self.decay))
        self.total_weight = F32(F32(1) / F32(F32(1) - self.decay))
        self.original_probs = np.empty(0, dtype=F32)
        self.pending_id = -1
        self.pending_idx = -1
        self.rng.seed(self.seed)

    def apply(self, c: Candidates) -> None:
        c.softmax(do_sort=False)
        if self.target < 0:
            c.selected = self.rng.discrete(c.p)
            return
        self.original_probs = c.p.copy()
        target = F32(min(max(self.target, F32(0)), F32(1)))
        if self.total_weight == 0:
            adapted = target
        else:
            adapted = F32(F32(2) * target - F32(self.weighted_sum / self.total_weight))
        adapted = F32(min(max(adapted, F32(0)), F32(1)))
        inv_width = F32(F32(1) / self._WIDTH)
        dist = np.abs((c.p - adapted) * inv_width).astype(F32)
        shaped = (self._PEAK - self._SHARPNESS * dist * dist / (F32(1) + dist)).astype(
            F32
        )
        c.logits = np.where(c.logits == F32(-np.inf), c.logits, shaped).astype(F32)
        c.softmax(do_sort=False)
        idx = self.rng.discrete(c.p)
        c.selected = idx
        self.pending_id = int(c.ids[idx])
        self.pending_idx = idx

    def accept(self, token: int) -> None:
        if self.pending_id == token and self.pending_idx >= 0:
            p = self.original_probs[self.pending_idx]
            self.weighted_sum = F32(p + F32(self.decay * self.weighted_sum))
            self.total_weight = F32(F32(1) + F32(self.decay * self.total_weight))
        self.pending_id = -1
        self.pending_idx = -1
