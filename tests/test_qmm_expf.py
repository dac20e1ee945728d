"""ggml's exp (core/model/kernels/qmm/expf.py) against the same algorithm in exact rational arithmetic, each
step rounded once to float32, and against the true exp."""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np

from llamacli.core.model.kernels.qmm.expf import exp_sum

f32, f64 = np.float32, np.float64


def _round_f32(fr: Fraction) -> np.float32:
    """The float32 nearest to fr (ties to even), finite values only."""
    f = f32(float(fr))  # float(Fraction) is correctly rounded to float64: within an ulp of f32's
    best = f
    for c in (np.nextafter(f, f32(-np.inf)), np.nextafter(f, f32(np.inf))):
        d, bd = abs(Fraction(float(c)) - fr), abs(Fraction(float(best)) - fr)
        if d < bd or (d == bd and int(np.array(c).view(np.uint32)) % 2 == 0):
            best = c
    return f32(best)


def _fma(a: np.float32, b: np.float32, c: np.float32) -> np.float32:
    return _round_f32(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


def _h(v: str) -> np.float32:
    return f32(float.fromhex(v))


@lru_cache(maxsize=None)
def ref_expf(x: float) -> np.float32:
    """ggml_v_expf (ggml-cpu vec.h, AVX-512 build) for one float32 value, step by step."""
    x32 = f32(x)
    if np.isnan(x32):
        return f32(np.nan)
    if x32 == -np.inf:
        return f32(0.0)
    r = _h("0x1.8p23")
    z = _fma(x32, _h("0x1.715476p+0"), r)
    n = f32(z - r)
    b = _fma(-n, _h("0x1.7f7d1cp-20"), _fma(-n, _h("0x1.62e4p-1"), x32))
    u = f32(b * b)
    j = _fma(
        _fma(_fma(_h("0x1.0e4020p-7"), b, _h("0x1.573e2ep-5")), u, _fma(_h("0x1.555e66p-3"), b, _h("0x1.fffdb6p-2"))),
        u,
        _fma(_h("0x1.ffffecp-1"), b, f32(1.0)),
    )
    if abs(n) > 192:
        return f32(np.inf) if n > 0 else f32(0.0)
    return _round_f32(Fraction(float(j)) * Fraction(2) ** int(n))  # scalef: one rounding


def ref_exp_sum(w: np.ndarray) -> tuple[np.ndarray, float]:
    """e = ref_expf of each value; their float64 sum as ggml_vec_soft_max_f32 adds them: each
    whole group of 16 reduced in float32 (_mm512_reduce_add_ps's tree), the rest one by one."""
    e = np.array([ref_expf(float(v)) for v in w], dtype=f32)
    total = 0.0
    g = len(e) - len(e) % 16
    for c in range(0, g, 16):
        v = e[c : c + 16]
        t8 = v[8:] + v[:8]  # float32 lanes
        t4 = t8[4:] + t8[:4]
        total += float(f32((t4[0] + t4[2]) + (t4[1] + t4[3])))
    for v in e[g:]:
        total += float(v)
    return e, total


def _samples() -> np.ndarray:
    rng = np.random.default_rng(3)
    x = np.concatenate([
        -rng.exponential(8.0, 1500), rng.uniform(-104.0, 1.0, 500), rng.uniform(-1e-3, 1e-3, 100),
        [0.0, -0.0, -87.3, -88.7, -103.9, -126.0 * math.log(2), -150.0, -200.0, 5.0, 88.0, -np.inf],
    ])
    return x.astype(f32)


def test_exp_is_ggml_v_expf_bit_for_bit() -> None:
    """Every value equals the algorithm done in exact arithmetic with one float32 rounding per
    step (fused multiply-adds, scalef), including underflow to subnormals and to zero."""
    x = _samples()
    got = x.copy()
    exp_sum(got, 0, len(x), f32(0.0))
    want = np.array([ref_expf(float(v)) for v in x], dtype=f32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_exp_is_within_a_few_ulp_of_exp() -> None:
    """A typo in a constant would pass the step-by-step comparison; the true exp would not.
    The algorithm itself is off by up to ~2.2 ulp (measured: 2.18 over 200,000 values in
    [-87, 0], 23% of them above 1 ulp); a wrong constant or step is off by far more."""
    x = np.linspace(-87.0, 0.0, 4001, dtype=f32)
    got = x.copy()
    exp_sum(got, 0, len(x), f32(0.0))
    true = np.exp(x.astype(f64))
    ulp = 2.0 ** (np.floor(np.log2(true)) - 23)  # float32's ulp at the true value (normal range)
    assert np.max(np.abs(got.astype(f64) - true) / ulp) <= 3.0


def test_sum_follows_ggml_order_from_the_offset() -> None:
    """exp(s[o:o+n] - m) in place, and the float64 sum in groups of 16 from the run's start
    (the order ggml uses for a row), whatever the run's length and offset."""
    rng = np.random.default_rng(4)
    for n, o in ((1, 0), (15, 3), (16, 0), (37, 5), (64, 1), (250, 7)):
        s = rng.normal(0.0, 3.0, o + n + 4).astype(f32)
        m = f32(s[o : o + n].max())
        before = s.copy()
        total = exp_sum(s, o, n, m)
        e, want = ref_exp_sum((before[o : o + n] - m).astype(f32))
        assert np.array_equal(s[o : o + n], e)
        assert total == want
        assert np.array_equal(s[:o], before[:o]) and np.array_equal(s[o + n :], before[o + n :])
