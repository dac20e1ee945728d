"""Kernels against naive float64 references written loop by loop."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llamacli.core.model.kernels import ops as K

rng = np.random.default_rng(1234)


def test_rms_norm_matches_float64_reference() -> None:
    x = rng.standard_normal((7, 96)).astype(np.float32) * 3
    w = rng.standard_normal(96).astype(np.float32)
    y = K.rms_norm(x, w, 1e-6)
    ref = np.empty((7, 96))
    for i in range(7):
        r = x[i].astype(np.float64)
        ref[i] = r / math.sqrt(sum(v * v for v in r) / 96 + 1e-6) * w
    np.testing.assert_allclose(y, ref, rtol=2e-6, atol=1e-6)
    assert y.dtype == np.float32


def test_softmax_handles_masked_rows() -> None:
    x = np.array([[1.0, 2.0, -np.inf], [-np.inf, -np.inf, -np.inf]], dtype=np.float32)
    p = K.softmax(x)
    e = np.exp([1.0 - 2.0, 0.0])
    np.testing.assert_allclose(p[0, :2], e / e.sum(), rtol=1e-6)
    assert p[0, 2] == 0.0
    assert np.all(p[1] == 0)


def test_silu_and_gelu_against_formulas() -> None:
    x = np.linspace(-8, 8, 101).astype(np.float32)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(K.silu(x), xd / (1 + np.exp(-xd)), rtol=1e-6, atol=1e-7)
    g = 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd**3)))
    np.testing.assert_allclose(K.gelu(x), g, rtol=1e-5, atol=1e-6)


def test_softcap() -> None:
    x = np.array([-100.0, 0.0, 3.0, 100.0], dtype=np.float32)
    np.testing.assert_allclose(K.softcap(x, 30.0), 30 * np.tanh(x.astype(np.float64) / 30), rtol=1e-6)


def _rope_ref(x: np.ndarray, pos: np.ndarray, n_dims: int, base: float, neox: bool, scale: float = 1.0,
              factors: np.ndarray | None = None) -> np.ndarray:
    out = x.astype(np.float64).copy()
    T, H, D = x.shape
    for t in range(T):
        for h in range(H):
            for i in range(n_dims // 2):
                theta = pos[t] * base ** (-2 * i / n_dims)
                if factors is not None:
                    theta /= factors[i]
                theta *= scale
                c, s = math.cos(theta), math.sin(theta)
                a, b = (i, i + n_dims // 2) if neox else (2 * i, 2 * i + 1)
                x0, x1 = float(x[t, h, a]), float(x[t, h, b])
                out[t, h, a] = x0 * c - x1 * s
                out[t, h, b] = x0 * s + x1 * c
    return out


@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("fma", [False, True])
def test_rope_normal_and_neox(neox: bool, fma: bool) -> None:
    x = rng.standard_normal((5, 3, 16)).astype(np.float32)
    pos = np.array([0, 1, 7, 100, 600])
    cfg = K.RopeConfig(n_dims=16, base=10000.0, scale=0.5, neox=neox)
    c, s = K.rope_cos_sin(pos, cfg)
    y = K.apply_rope(x, c, s, 16, neox, fma=fma)
    # the iterative float32 theta of ggml differs from the exact angle by ~1e-7 relative
    np.testing.assert_allclose(y, _rope_ref(x, pos, 16, 10000.0, neox, 0.5), atol=2e-4)


@pytest.mark.parametrize("neox", [False, True])
def test_rope_fma_rounds_as_documented(neox: bool) -> None:
    """The ggml rotation (docs/numerics.md 2.5): out0 = f32(x0 c - f32(x1 s)), out1 =
    f32(x0 s + f32(x1 c)) (NeoX) or f32(x1 c + f32(x0 s)) (pairs), one final rounding of a sum
    whose first product is exact in float64; the dims past n_dims unchanged."""
    x = rng.standard_normal((6, 3, 20)).astype(np.float32) * 40
    pos = np.array([0, 1, 7, 100, 600, 4095])
    c, s = K.rope_cos_sin(pos, K.RopeConfig(n_dims=16, base=10000.0, neox=neox))
    y = K.apply_rope(x, c, s, 16, neox, fma=True)
    f64 = np.float64
    cc, ss = c[:, None, :], s[:, None, :]
    i0, i1 = (slice(0, 8), slice(8, 16)) if neox else (slice(0, 16, 2), slice(1, 16, 2))
    x0, x1 = x[..., i0], x[..., i1]
    assert np.array_equal(y[..., i0], (x0.astype(f64) * cc - (x1 * ss)).astype(np.float32))
    second = x0.astype(f64) * ss + (x1 * cc) if neox else x1.astype(f64) * cc + (x0 * ss)
    assert np.array_equal(y[..., i1], second.astype(np.float32))
    assert np.array_equal(y[..., 16:], x[..., 16:])


def test_rope_partial_dims_and_freq_factors() -> None:
    x = rng.standard_normal((3, 2, 16)).astype(np.float32)
    pos = np.array([3, 50, 900])
    ff = np.array([1.0, 1.0, 2.0, 4.0], dtype=np.float32)
    cfg = K.RopeConfig(n_dims=8, base=500000.0, neox=False, freq_factors=ff)
    c, s = K.rope_cos_sin(pos, cfg)
    y = K.apply_rope(x, c, s, 8, False)
    np.testing.assert_allclose(y, _rope_ref(x, pos, 8, 500000.0, False, factors=ff), atol=2e-4)
    np.testing.assert_array_equal(y[..., 8:], x[..., 8:])  # dims past n_dims untouched


def test_rope_theta_is_ggml_running_product() -> None:
    # theta_{i+1} = f32(theta_i * theta_scale), starting from the position (docs/numerics.md 2.5)
    cfg = K.RopeConfig(n_dims=8, base=10000.0, neox=True)
    pos = np.array([617])
    c, _ = K.rope_cos_sin(pos, cfg)
    ts = np.float32(np.power(np.float32(10000.0), np.float32(-2.0) / np.float32(8)))
    t = np.float32(617)
    for i in range(4):
        assert c[0, i] == np.float32(math.cos(float(t)))
        t = np.float32(t * ts)


def test_llama3_freq_factors_bands() -> None:
    ff = K.llama3_freq_factors(128, 500000.0, 8.0, 1.0, 4.0, 8192)
    assert ff.shape == (64,)
    assert ff[0] == 1.0 and ff[-1] == 8.0  # high frequencies untouched, low ones scaled by 8
    assert np.all(np.diff(ff) >= 0)


def _attn_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray, qpos: np.ndarray, scale: float,
              window: int | None) -> np.ndarray:
    S, H, Tq, D = q.shape
    Hkv, L = k.shape[1], k.shape[2]
    out = np.zeros((S, H, Tq, v.shape[-1]))
    for s in range(S):
        for h in range(H):
            kh = h // (H // Hkv)
            for t in range(Tq):
                sc = []
                for j in range(L):
                    ok = j <= qpos[s, t] and (window is None or qpos[s, t] - j < window)
                    sc.append(float(q[s, h, t] @ k[s, kh, j]) * scale if ok else -np.inf)
                sc = np.array(sc)
                p = np.exp(sc - sc.max())
                p /= p.sum()
                out[s, h, t] = p @ v[s, kh].astype(np.float64)
    return out


@pytest.mark.parametrize("window", [None, 3])
def test_gqa_attention_causal_and_sliding(window: int | None) -> None:
    S, H, Hkv, Tq, L, D = 2, 4, 2, 3, 6, 8
    q = rng.standard_normal((S, H, Tq, D)).astype(np.float32)
    k = rng.standard_normal((S, Hkv, L, D)).astype(np.float32)
    v = rng.standard_normal((S, Hkv, L, D)).astype(np.float32)
    qpos = np.array([[3, 4, 5], [0, 1, 2]])
    mask = K.attention_mask(qpos, 0, L, window)
    y = K.gqa_attention(q, k, v, mask, 0.3)
    np.testing.assert_allclose(y, _attn_ref(q, k, v, qpos, 0.3, window), rtol=1e-5, atol=1e-5)


def test_attention_mask_window_boundary() -> None:
    # llama.cpp masks a key when pos_q - pos_k >= window
    m = K.attention_mask(np.array([[10]]), 0, 11, 4)
    visible = np.flatnonzero(m[0, 0] == 0)
    assert visible.tolist() == [7, 8, 9, 10]


def test_swiglu_oai_clamps_as_ggml() -> None:
    """ggml_swiglu_oai (gpt-oss): the gate clamped above at 7, the up value to [-7, 7], then
    x * sigmoid(1.702 x) * (y + 1); against the formula in float64."""
    g = np.array([-100.0, -7.5, -1.0, 0.0, 0.5, 6.9, 7.0, 7.1, 50.0], dtype=np.float32)
    u = np.array([-9.0, -7.0, -0.5, 3.0, 0.0, 8.0, -6.0, 7.5, 1.0], dtype=np.float32)
    got = K.swiglu_oai(g[None], u[None])[0]
    x = np.minimum(g.astype(np.float64), 7.0)
    y = np.clip(u.astype(np.float64), -7.0, 7.0)
    ref = x / (1.0 + np.exp(-1.702 * x)) * (y + 1.0)
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=1e-30)
    assert got.dtype == np.float32
    assert got[-1] == K.swiglu_oai(np.float32([[7.0]]), np.float32([[1.0]]))[0, 0]  # a gate of 50 acts as 7


def test_rope_yarn_mixes_interpolation_and_extrapolation() -> None:
    """ggml's rope_yarn: pair i's angle is interp * (1 - mix) + extrap * mix with
    mix = 1 - clamp((i - low) / (high - low), 0, 1), cos and sin times the magnitude factor;
    gpt-oss's numbers: 64 dims, base 150000, factor 32 from 4096 positions -> pairs 8..18, and
    the factor 1 + 0.1 ln 32 (llama.cpp's attn_factor cancels get_mscale, rope_yarn applies it)."""
    from llamacli.core.model.families.llama import yarn_rope

    cfg = yarn_rope(K.RopeConfig(64, 150000.0, 1 / 32, True), 4096)
    assert cfg.corr_dims == (8.0, 18.0) and cfg.ext_factor == 1.0
    assert abs(cfg.attn_factor - (1 + 0.1 * math.log(32))) < 1e-6
    pos = np.array([0, 1, 37, 1000, 70000])
    cos, sin = K.rope_cos_sin(pos, cfg)
    i = np.arange(32)
    extrap = pos[:, None] * 150000.0 ** (-2.0 * i / 64)
    mix = 1 - np.clip((i - 8.0) / 10.0, 0, 1)
    theta = extrap / 32 * (1 - mix) + extrap * mix
    m = 1 + 0.1 * math.log(32)
    # float32 angles of up to 7e4 radians: an ulp of the angle is ~4e-3 rad there
    tol = 1e-5 + 4 * np.abs(theta) * 2.0**-24
    assert np.all(np.abs(cos - np.cos(theta) * m) <= tol * m)
    assert np.all(np.abs(sin - np.sin(theta) * m) <= tol * m)
    plain = K.rope_cos_sin(pos, K.RopeConfig(64, 150000.0, 1 / 32, True))  # linear scaling: every pair interpolated
    assert not np.allclose(plain[0][:, :8], cos[:, :8] / m, atol=1e-3)
