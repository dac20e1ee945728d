"""The statistics llama-perplexity's KL-divergence mode reports, from the running sums
(`logprobs.KldSums`): the per-chunk status line and the final summary, each figure with
llama.cpp's uncertainty formula (tools/perplexity/perplexity.cpp: `kl_divergence`).

Divisions follow IEEE arithmetic as in C (x/0 is inf or nan, never an exception).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from llamacli.core.quality.logprobs import KldSums

F32 = np.float32
MIN_SUMMARY_COUNT = 100  # llama.cpp prints no summary for fewer scored positions


def _div(a: float, b: float) -> float:
    with np.errstate(all="ignore"):
        return float(np.float64(a) / np.float64(b))


def _sqrt(a: float) -> float:
    return math.sqrt(a) if a >= 0 else math.nan


@dataclass(frozen=True)
class Estimate:
    """A mean and its standard error."""

    value: float
    uncertainty: float


def mean_and_uncertainty(total: float, total2: float, count: int) -> Estimate:
    """Mean of values whose sum and sum of squares are given; the standard error only above
    10 values (llama.cpp's `mean_and_uncertainty`)."""
    if count < 1:
        return Estimate(0.0, 0.0)
    f = total / count
    df = total2 / count - f * f
    return Estimate(f, math.sqrt(df / (count - 1)) if df > 0 and count > 10 else 0.0)


def covariance(sum_a: float, sum_b: float, sum_ab: float, count: int) -> float:
    """Covariance of the two means (llama.cpp's `covariance`; 0 below 10 values)."""
    if count < 10:
        return 0.0
    return (sum_ab / count - (sum_a / count) * (sum_b / count)) / (count - 1)


def _proportion(k: int, n: int) -> Estimate:
    p = _div(k, n)
    return Estimate(p, _sqrt(_div(p * (1 - p), n - 1)))


@dataclass(frozen=True)
class KldStatus:
    """The figures of one per-chunk line, over every position scored so far."""

    chunk: int  # 1-based
    ppl: Estimate
    log_ppl_ratio: Estimate  # ln(PPL(Q)/PPL(base))
    kld: Estimate
    p_diff_rms: Estimate  # fractions (printed as percentages)
    same_top: Estimate


@dataclass(frozen=True)
class _PplTerms:
    log_ppl: Estimate
    log_ppl_base: Estimate
    cov: float
    log_ratio: Estimate


def _ppl_terms(s: KldSums) -> _PplTerms:
    lp = mean_and_uncertainty(s.sum_nll, s.sum_nll2, s.count)
    lb = mean_and_uncertainty(s.sum_nll_base, s.sum_nll_base2, s.count)
    cov = covariance(s.sum_nll, s.sum_nll_base, s.sum_nll_nll_base, s.count)
    ratio = Estimate(lp.value - lb.value, _sqrt(lp.uncertainty**2 + lb.uncertainty**2 - 2.0 * cov))
    return _PplTerms(lp, lb, cov, ratio)


def _p_diff_rms(s: KldSums) -> Estimate:
    mse = mean_and_uncertainty(s.sum_p_diff2, s.sum_p_diff4, s.count)
    rms = math.sqrt(mse.value)
    return Estimate(rms, _div(0.5, rms) * mse.uncertainty)


def status(s: KldSums, chunk: int) -> KldStatus:
    t = _ppl_terms(s)
    ppl = math.exp(t.log_ppl.value)
    return KldStatus(
        chunk=chunk,
        ppl=Estimate(ppl, ppl * t.log_ppl.uncertainty),
        log_ppl_ratio=t.log_ratio,
        kld=mean_and_uncertainty(s.sum_kld, s.sum_kld2, s.count),
        p_diff_rms=_p_diff_rms(s),
        same_top=_proportion(s.n_same_top, s.count),
    )


def percentile(values: np.ndarray, fraction: float) -> float:
    """llama.cpp's percentile of sorted float32 values: linear between neighbours, in float32."""
    fr = F32(fraction)
    if fr <= 0:
        return float(values[0])
    if fr >= 1:
        return float(values[-1])
    p = fr * F32(values.shape[0] - 1)
    ip = int(p)
    p = F32(p - F32(ip))
    nxt = values[min(ip + 1, values.shape[0] - 1)]
    return float((F32(1) - p) * values[ip] + p * nxt)


def median(values: np.ndarray) -> float:
    n = values.shape[0]
    return float(F32(0.5) * (values[n // 2] + values[n // 2 - 1])) if n % 2 == 0 else float(values[n // 2])


KLD_LEVELS: tuple[tuple[str, float | None], ...] = (
    ("Maximum", 1.0), ("99.9%", 0.999), ("99.0%", 0.990), ("95.0%", 0.950), ("90.0%", 0.900),
    ("Median", None), ("10.0%", 0.100), (" 5.0%", 0.050), (" 1.0%", 0.010), (" 0.1%", 0.001), ("Minimum", 0.0),
)
P_DIFF_LEVELS: tuple[tuple[str, float | None], ...] = (
    ("Maximum", 1.0), ("99.9%", 0.999), ("99.0%", 0.990), ("95.0%", 0.950), ("90.0%", 0.900), ("75.0%", 0.750),
    ("Median", None), ("25.0%", 0.250), ("10.0%", 0.100), (" 5.0%", 0.050), (" 1.0%", 0.010), (" 0.1%", 0.001),
    ("Minimum", 0.0),
)


def _levels(values: np.ndarray, levels: tuple[tuple[str, float | None], ...]) -> list[tuple[str, float]]:
    return [(name, median(values) if f is None else percentile(values, f)) for name, f in levels]


@dataclass(frozen=True)
class KldSummary:
    """The final statistics (printed after the chunks when at least 100 positions were scored)."""

    count: int
    ppl: Estimate  # Mean PPL(Q)
    ppl_base: Estimate
    cor: float  # Cor(ln(PPL(Q)), ln(PPL(base))), a fraction
    log_ppl_ratio: Estimate
    ppl_ratio: Estimate
    ppl_diff: Estimate
    kld: Estimate
    kld_levels: list[tuple[str, float]]  # (label, value): maximum, percentiles, median, minimum
    p_diff: Estimate  # mean Δp, a fraction
    p_diff_levels: list[tuple[str, float]]
    p_diff_rms: Estimate
    same_top: Estimate


def summary(s: KldSums) -> KldSummary | None:
    if s.count < MIN_SUMMARY_COUNT:
        return None
    kv = np.sort(np.concatenate(s.kld_values))
    pv = np.sort(np.concatenate(s.p_diff_values))
    t = _ppl_terms(s)
    ppl = math.exp(t.log_ppl.value)
    ppl_unc = ppl * t.log_ppl.uncertainty
    base = math.exp(t.log_ppl_base.value)
    base_unc = base * t.log_ppl_base.uncertainty
    ratio = math.exp(t.log_ratio.value)
    ppl_cov = ppl * base * t.cov
    return KldSummary(
        count=s.count,
        ppl=Estimate(ppl, ppl_unc),
        ppl_base=Estimate(base, base_unc),
        cor=_div(t.cov, t.log_ppl.uncertainty * t.log_ppl_base.uncertainty),
        log_ppl_ratio=t.log_ratio,
        ppl_ratio=Estimate(ratio, ratio * t.log_ratio.uncertainty),
        ppl_diff=Estimate(ppl - base, _sqrt(ppl_unc * ppl_unc + base_unc * base_unc - 2.0 * ppl_cov)),
        kld=mean_and_uncertainty(s.sum_kld, s.sum_kld2, s.count),
        kld_levels=_levels(kv, KLD_LEVELS),
        p_diff=mean_and_uncertainty(s.sum_p_diff, s.sum_p_diff2, s.count),
        p_diff_levels=_levels(pv, P_DIFF_LEVELS),
        p_diff_rms=_p_diff_rms(s),
        same_top=_proportion(s.n_same_top, s.count),
    )
