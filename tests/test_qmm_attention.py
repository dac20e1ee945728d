"""The compiled attention of f16 values (core/model/kernels/qmm/attention.py): its documented order of
operations, a float64 reference, and the invariances the runtime relies on."""

from __future__ import annotations

import math

import numpy as np

from llamacli.core.model.kernels import ops as K
from llamacli.core.model.kernels.qmm.attention import attention
from tests.test_qmm_expf import ref_exp_sum

f32, f64 = np.float32, np.float64


def _f16(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float16).astype(f32)


def _inputs(S: int, H: int, Hkv: int, Tq: int, L: int, D: int, Dv: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((S, H, Tq, D)).astype(f32)
    k = _f16(rng.standard_normal((S, Hkv, L, D)).astype(f32))  # the cache holds f16 values
    v = _f16(rng.standard_normal((S, Hkv, L, Dv)).astype(f32))
    return q, k, v


def _spec(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, scale: float, cap: float | None,
          sinks: np.ndarray | None = None) -> np.ndarray:
    """The module's documented order, written with NumPy: float32 sums in order of d (scores)
    and of l (the V product), each step one rounding; ggml's exp over each row's visible keys
    and its sum order (test_qmm_expf.ref_exp_sum); a head's sink in the max and, after the
    keys, in the float64 sum (ggml_soft_max_f32). Equal bits expected."""
    S, H, Tq, D = q.shape
    G = H // k.shape[1]
    out = np.zeros((S, H, Tq, v.shape[3]), dtype=f32)
    for s in range(S):
        for hq in range(H):
            qh, kh, vh = _f16(q[s, hq]), k[s, hq // G], v[s, hq // G]
            sc = np.zeros((Tq, kh.shape[0]), dtype=f32)
            for d in range(D):
                sc = sc + qh[:, d : d + 1] * kh[None, :, d]  # exact products, one f32 rounding per step
            w = sc
            if cap:  # llama.cpp's graph: kq * f32(1 / cap), tanh, * cap, then soft_max's scale
                c = f32(cap)
                w = np.vectorize(lambda x: f32(math.tanh(f64(x * (f32(1) / c)))))(w).astype(f32) * c
            w = w * f32(scale) if scale != 1.0 else w
            w = (w + mask[s]).astype(f32)
            m = np.max(w, axis=-1, keepdims=True)
            if sinks is not None:
                m = np.maximum(m, sinks[hq])
            m[~np.isfinite(m)] = 0
            e = np.zeros_like(w)
            total = np.zeros((Tq, 1), dtype=f64)
            for t in range(Tq):
                vis = np.flatnonzero(mask[s, t] == 0)  # one run of visible keys
                if vis.size:
                    a, b = vis[0], vis[-1] + 1
                    e[t, a:b], total[t, 0] = ref_exp_sum((w[t, a:b] - m[t]).astype(f32))
                if sinks is not None:
                    total[t, 0] += f64(f32(math.exp(f64(sinks[hq] - m[t, 0]))))
            with np.errstate(divide="ignore"):
                inv = np.where(total > 0, 1.0 / total, 0.0).astype(f32)
            p = _f16(e * inv)
            acc = np.zeros((Tq, vh.shape[1]), dtype=f32)
            for l in range(vh.shape[0]):
                acc = acc + p[:, l : l + 1] * vh[None, l]
            out[s, hq] = acc
    return out


def _float64_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, scale: float,
                       sinks: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """softmax in float64 of f16(q) k^T * scale + mask (and each head's sink logit, which
    attends to nothing), times v; and sum_l p_l |v_l| (the scale of the tolerance)."""
    G = q.shape[1] // k.shape[1]
    kk = np.repeat(k, G, axis=1).astype(f64)
    vv = np.repeat(v, G, axis=1).astype(f64)
    w = np.einsum("shtd,shld->shtl", _f16(q).astype(f64), kk) * scale + mask[:, None].astype(f64)
    sink = np.full(q.shape[:3] + (1,), -np.inf) if sinks is None else np.broadcast_to(
        sinks.astype(f64)[None, :, None, None], q.shape[:3] + (1,))
    mx = np.maximum(w.max(-1, keepdims=True), sink)
    p = np.exp(w - mx)
    p /= p.sum(-1, keepdims=True) + np.exp(sink - mx)
    return np.einsum("shtl,shlj->shtj", p, vv), np.einsum("shtl,shlj->shtj", p, np.abs(vv))


def test_follows_the_documented_order_bit_for_bit() -> None:
    """Odd shapes: 9 rows per KV head (two blocks of 4 and one alone), a width of 40 (32 + 8
    columns), 45 keys (two tiles, the second partly used), a causal mask and a window."""
    q, k, v = _inputs(2, 3, 1, 3, 45, 24, 40)
    qpos = np.array([[20, 30, 44], [5, 6, 7]])
    for window, scale, cap in ((None, 0.2, None), (8, 1.0, None), (None, 0.125, 5.0)):
        mask = K.attention_mask(qpos, 0, 45, window)
        assert np.array_equal(attention(q, k, v, mask, scale, cap), _spec(q, k, v, mask, scale, cap))


def test_close_to_float64_softmax_attention() -> None:
    """Against float64 maths: the probabilities are rounded to f16 (a relative step of 2^-11),
    the rest costs a few float32 steps; so |out - ref| <= 2^-10 * sum_l p_l |v_l| + 1e-6."""
    q, k, v = _inputs(1, 8, 2, 20, 300, 128, 128, seed=1)
    qpos = np.arange(280, 300)[None, :]
    mask = K.attention_mask(qpos, 0, 300, None)
    out = attention(q, k, v, mask, 1 / math.sqrt(128), None)
    ref, mag = _float64_reference(q, k, v, mask, 1 / math.sqrt(128))
    assert np.all(np.abs(out - ref) <= 2.0**-10 * mag + 1e-6)


def test_sinks_follow_the_documented_order_and_float64_maths() -> None:
    """gpt-oss's attention sinks: bit for bit the documented order (the sink in the max and
    added to the sum after the keys), and within the float64 bound of a softmax whose extra
    logit takes weight from every key (rows sum to less than 1); the f32 numerics' NumPy path
    (K.gqa_attention) agrees with the same reference."""
    q, k, v = _inputs(2, 4, 2, 5, 40, 32, 32, seed=3)
    sinks = np.array([3.0, -1.0, 0.5, 8.0], dtype=f32)  # 8: a sink above every score
    qpos = np.array([[10, 20, 30, 38, 39], [0, 1, 2, 3, 4]])
    for window in (None, 8):
        mask = K.attention_mask(qpos, 0, 40, window)
        out = attention(q, k, v, mask, 0.125, None, sinks)
        assert np.array_equal(out, _spec(q, k, v, mask, 0.125, None, sinks))
        ref, mag = _float64_reference(q, k, v, mask, 0.125, sinks)
        assert np.all(np.abs(out - ref) <= 2.0**-10 * mag + 1e-6)
        plain = K.gqa_attention(_f16(q), k, v, mask, 0.125, None, sinks)
        np.testing.assert_allclose(plain, ref, rtol=1e-5, atol=1e-6)
        assert not np.allclose(out, attention(q, k, v, mask, 0.125, None))  # the sinks change it


def test_row_alone_equals_row_in_a_batch() -> None:
    """A sequence's rows give the same bits alone, beside others whose keys pad the batch
    (decode: one query each), inside a larger block of queries, and for a key window that
    starts elsewhere (a batch's k_start)."""
    q, k, v = _inputs(3, 4, 1, 1, 64, 256, 256, seed=2)
    qpos = np.array([[40], [63], [10]])
    mask = K.attention_mask(qpos, 0, 64, None)
    together = attention(q, k, v, mask, 1.0, None)
    for s in range(3):
        n = int(qpos[s, 0]) + 1
        alone = attention(q[s : s + 1], k[s : s + 1, :, :n], v[s : s + 1, :, :n], mask[s : s + 1, :, :n], 1.0, None)
        assert np.array_equal(alone, together[s : s + 1])
    # queries 0..19 of one sequence at once, then 7..12 alone, then query 12 over keys 3..12 only
    q, k, v = _inputs(1, 4, 1, 20, 20, 64, 64, seed=3)
    full = attention(q, k, v, K.attention_mask(np.arange(20)[None], 0, 20, None), 1.0, None)
    part = attention(q[:, :, 7:13], k, v, K.attention_mask(np.arange(7, 13)[None], 0, 20, None), 1.0, None)
    assert np.array_equal(part, full[:, :, 7:13])
    win = attention(q[:, :, 12:13], k[:, :, 3:13], v[:, :, 3:13], K.attention_mask(np.array([[12]]), 3, 10, 10), 1.0, None)
    full_w = attention(q, k, v, K.attention_mask(np.arange(20)[None], 0, 20, 10), 1.0, None)
    assert np.array_equal(win, full_w[:, :, 12:13])


def test_a_query_that_sees_no_key_gets_zeros() -> None:
    q, k, v = _inputs(1, 2, 1, 2, 8, 16, 16)
    mask = K.attention_mask(np.array([[-1, 3]]), 0, 8, None)  # a padded query row (position -1)
    out = attention(q, k, v, mask, 1.0, None)
    assert np.all(out[:, :, 0] == 0) and np.all(np.isfinite(out))


def test_key_tiles_hold_the_keys_transposed() -> None:
    """The score tiles' keys (_transpose_keys): every value of [klo, khi) at its place, the
    tiles' other keys 0, for contiguous rows of 16-multiple sizes (register transposes), other
    sizes and strided views (one value at a time), key ranges cut anywhere."""
    from llamacli.core.model.kernels.qmm.attention import KEY_TILE, _transpose_keys

    rng = np.random.default_rng(5)
    for d in (256, 64, 40):
        kc = rng.standard_normal((3, 2, 130, d)).astype(f32)
        for view in (kc, kc[:, :, 3:120], kc[1:2, :, 5:77], kc[..., ::2]):
            n, dd = view.shape[2], view.shape[3]
            lp = -(-n // KEY_TILE) * KEY_TILE
            for klo, khi in ((0, n), (5, n), (0, n - 3), (17, max(18, n - 20)), (33, n), (0, 1)):
                got = np.full(dd * lp, np.nan, dtype=f32)
                _transpose_keys(view, view.shape[0] - 1, 1, klo, khi, got, lp)
                want = np.zeros((lp, dd), dtype=f32)
                want[klo:khi] = view[-1, 1, klo:khi]
                tiles = want.reshape(lp // KEY_TILE, KEY_TILE, dd).transpose(0, 2, 1).reshape(-1)  # (tile, d, key)
                a, b = klo // KEY_TILE * KEY_TILE * dd, -(-khi // KEY_TILE) * KEY_TILE * dd
                assert np.array_equal(got[a:b], tiles[a:b]), (d, klo, khi, view.shape)


def _f32_inputs(h: int, tq: int, l: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((1, h, n, d)).astype(f32) for n in (tq, l, l))  # type: ignore[return-value]


def test_f32_attention_matches_float64_reference() -> None:
    """The encoders' attention (attention_f32: nothing rounded to f16, no mask): softmax(q k^T *
    scale) v in float64, to float32 accuracy."""
    from llamacli.core.model.kernels.qmm.attention import attention_f32

    q, k, v = _f32_inputs(3, 37, 100, 72, seed=21)
    scale = 1.0 / math.sqrt(72.0)
    got = attention_f32(q, k, v, scale)
    s = np.einsum("shtd,shld->shtl", q.astype(f64), k.astype(f64)) * scale
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    want = np.einsum("shtl,shld->shtd", p / p.sum(axis=-1, keepdims=True), v.astype(f64))
    assert got.shape == want.shape
    assert np.max(np.abs(got - want)) < 2e-6 * np.max(np.abs(want)) + 1e-6


def test_f32_attention_row_does_not_depend_on_its_block() -> None:
    """A query row's output is the same bits whichever rows share its call (8-row pairs, 4-row
    blocks, single rows: each tile sums the same chain) and whatever the head count."""
    from llamacli.core.model.kernels.qmm.attention import attention_f32

    q, k, v = _f32_inputs(2, 21, 70, 72, seed=22)
    whole = attention_f32(q, k, v, 0.125)
    for a, b in ((0, 8), (3, 12), (9, 10), (16, 21)):
        part = attention_f32(q[:, :, a:b], k, v, 0.125)
        assert np.array_equal(part.view(np.uint32), whole[:, :, a:b].view(np.uint32))
    one_head = attention_f32(q[:, 1:], k[:, 1:], v[:, 1:], 0.125)
    assert np.array_equal(one_head.view(np.uint32), whole[:, 1:].view(np.uint32))
