"""Per-position statistics of a block of logits, with llama-perplexity's arithmetic.

Every function takes `logits` (n, n_vocab) float32, one row per scored position, and
`targets` (n,): the token that follows each position. The float32 steps are llama.cpp's
(tools/perplexity/perplexity.cpp: `log_softmax` in its three forms): the row maximum, the
terms `expf(l - max)` in float32 summed in float64, `log` of that sum in float64 (rounded to
float32 where llama.cpp stores it in a float). The order of the float64 sum differs (NumPy adds
pairwise, llama.cpp one by one): a 1e-16 relative difference.

The KL-divergence base file stores each row as llama.cpp's `log_softmax(.., log_prob, ..)`
writes it: nv = 2*ceil(n_vocab/2) + 4 uint16 values per row, the first two float32s
`scale` and `min_log_prob`, then one uint16 code per token, log p = scale*code + min_log_prob,
over the 16 nats below the most likely token (anything below is stored as code 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

F32 = np.float32
F64 = np.float64
# log-probabilities more than this below the top one are not stored (code 0) and, in the KL
# divergence, the base's terms below -16 are left out (llama.cpp's constant)
LOG_PROB_RANGE = F32(16.0)
CODE_MAX = F32(65535.0)
HEADER_U16 = 4  # two float32s (scale, min_log_prob) at the start of a row


def row_width(n_vocab: int) -> int:
    """uint16 values per stored row: llama.cpp's nv = 2*((n_vocab + 1)/2) + 4."""
    return 2 * ((n_vocab + 1) // 2) + HEADER_U16


def _max_sumexp(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row max (n,) f32, sum of expf(l - max) (n,) f64)."""
    m = logits.max(axis=1)
    e = np.exp(logits - m[:, None])  # (n, V) float32
    return m, e.sum(axis=1, dtype=F64)


def _target(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    return logits[np.arange(logits.shape[0]), np.asarray(targets, dtype=np.int64)]


@dataclass
class TargetStats:
    """Per row: the target's negative log-likelihood (float64), its logit and probability."""

    nll: np.ndarray  # float64 (n,)
    logit: np.ndarray  # float32 (n,)
    prob: np.ndarray  # float32 (n,)


def target_stats(logits: np.ndarray, targets: np.ndarray) -> TargetStats:
    """llama-perplexity's plain pass: nll = -((l_t - max) - log(sum)) in float64."""
    m, s = _max_sumexp(logits)
    lt = _target(logits, targets)
    d = lt - m  # float32
    nll = -(d.astype(F64) - np.log(s))
    prob = np.exp(d) / s.astype(F32)  # expf(l_t - max) / (float)sum
    return TargetStats(nll, lt, prob.astype(F32))


def _softmax_log(lt: np.ndarray, m: np.ndarray, s: np.ndarray) -> np.ndarray:
    """logf(p) of llama.cpp's `softmax`: p = float(expf(l_t - max) / sum), the log in float32."""
    p = (np.exp(lt - m).astype(F64) / s).astype(F32)
    with np.errstate(divide="ignore"):
        return np.log(p).astype(F64)


def softmax_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """The strided pass (perplexity_v2): nll = -logf(softmax(row)[target]); float64 (n,)."""
    m, s = _max_sumexp(logits)
    return -_softmax_log(_target(logits, targets), m, s)


def softmax_logprobs(row: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """logf(softmax(row)[t]) for several targets of one row (the multiple-choice benchmarks'
    first token); float64 (len(targets),) of float32 values."""
    m, s = _max_sumexp(row[None, :])
    return _softmax_log(row[np.asarray(targets, dtype=np.int64)], m, s)


def choice_logprobs(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """llama.cpp's compute_logprobs (the benchmarks): everything in float32, the sum of
    expf(l - max) one term after another; (l_t - max) - logf(sum); float32 (n,)."""
    m = logits.max(axis=1)
    e = np.exp(logits - m[:, None])
    total = np.cumsum(e, axis=1, dtype=F32)[:, -1]  # left to right, as the C loop
    return ((_target(logits, targets) - m) - np.log(total)).astype(F32)


def encode_rows(logits: np.ndarray, targets: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Write the rows of a KL-divergence base file into `out` (n, nv) uint16 and return the
    targets' nll (float64 (n,), from float32 maths, as llama.cpp returns it in this pass)."""
    n, V = logits.shape
    m, s = _max_sumexp(logits)
    lo = np.maximum(logits.min(axis=1), m - LOG_PROB_RANGE)  # (n,) f32
    lse = np.log(s).astype(F32)
    min_log_prob = (lo - m) - lse
    scale = (m - lo) / CODE_MAX
    head = np.stack([scale, min_log_prob], axis=1).astype(F32)  # (n, 2)
    out[:, :HEADER_U16] = head.view(np.uint16)
    with np.errstate(divide="ignore"):
        inv = np.where(scale != 0, F32(1.0) / scale, F32(0.0)).astype(F32)
    # nearest_int(inv*(l - lo)) (round half to even) where l > lo, else 0; C's int -> uint16 wraps
    q = np.rint(inv[:, None] * (logits - lo[:, None]))
    codes = np.where(logits > lo[:, None], q, F32(0.0)).astype(np.int64) & 0xFFFF
    out[:, HEADER_U16 : HEADER_U16 + V] = codes
    out[:, HEADER_U16 + V :] = 0
    nll = (m + lse) - _target(logits, targets)
    return nll.astype(F64)


def decode_rows(rows: np.ndarray, n_vocab: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scale (n,) f32, min_log_prob (n,) f32, codes (n, n_vocab) uint16) of stored rows."""
    head = np.ascontiguousarray(rows[:, :HEADER_U16]).view(F32)  # (n, 2)
    return head[:, 0], head[:, 1], rows[:, HEADER_U16 : HEADER_U16 + n_vocab]


@dataclass
class KldRows:
    """Per row of a comparison: KL(base || model) and p_model(target) - p_base(target)."""

    kld: np.ndarray  # float32 (n,): llama.cpp keeps these as floats for the percentiles
    p_diff: np.ndarray  # float32 (n,)


@dataclass
class KldSums:
    """llama.cpp's kl_divergence_result: running sums over every scored position."""

    sum_nll: float = 0.0
    sum_nll2: float = 0.0
    sum_nll_base: float = 0.0
    sum_nll_base2: float = 0.0
    sum_nll_nll_base: float = 0.0
    sum_kld: float = 0.0
    sum_kld2: float = 0.0
    sum_p_diff: float = 0.0
    sum_p_diff2: float = 0.0
    sum_p_diff4: float = 0.0
    max_p_diff: float = 0.0
    n_same_top: int = 0
    count: int = 0
    kld_values: list[np.ndarray] = field(default_factory=list)  # per block, float32
    p_diff_values: list[np.ndarray] = field(default_factory=list)

    def add(self, logits: np.ndarray, base_rows: np.ndarray, targets: np.ndarray) -> KldRows:
        """Compare a block of the model's logits (n, V) with the base's stored rows (n, nv)."""
        n, V = logits.shape
        m, s = _max_sumexp(logits)
        imax = logits.argmax(axis=1)  # the first maximum, as llama.cpp's strict `>` scan
        lse = np.log(s).astype(F32)
        scale, min_lp, codes = decode_rows(base_rows, V)
        t = np.asarray(targets, dtype=np.int64)
        nll = (m + lse) - _target(logits, t)  # float32
        nll_base = -(scale * codes[np.arange(n), t].astype(F32) + min_lp)
        top = m + lse
        lp_base = scale[:, None] * codes.astype(F32) + min_lp[:, None]  # (n, V) base log-probs
        imax_base = lp_base.argmax(axis=1)
        # sum over tokens with log p_base > -16 of p_base * (log p_base - log p), in float32 terms
        term = np.exp(lp_base) * ((lp_base - logits) + top[:, None])
        kld = np.where(lp_base > -LOG_PROB_RANGE, term, F32(0.0)).sum(axis=1, dtype=F64)
        p_diff = np.exp(-nll) - np.exp(-nll_base)  # float32
        p_diff2 = (p_diff * p_diff).astype(F64)
        self.sum_nll += float(nll.sum(dtype=F64))
        self.sum_nll2 += float((nll * nll).sum(dtype=F64))
        self.sum_nll_base += float(nll_base.sum(dtype=F64))
        self.sum_nll_base2 += float((nll_base * nll_base).sum(dtype=F64))
        self.sum_nll_nll_base += float((nll * nll_base).sum(dtype=F64))
        self.sum_kld += float(kld.sum())
        self.sum_kld2 += float((kld * kld).sum())
        self.sum_p_diff += float(p_diff.sum(dtype=F64))
        self.sum_p_diff2 += float(p_diff2.sum())
        self.sum_p_diff4 += float((p_diff2 * p_diff2).sum())
        if n:
            self.max_p_diff = max(self.max_p_diff, float(np.abs(p_diff).max()))
        self.n_same_top += int((imax == imax_base).sum())
        self.count += n
        rows = KldRows(kld.astype(F32), p_diff.astype(F32))
        self.kld_values.append(rows.kld)
        self.p_diff_values.append(rows.p_diff)
        return rows
