"""The mixture-of-experts block (core/model/families/moe.py), its router kernel
(core/model/kernels/qmm/router.py), the expert matmuls (Precision.expert_linears) and the
qwen3moe family on the tiny models (parity with llama.cpp: tests/test_parity_tiny.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llamacli.core.model.families import moe
from llamacli.core.model.families.moe import MoEArgs, route
from llamacli.core.model.kernels import qmm
from llamacli.core.model.kernels.qmm.router import softmax_rows, top_k_rows
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from tests.tiny_models import GRANITE_MODELS, MOE_MODELS, TIED_EXPERTS, fixture_tokens, write_tiny_model

# every tiny model with experts (granitemoe's are listed with Granite's)
EXPERT_MODELS = [*MOE_MODELS, *(m for m in GRANITE_MODELS if m[0] == "granitemoe")]

FIXTURES = Path(__file__).parent / "fixtures"


def test_top_k_order_is_ggml_argsort_on_ties() -> None:
    """ggml_argsort is libstdc++'s std::sort: its order of equal values, for row lengths that take
    the insertion sort (<= 16), the introsort partitions and the heap sort, as g++ gives it
    (scripts/argsort_fixture.py). A stable sort differs from 17 values on."""
    z = np.load(FIXTURES / "moe" / "argsort.npz")
    for key in (k for k in z.files if k.startswith("rows_")):
        rows, want = z[key], z["order_" + key[5:]]
        np.testing.assert_array_equal(top_k_rows(rows, rows.shape[1]), want, err_msg=key)
        np.testing.assert_array_equal(top_k_rows(rows, 3), want[:, :3], err_msg=key)


def test_router_softmax_and_weights() -> None:
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal((50, 32)) * 3).astype(np.float32)
    p = softmax_rows(logits)
    ref = np.exp(logits.astype(np.float64) - logits.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(p, ref, rtol=1e-6, atol=1e-9)
    sel, w = route(p, MoEArgs(32, 4, 64, norm_weights=True))
    np.testing.assert_array_equal(sel, np.argsort(-ref, axis=1, kind="stable")[:, :4])
    np.testing.assert_allclose(w.sum(1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(w, np.take_along_axis(p, sel, 1) / np.take_along_axis(p, sel, 1).sum(1, keepdims=True), rtol=1e-6)
    _, raw = route(p, MoEArgs(32, 4, 64, norm_weights=False, weights_scale=2.5))
    np.testing.assert_array_equal(raw, np.take_along_axis(p, sel, 1) * np.float32(2.5))
    # weights that sum to ~0 are divided by the smallest normal f16, not by 0
    _, tiny = route(np.zeros((1, 8), dtype=np.float32), MoEArgs(8, 2, 64))
    assert np.all(np.isfinite(tiny)) and np.all(tiny == 0)


def test_softmax_weight_gating_takes_the_top_logits_then_their_soft_max() -> None:
    """gpt-oss's gating (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT): the top k of the raw
    logits, weighted by the soft max of those k alone (ggml's kernel), no normalisation after."""
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal((20, 16)) * 2).astype(np.float32)
    m = MoEArgs(16, 4, 64, norm_weights=False, gating="softmax_weight")
    sel, w = route(logits, m)
    np.testing.assert_array_equal(sel, np.argsort(-logits, axis=1, kind="stable")[:, :4])
    top = np.take_along_axis(logits, sel, 1)
    np.testing.assert_array_equal(w, softmax_rows(top))
    ref = np.exp(top.astype(np.float64) - top.max(1, keepdims=True))
    np.testing.assert_allclose(w, ref / ref.sum(1, keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("numerics", ["ggml", "f32"])
@pytest.mark.parametrize("variant", ["Q4_K", "F32"])
def test_expert_matmuls_equal_one_matmul_per_row(tmp_path: Path, numerics: str, variant: str) -> None:
    """Rows grouped by expert give each (token, slot) what its expert's matmul gives it alone:
    the same bits in ggml numerics; in f32 numerics BLAS sums a lone row in another order."""
    model, _, _ = load_model(write_tiny_model("qwen3moe", variant, tmp_path / "m.gguf"), numerics=numerics)
    pr = model.precision
    mw = model.layers[0].moe
    assert mw is not None
    rng = np.random.default_rng(1)
    h = rng.standard_normal((9, model.args.n_embd)).astype(np.float32)
    sel = rng.integers(0, 8, size=(9, 2))
    sel[:, 1] = (sel[:, 0] + 1 + rng.integers(0, 7, size=9)) % 8  # two different experts per token
    g, u = pr.expert_linears(h, [mw.gate, mw.up], sel)
    (d,) = pr.expert_linears(g, [mw.down], sel)  # a (T, k, n_in) input: one row per slot
    for t in range(9):
        for j in range(2):
            e = int(sel[t, j])
            for ex, x, y in ((mw.gate, h[t], g), (mw.up, h[t], u), (mw.down, g[t, j], d)):
                alone = pr.expert_matmul(pr.prepare_rows(x[None], ex.qtype), np.array([0]), ex, e)[0]
                if numerics == "ggml":
                    np.testing.assert_array_equal(y[t, j], alone)
                else:
                    np.testing.assert_allclose(y[t, j], alone, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("compiled", [False, True])
def test_decode_reads_only_the_routed_experts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiled: bool) -> None:
    """Expert weights are read-only views of the mapping, and a decode step (one matmul per
    routed expert, or the compiled step of core/model/kernels/qmm/experts.py) reads only the
    experts its router picked: with every other expert's blocks overwritten by NaN scales, its
    logits keep their bits."""
    from llamacli.core.model.families import decode_step

    monkeypatch.setattr(decode_step, "MOE_LAYERS", compiled)
    path = write_tiny_model("qwen3moe", "Q4_K", tmp_path / "m.gguf")
    model, g, _ = load_model(path, numerics="ggml")
    for lw in model.layers:
        assert lw.moe is not None and lw.moe.up.q is not None and lw.moe.up.whole is not None
        assert len(lw.moe.up.q) == 8 and lw.moe.up.whole.data.shape == (8 * 256, 144)
        for q in lw.moe.up.q:
            assert q.data.shape == (256, 144) and np.shares_memory(q.data, g.data)
    picked: list[set[int]] = []
    real_route = moe.route

    def spy_route(probs, m, *rest):  # type: ignore[no-untyped-def]
        sel, w = real_route(probs, m, *rest)
        picked.append(set(sel.reshape(-1).tolist()))
        return sel, w

    cache = model.new_cache(1, 64)
    toks = fixture_tokens("qwen3moe", 10)
    model.forward(Batch.single(toks), cache)
    monkeypatch.setattr(moe, "route", spy_route)
    model.fused_decode = False
    want = model.forward(Batch.single([toks[-1]], start_pos=10), cache)
    assert len(picked) == model.args.n_layer and all(len(p) == 2 for p in picked)
    cache.truncate(0, 10)
    for lw, p in zip(model.layers, picked):
        for ex in (lw.moe.gate, lw.moe.up, lw.moe.down):  # type: ignore[union-attr]
            assert ex.whole is not None
            bad = np.array(ex.whole.data)
            for e in set(range(8)) - p:
                bad[e * ex.n_out : (e + 1) * ex.n_out, :4] = 0xFF  # d and dmin: fp16 NaN
            bad.flags.writeable = False
            ex.whole = qmm.QuantMatrix(bad, ex.qtype, ex.n_in)
            ex.q = [qmm.QuantMatrix(bad[e * ex.n_out : (e + 1) * ex.n_out], ex.qtype, ex.n_in) for e in range(8)]
    model.fused_decode = True
    got = model.forward(Batch.single([toks[-1]], start_pos=10), cache)
    assert (model._decode_step is not None) == compiled
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("arch,variant", EXPERT_MODELS)
def test_incremental_and_batched_decoding_equal_full_forward(tmp_path: Path, arch: str, variant: str) -> None:
    """ggml numerics: a prompt in chunks, then token by token, and beside another sequence in one
    forward, gives the bits of one full forward (experts routed per row, matmuls row-invariant)."""
    model, _, _ = load_model(write_tiny_model(arch, variant, tmp_path / "m.gguf"), numerics="ggml")
    toks = fixture_tokens(arch, 20)
    full = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 64))
    cache = model.new_cache(2, 64)
    parts = [model.forward(Batch.single(toks[:7], all_logits=True), cache)]
    parts.append(model.forward(Batch.single(toks[7:12], start_pos=7, all_logits=True), cache))
    for i in range(12, 20):
        parts.append(model.forward(Batch.single(toks[i : i + 1], start_pos=i), cache))
    np.testing.assert_array_equal(np.concatenate(parts), full)
    other = fixture_tokens(arch, 25)[5:]  # a second sequence in the same forward
    batch = Batch(tokens=np.array(toks + other), seq_ids=np.array([0] * 20 + [1] * 20),
                  positions=np.concatenate([np.arange(20), np.arange(20)]), output=np.ones(40, dtype=bool))
    both = model.forward(batch, model.new_cache(2, 64))
    np.testing.assert_array_equal(both[:20], full)


@pytest.mark.parametrize("arch", ["qwen3moe", "granitemoe"])
def test_tied_router_rows_give_equal_probabilities(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arch: str) -> None:
    """The tie models' pairs of experts share a router row: ggml numerics keep their
    probabilities equal (so the sort order decides, as in llama.cpp), and the prompt puts such
    ties on the top-k edge."""
    model, _, _ = load_model(write_tiny_model(arch, "F32_TIE", tmp_path / "m.gguf"), numerics="ggml")
    edges = 0
    real_route = moe.route

    def spy(probs, m, *rest):  # type: ignore[no-untyped-def]
        nonlocal edges
        for a, b in TIED_EXPERTS:
            np.testing.assert_array_equal(probs[:, a], probs[:, b])
        s = -np.sort(-probs, axis=1)
        edges += int(np.sum(s[:, m.n_expert_used - 1] == s[:, m.n_expert_used]))
        return real_route(probs, m, *rest)

    monkeypatch.setattr(moe, "route", spy)
    model.forward(Batch.single(fixture_tokens(arch), all_logits=True), model.new_cache(1, 64))
    assert edges >= 4
