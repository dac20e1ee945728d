"""Pure NumPy kernels of the transformer forward: no state, no Python loops over tokens or heads.

Shapes use T = tokens in the batch, H = query heads, Hkv = key/value heads, D = head dim,
S = sequences in an attention group, Tq = query tokens per sequence, L = cached keys.
All arrays are float32 unless stated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from llamacli.core.model.kernels.qmm.threads import split_rows


def rms_norm(x: np.ndarray, weight: np.ndarray | None, eps: float) -> np.ndarray:
    """y = x / sqrt(mean(x^2) + eps) * weight, over the last axis.

    As ggml: squares in float32, their sum in float64, then mean, eps, sqrt and reciprocal
    in float32 (docs/numerics.md 2.3). Compiled (`_rms_rows`): a decode step calls it ~100
    times on short rows, where NumPy's per-call cost would be most of the time.
    """
    # x: (..., n); weight: (n,) or None
    n = x.shape[-1]
    x2 = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, n)
    y = np.empty_like(x2)
    w = _NO_WEIGHT if weight is None else np.ascontiguousarray(weight, dtype=np.float32)
    e = np.float32(eps)
    split_rows(lambda a, b: _rms_rows(x2[a:b], w, weight is not None, e, y[a:b]), x2.shape[0], n)
    return y.reshape(x.shape)


_NO_WEIGHT = np.zeros(0, dtype=np.float32)


@njit(cache=True, nogil=True)
def _rms_rows(x2, w, has_w, eps, y):  # type: ignore[no-untyped-def]
    n = x2.shape[1]
    for t in range(x2.shape[0]):
        ss = 0.0  # float64
        for i in range(n):
            v = x2[t, i]
            ss += np.float64(v * v)  # the float32 square, summed in float64
        mean = np.float32(ss / n)
        scale = np.float32(1.0) / np.float32(math.sqrt(mean + eps))  # sqrt of a float32: correctly rounded
        for i in range(n):
            v = x2[t, i] * scale
            y[t, i] = v * w[i] if has_w else v


def layer_norm(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, eps: float) -> np.ndarray:
    """y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias, over the last axis (ggml_norm
    then the affine step, as llama.cpp's build_norm LLM_NORM): sums in float64, the centred
    values, variance and scale in float32."""
    # x: (..., n)
    mean = (np.sum(x, axis=-1, dtype=np.float64) / x.shape[-1]).astype(np.float32)
    y = x - mean[..., None]
    var = (np.sum(np.square(y), axis=-1, dtype=np.float64) / x.shape[-1]).astype(np.float32)
    y *= (np.float32(1.0) / np.sqrt(var + np.float32(eps)))[..., None]
    if weight is not None:
        y *= weight
    if bias is not None:
        y += bias
    return y


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax; -inf entries get probability 0 (all 0 if all are -inf)."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0).astype(x.dtype)
    e = np.exp(x - m)
    total = np.sum(e, axis=axis, keepdims=True)
    e /= np.where(total > 0, total, 1.0).astype(x.dtype)  # a fully masked row stays all 0
    return e


def swiglu_oai(g: np.ndarray, u: np.ndarray, alpha: float = 1.702, limit: float = 7.0) -> np.ndarray:
    """ggml_swiglu_oai (gpt-oss): x = min(g, limit), y = clamp(u, -limit, limit),
    out = x / (1 + expf(-alpha x)) * (y + 1), in float32 (expf correctly rounded)."""
    f32 = np.float32
    x = np.minimum(g, f32(limit)).astype(np.float32)
    y = np.clip(u, f32(-limit), f32(limit)).astype(np.float32)
    with np.errstate(over="ignore"):
        e = np.exp((f32(alpha) * -x).astype(np.float64)).astype(np.float32)
    return (x / (f32(1.0) + e) * (y + f32(1.0))).astype(np.float32)


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x)."""
    with np.errstate(over="ignore"):  # exp(-x) = inf for x < -88: x / inf = -0, as in ggml
        return x / (1.0 + np.exp(-x))


_GELU_C = math.sqrt(2.0 / math.pi)


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (ggml_gelu): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(_GELU_C * x * (1.0 + 0.044715 * x * x)))


def softcap(x: np.ndarray, cap: float) -> np.ndarray:
    """Logit soft-capping: cap * tanh(x / cap), in float32 as llama.cpp's graph: x * f32(1 / cap)
    (ggml_scale), tanh, * cap."""
    c = np.float32(cap)
    return np.tanh(x * (np.float32(1.0) / c)) * c


