"""core/quality/logprobs.py and kld.py against llama-perplexity's per-row loops written out
scalar by scalar (float32 operations in its order, as tools/perplexity/perplexity.cpp runs
them), and the statistics against their formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llamacli.core.quality import kld as K
from llamacli.core.quality.logprobs import KldSums, decode_rows, encode_rows, row_width, softmax_nll, target_stats

F32 = np.float32
V = 1001  # odd: the stored rows carry one padding value


def _logits(n: int, seed: int, scale: float = 4.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, V)) * scale).astype(F32)
    x[0, :] = F32(0.25)  # a flat row: scale 0, every code 0
    x[1, 7] = F32(60.0)  # one token far above the rest: most codes are below the 16-nat floor
    return x


def _sum_exp(row: np.ndarray, m: F32) -> float:
    return sum(float(np.exp(F32(v - m))) for v in row)  # expf(l - max) in float32, summed in double


def _encode_row_c(row: np.ndarray, tok: int) -> tuple[np.ndarray, float]:
    """log_softmax(n_vocab, logits, log_prob, tok) of perplexity.cpp, one float32 step at a time."""
    mx, mn = F32(row.max()), F32(row.min())
    mn = max(mn, F32(mx - F32(16)))
    lse = F32(math.log(_sum_exp(row, mx)))
    min_lp = F32(F32(mn - mx) - lse)
    scale = F32(F32(mx - mn) / F32(65535.0))
    out = np.zeros(row_width(V), dtype=np.uint16)
    out[:4] = np.array([scale, min_lp], dtype=F32).view(np.uint16)
    if scale:
        inv = F32(F32(1) / scale)
        for i, v in enumerate(row):
            if v > mn:
                f = F32(inv * F32(v - mn))
                out[4 + i] = int(np.rint(f))  # nearest_int: +12582912.f, round half to even
    return out, float(F32(F32(mx + lse) - row[tok]))


def test_encode_rows_is_llama_cpp_bit_for_bit() -> None:
    x = _logits(6, 1)
    tok = np.array([3, 7, 999, 0, 500, 1000])
    rows = np.empty((6, row_width(V)), dtype=np.uint16)
    nll = encode_rows(x, tok, rows)
    for r in range(6):
        want, want_nll = _encode_row_c(x[r], int(tok[r]))
        np.testing.assert_array_equal(rows[r], want)
        assert nll[r] == want_nll
    assert rows[0, 4:].max() == 0 and rows[:, -1].max() == 0  # flat row; the padding value


def test_decode_rows_gives_log_probs_within_half_a_step() -> None:
    x = _logits(4, 2)
    rows = np.empty((4, row_width(V)), dtype=np.uint16)
    encode_rows(x, np.zeros(4, dtype=np.int64), rows)
    scale, min_lp, codes = decode_rows(rows, V)
    lp = scale[:, None] * codes.astype(F32) + min_lp[:, None]
    exact = x.astype(np.float64) - np.log(np.exp(x.astype(np.float64)).sum(1, keepdims=True))
    seen = exact > (exact.max(1, keepdims=True) - 16)
    for r in range(1, 4):
        err = np.abs(lp[r] - exact[r])[seen[r]]
        assert err.max() <= 0.5 * scale[r] + 1e-5


def test_target_stats_match_float64_log_softmax() -> None:
    x = _logits(5, 3)
    tok = np.array([1, 2, 3, 4, 5])
    st = target_stats(x, tok)
    ref = -(x.astype(np.float64)[np.arange(5), tok] - np.log(np.exp(x.astype(np.float64)).sum(1)))
    np.testing.assert_allclose(st.nll, ref, rtol=1e-6)
    np.testing.assert_allclose(st.prob, np.exp(-ref), rtol=1e-5)
    np.testing.assert_allclose(softmax_nll(x, tok), ref, rtol=1e-5)
    assert st.logit.tolist() == x[np.arange(5), tok].tolist()


def _kld_row_c(row: np.ndarray, base: np.ndarray, tok: int) -> tuple[float, float, bool]:
    """log_softmax(.., base_log_prob, tok, kld) of perplexity.cpp: (KLD, p_diff, same top)."""
    mx, imax = F32(row[0]), 0
    for i in range(1, V):
        if row[i] > mx:
            mx, imax = F32(row[i]), i
    lse = F32(math.log(_sum_exp(row, mx)))
    scale, min_lp = (F32(v) for v in base[:4].view(F32))
    codes = base[4:]
    nll = F32(F32(mx + lse) - row[tok])
    nll_base = F32(-F32(F32(scale * F32(codes[tok])) + min_lp))
    top = F32(mx + lse)
    total, imax_base, best = 0.0, -1, F32(0)
    for i in range(V):
        lpb = F32(F32(scale * F32(codes[i])) + min_lp)
        if i == 0 or lpb > best:
            best, imax_base = lpb, i
        if lpb > F32(-16):
            total += float(F32(np.exp(lpb) * F32(F32(lpb - row[i]) + top)))
    p_diff = float(F32(np.exp(-nll) - np.exp(-nll_base)))
    return total, p_diff, imax == imax_base


def test_kld_rows_match_llama_cpp_loop() -> None:
    base_x = _logits(6, 4)
    model_x = (base_x + np.random.default_rng(5).standard_normal(base_x.shape).astype(F32) * F32(0.3)).astype(F32)
    tok = np.array([10, 7, 20, 30, 40, 50])
    rows = np.empty((6, row_width(V)), dtype=np.uint16)
    encode_rows(base_x, tok, rows)
    sums = KldSums()
    got = sums.add(model_x, rows, tok)
    same = 0
    for r in range(6):
        kld, p_diff, top = _kld_row_c(model_x[r], rows[r], int(tok[r]))
        assert got.kld[r] == pytest.approx(kld, rel=1e-5, abs=1e-7)
        assert got.p_diff[r] == pytest.approx(p_diff, abs=1e-7)
        same += top
    assert sums.n_same_top == same and sums.count == 6
    assert sums.sum_kld == pytest.approx(float(got.kld.astype(np.float64).sum()), rel=1e-6)


def test_a_model_against_its_own_base_file_diverges_by_the_rounding_only() -> None:
    x = _logits(50, 6)
    tok = np.arange(50) * 7
    rows = np.empty((50, row_width(V)), dtype=np.uint16)
    nll = encode_rows(x, tok, rows)
    s = KldSums()
    s.add(x, rows, tok)
    assert s.n_same_top == 50
    assert abs(s.sum_kld / 50) < 1e-4 and s.max_p_diff < 1e-3
    assert s.sum_nll == pytest.approx(float(nll.sum()), rel=1e-6)


def test_mean_and_uncertainty_and_covariance() -> None:
    v = np.arange(1.0, 21.0)
    e = K.mean_and_uncertainty(float(v.sum()), float((v * v).sum()), 20)
    assert e.value == 10.5 and e.uncertainty == pytest.approx(v.std() / math.sqrt(19))
    assert K.mean_and_uncertainty(5.0, 30.0, 5).uncertainty == 0.0  # 10 values or fewer: none
    assert K.mean_and_uncertainty(0.0, 0.0, 0) == K.Estimate(0.0, 0.0)
    w = 3 * v + 1
    cov = K.covariance(float(v.sum()), float(w.sum()), float((v * w).sum()), 20)
    assert cov == pytest.approx(np.cov(v, w, bias=True)[0, 1] / 19)
    assert K.covariance(1.0, 1.0, 1.0, 9) == 0.0


def test_percentiles_and_median_as_llama_cpp() -> None:
    vals = np.sort(np.array([0.5, 0.1, 0.9, 0.3], dtype=F32))
    assert K.percentile(vals, 0.0) == float(F32(0.1)) and K.percentile(vals, 1.0) == float(F32(0.9))
    # p = 0.5 * 3 = 1.5: halfway between the second and third values
    assert K.percentile(vals, 0.5) == float(F32(0.5) * F32(0.3) + F32(0.5) * F32(0.5))
    assert K.median(vals) == float(F32(0.5) * (F32(0.5) + F32(0.3)))
    assert K.median(vals[:3]) == float(F32(0.3))


def test_summary_needs_100_positions_and_reports_the_ratio() -> None:
    x = np.random.default_rng(7).standard_normal((120, V)).astype(F32)  # every token within 16 nats
    tok = np.arange(120)
    rows = np.empty((120, row_width(V)), dtype=np.uint16)
    encode_rows(x, tok, rows)
    s = KldSums()
    s.add(x[:99], rows[:99], tok[:99])
    assert K.summary(s) is None
    s.add(x[99:], rows[99:], tok[99:])
    sm = K.summary(s)
    assert sm is not None and sm.count == 120
    assert sm.ppl_ratio.value == pytest.approx(math.exp(sm.log_ppl_ratio.value))
    assert sm.ppl.value == pytest.approx(sm.ppl_base.value, rel=1e-4)
    assert sm.same_top.value == 1.0
    assert [n for n, _ in sm.kld_levels][0] == "Maximum" and sm.kld_levels[0][1] >= sm.kld_levels[-1][1]
    st = K.status(s, 3)
    assert st.chunk == 3 and st.kld == sm.kld and st.same_top == sm.same_top