@dataclass(frozen=True)
class RopeConfig:
    """How positions rotate Q and K.

    n_dims: rotated dims per head (<= head dim); base: theta base; scale: position scale
    (1/linear factor); neox: rotate halves (GPT-NeoX) instead of adjacent pairs;
    freq_factors: per-frequency divisors (Llama 3 rope scaling, LongRoPE), shape (n_dims/2,) or None;
    attn_factor: multiplies cos and sin (ggml's mscale; LongRoPE's `rope.scaling.attn_factor`; for
    YaRN the whole factor ggml's rope_yarn multiplies by, its 1 + 0.1 ln(1/scale) included);
    ext_factor, corr_dims: YaRN's extrapolation mix (0: none) and ggml_rope_yarn_corr_dims' range.
    """

    n_dims: int
    base: float
    scale: float = 1.0
    neox: bool = False
    freq_factors: np.ndarray | None = None
    attn_factor: float = 1.0
    ext_factor: float = 0.0
    corr_dims: tuple[float, float] = (0.0, 0.0)


def rope_cos_sin(positions: np.ndarray, cfg: RopeConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of the rotation angles, each (T, n_dims/2).

    As ggml_rope_cache_init: theta_0 = pos, theta_{i+1} = f32(theta_i * theta_scale) with
    theta_scale = powf(base, -2/n_dims) (a running float32 product, not pos * base^(-2i/n)),
    then divided by the Llama-3 frequency factor and multiplied by freq_scale.
    """
    half = cfg.n_dims // 2
    theta_scale = np.float32(np.power(np.float32(cfg.base), np.float32(-2.0) / np.float32(cfg.n_dims)))
    theta = np.empty((positions.shape[0], half), dtype=np.float32)  # (T, half)
    _running_theta(positions.astype(np.float32), theta_scale, theta)
    if cfg.freq_factors is not None:
        theta /= cfg.freq_factors[None, :half].astype(np.float32)
    if cfg.ext_factor != 0.0:
        theta = _yarn_theta(theta, cfg, half)
    elif cfg.scale != 1.0:
        theta *= np.float32(cfg.scale)
    # cos/sin in float64 then rounded: the float32 result libm's sincosf gives (to ~1 ulp).
    th = theta.astype(np.float64)
    cos, sin = np.cos(th).astype(np.float32), np.sin(th).astype(np.float32)
    if cfg.attn_factor != 1.0:  # rope_yarn: cosf(theta) * mscale, in float32
        cos, sin = cos * np.float32(cfg.attn_factor), sin * np.float32(cfg.attn_factor)
    return cos, sin


def mrope_cos_sin(pos4: np.ndarray, cfg: RopeConfig, sections: tuple[int, int, int, int],
                  interleaved: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """M-RoPE (ggml_rope_multi, GGML_ROPE_TYPE_MROPE: Qwen2-VL): cos and sin (T, n_dims/2) of
    positions pos4 (T, 4) = (t, h, w, e) per token. As ggml_mrope_cache_init: pair i is in
    sector i % sum(sections); sectors [0, s0) turn by t, [s0, s0+s1) by h, then s2 by w, the
    rest by e; each component's angle is its own running product from its position, so a
    column equals rope_cos_sin's for that component (text tokens: all four equal, plain NeoX).
    `interleaved` (GGML_ROPE_TYPE_IMROPE: Qwen3-VL, Qwen3.5): sector r turns by h where r % 3
    is 1 and r < 3 s1, by w where r % 3 is 2 and r < 3 s2, by t where r % 3 is 0 and r < 3 s0,
    else by e."""
    half = cfg.n_dims // 2
    s0, s1, s2, _ = sections
    sector = np.arange(half) % sum(sections)
    if interleaved:
        r = sector % 3
        comp = np.select([(r == 1) & (sector < 3 * s1), (r == 2) & (sector < 3 * s2), (r == 0) & (sector < 3 * s0)],
                         [1, 2, 0], 3)
    else:
        comp = np.select([sector < s0, sector < s0 + s1, sector < s0 + s1 + s2], [0, 1, 2], 3)
    cos = np.empty((pos4.shape[0], half), dtype=np.float32)
    sin = np.empty_like(cos)
    for c in np.unique(comp):
        cols = comp == c
        cc, ss = rope_cos_sin(pos4[:, c], cfg)
        cos[:, cols], sin[:, cols] = cc[:, cols], ss[:, cols]
    return cos, sin


def _yarn_theta(theta_extrap: np.ndarray, cfg: RopeConfig, half: int) -> np.ndarray:
    """ggml's rope_yarn: theta = interp * (1 - mix) + extrap * mix, interp = scale * extrap,
    mix = ext_factor * ramp(i), ramp(i) = 1 - clamp((i - low) / max(0.001, high - low), 0, 1)
    for the pair i (ggml's i0 / 2), low, high = corr_dims; in float32 as ggml-cpu."""
    f32 = np.float32
    low, high = f32(cfg.corr_dims[0]), f32(cfg.corr_dims[1])
    y = (np.arange(half, dtype=np.float32) - low) / max(f32(0.001), f32(high - low))
    mix = (f32(1.0) - np.minimum(f32(1.0), np.maximum(f32(0.0), y))) * f32(cfg.ext_factor)  # (half,)
    interp = theta_extrap * f32(cfg.scale)
    return (interp * (f32(1.0) - mix) + theta_extrap * mix).astype(np.float32)


def yarn_corr_dims(n_dims: int, n_ctx_orig: int, base: float, beta_fast: float, beta_slow: float) -> tuple[float, float]:
    """ggml_rope_yarn_corr_dims: the pairs between which YaRN's ramp goes from extrapolation to
    interpolation, corr_dim(b) = n_dims ln(n_ctx_orig / (2 pi b)) / (2 ln base) in float32."""
    f32 = np.float32

    def dim(beta: float) -> np.float32:
        return f32(f32(n_dims) * np.log(f32(n_ctx_orig) / (f32(beta) * f32(2) * f32(math.pi)))
                   / (f32(2) * np.log(f32(base))))

    return float(max(0.0, math.floor(dim(beta_fast)))), float(min(n_dims - 1, math.ceil(dim(beta_slow))))


@njit(cache=True, nogil=True)
def _running_theta(t, theta_scale, theta):  # type: ignore[no-untyped-def]
    """theta[p, 0] = t[p], theta[p, i + 1] = f32(theta[p, i] * theta_scale) (compiled: as a
    NumPy loop over the n_dims/2 columns it cost a decode step ~80 us per rope type)."""
    for p in range(theta.shape[0]):
        v = t[p]
        for i in range(theta.shape[1]):
            theta[p, i] = v
            v = v * theta_scale


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, n_dims: int, neox: bool, fma: bool = False) -> np.ndarray:
    """Rotate the first n_dims of each head of x (T, H, D) by (cos, sin) (T, n_dims/2).

    Pairs are (x[i], x[i + n_dims/2]) for NeoX, (x[2i], x[2i+1]) otherwise. With fma, the
    rotation rounds like ggml's compiled code: out0 = fma(x0, cos, -f32(x1 sin)),
    out1 = fma(x0 or x1, ..., f32(...)) (one rounding of the product-sum).
    """
    half = n_dims // 2
    if fma and x.ndim == 3:
        # compiled, the same arithmetic as the NumPy lines below (a decode step rotates Q and K
        # of every layer: NumPy's per-call cost was most of the time there)
        out = np.array(x, dtype=np.float32, order="C")
        _rope_fma(out, np.ascontiguousarray(cos, dtype=np.float32), np.ascontiguousarray(sin, dtype=np.float32), half, neox)
        return out
    c = cos[:, None, :]  # (T, 1, half)
    s = sin[:, None, :]
    out = x.copy()
    if neox:
        x0 = x[..., :half]
        x1 = x[..., half:n_dims]
        i0, i1 = slice(0, half), slice(half, n_dims)
    else:
        x0 = x[..., 0:n_dims:2]
        x1 = x[..., 1:n_dims:2]
        i0, i1 = slice(0, n_dims, 2), slice(1, n_dims, 2)
    if fma:
        f64 = np.float64
        out[..., i0] = (x0.astype(f64) * c - (x1 * s)).astype(np.float32)
        if neox:
            out[..., i1] = (x0.astype(f64) * s + (x1 * c)).astype(np.float32)
        else:
            out[..., i1] = (x1.astype(f64) * c + (x0 * s)).astype(np.float32)
    else:
        out[..., i0] = x0 * c - x1 * s
        out[..., i1] = x0 * s + x1 * c
    return out


@njit(cache=True, nogil=True)
def _rope_fma(x, cos, sin, half, neox):  # type: ignore[no-untyped-def]
    """In place on x (T, H, D): apply_rope's fma rotation, pair by pair. x0 * c in float64 is
    exact (two float32 significands), the other product rounded to float32, their sum rounded
    once more to float32: as the NumPy expressions of apply_rope."""
    f64 = np.float64
    for t in range(x.shape[0]):
        for h in range(x.shape[1]):
            for i in range(half):
                i0 = i if neox else 2 * i
                i1 = i + half if neox else 2 * i + 1
                x0 = x[t, h, i0]
                x1 = x[t, h, i1]
                c = cos[t, i]
                s = sin[t, i]
                x[t, h, i0] = np.float32(f64(x0) * f64(c) - f64(x1 * s))
                if neox:
                    x[t, h, i1] = np.float32(f64(x0) * f64(s) + f64(x1 * c))
                else:
                    x[t, h, i1] = np.float32(f64(x1) * f64(c) + f64(x0 * s))


def llama3_freq_factors(
    n_dims: int, base: float, factor: float, low_freq_factor: float, high_freq_factor: float, orig_ctx: int
) -> np.ndarray:
    """Llama 3 rope scaling as a per-frequency divisor (what convert_hf_to_gguf stores as
    rope_freqs.weight): 1 for high frequencies, `factor` for low ones, smooth between."""
    inv = base ** (-np.arange(0, n_dims, 2, dtype=np.float64) / n_dims)
    wavelen = 2 * math.pi / inv
    low_wl = orig_ctx / low_freq_factor
    high_wl = orig_ctx / high_freq_factor
    out = np.ones_like(inv)
    out[wavelen > low_wl] = factor
    mid = (wavelen <= low_wl) & (wavelen >= high_wl)
    smooth = (orig_ctx / wavelen[mid] - low_freq_factor) / (high_freq_factor - low_freq_factor)
    out[mid] = 1.0 / ((1 - smooth) / factor + smooth)
    return out.astype(np.float32)


def attention_mask(
    q_pos: np.ndarray, k_start: int, n_keys: int, window: int | None, see_upto: np.ndarray | None = None
) -> np.ndarray:
    """Additive mask (S, Tq, L): 0 where query at q_pos[s, t] may see key position k_start + j.

    Causal (k <= q; k <= see_upto[s, t] instead when given: non-causal attention up to that
    position) and, when window is set, sliding (q - k < window). Padded query rows
    (q_pos < 0) see nothing and must be discarded by the caller.
    """
    k_pos = np.arange(k_start, k_start + n_keys, dtype=np.int64)  # (L,)
    qp = q_pos[..., None].astype(np.int64)  # (S, Tq, 1)
    ok = k_pos <= (qp if see_upto is None else see_upto[..., None].astype(np.int64))
    if window is not None:
        ok &= (qp - k_pos) < window
    return np.where(ok, np.float32(0.0), np.float32(-np.inf))


def gqa_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, scale: float, softcap_val: float | None = None,
    sinks: np.ndarray | None = None,
) -> np.ndarray:
    """softmax(q k^T * scale + mask) v with grouped KV heads, one batched matmul.

    q: (S, H, Tq, D); k: (S, Hkv, L, D); v: (S, Hkv, L, Dv); mask: (S, Tq, L).
    Query head h uses KV head h // (H / Hkv). Returns (S, H, Tq, Dv).
    sinks (H,): a logit per head that joins each row's softmax and attends to nothing
    (gpt-oss; ggml_soft_max_add_sinks): the row's weights then sum to less than 1.
    """
    S, H, Tq, D = q.shape
    Hkv = k.shape[1]
    G = H // Hkv
    qg = q.reshape(S, Hkv, G * Tq, D)
    scores = np.matmul(qg, k.transpose(0, 1, 3, 2))  # (S, Hkv, G*Tq, L)
    if softcap_val:  # llama.cpp's graph: the cap, then soft_max's scale
        scores = softcap(scores, softcap_val)
    scores *= np.float32(scale)
    scores = scores.reshape(S, Hkv, G, Tq, -1) + mask[:, None, None, :, :]
    if sinks is not None:  # one more column per row holding its head's sink, dropped after
        sink = np.broadcast_to(sinks.astype(np.float32).reshape(1, Hkv, G, 1, 1), (S, Hkv, G, Tq, 1))
        p = softmax(np.concatenate([scores, sink], axis=-1), axis=-1)[..., :-1].reshape(S, Hkv, G * Tq, -1)
    else:
        p = softmax(scores, axis=-1).reshape(S, Hkv, G * Tq, -1)
    out = np.matmul(p, v)  # (S, Hkv, G*Tq, Dv)
    return out.reshape(S, H, Tq, -1)


def attn_temperature(positions: np.ndarray, scale: float, floor: int) -> np.ndarray:
    """Llama-4-style attention temperature, one factor per token (T,) float32 multiplying Q
    after rope (llm_graph_input_attn_temp): log(floor(pos / floor) + 1) * scale + 1, the
    division in float32 and the rest in double, as llama.cpp computes it."""
    steps = np.floor(positions.astype(np.float32) / np.float32(floor)).astype(np.float64)
    return (np.log(steps + 1.0) * np.float64(np.float32(scale)) + 1.0).astype(np.float32)
