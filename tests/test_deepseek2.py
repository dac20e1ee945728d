"""deepseek2 (multi-head latent attention): the cache llama.cpp keeps, expert groups, the context
shift of a latent cache, and the metadata errors. Logits against llama.cpp: tests/test_parity_tiny.py
(the DEEPSEEK2_MODELS of tests/tiny_models.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.moe import MoEArgs, best_groups, route
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.latent_cache import LatentKVCache
from tests.tiny_models import fixture_tokens, rewrite_gguf, tiny_config, write_tiny_model

FIXTURES = Path(__file__).parent / "fixtures" / "tiny"


def test_absorbed_files_keep_the_latent_cache_of_llama_cpp(tmp_path: Path) -> None:
    """attn_k_b / attn_v_b files: one row [latent, rope key] per token and layer, the values a
    view of it (llama.cpp's is_mla cache: no V tensor); attn_kv_b files: per-head K and V."""
    x = tiny_config("deepseek2").extra
    model, _, _ = load_model(write_tiny_model("deepseek2", "F32", tmp_path / "a.gguf"), numerics="ggml")
    cache = model.new_cache(2, 64)
    assert isinstance(cache, LatentKVCache)
    row = x["kv_lora"] + tiny_config("deepseek2").n_rot
    assert [k.shape for k in cache.k] == [(2, 1, 64, row)] * 3
    assert all(np.shares_memory(k, v) and v.shape[-1] == x["kv_lora"] for k, v in zip(cache.k, cache.v))
    model.forward(Batch.single(fixture_tokens("deepseek2", 10)), cache)
    assert cache.nbytes_used == 10 * 3 * row * 4
    cache.copy_seq(0, 1)
    assert np.array_equal(cache.k[2][1, :, :10], cache.k[2][0, :, :10])

    old, _, _ = load_model(write_tiny_model("deepseek2", "F32_KVB", tmp_path / "b.gguf"), numerics="ggml")
    c2 = old.new_cache(1, 64)
    assert not isinstance(c2, LatentKVCache)
    assert c2.k[0].shape == (1, 4, 64, 128) and c2.v[0].shape == (1, 4, 64, x["head_dim_v"])


def test_expert_groups_choose_only_within_the_best_groups() -> None:
    rng = np.random.default_rng(0)
    probs = rng.random((50, 16), dtype=np.float32)
    m = MoEArgs(16, 4, 8, gating="sigmoid", n_group=4, n_group_used=2)
    sel, _ = route(probs, m)
    g = probs.reshape(50, 4, 4)
    score = np.sort(g, axis=2)[:, :, -2:].sum(axis=2)  # each group's two best
    best = np.argsort(-score, axis=1, kind="stable")[:, :2]
    for t in range(50):
        assert set((sel[t] // 4).tolist()) <= set(best[t].tolist())
    masked = best_groups(probs, 4, 2)
    assert np.isinf(masked).sum() == 50 * 8  # 2 groups of 4 masked per token


def test_v3_logits_need_the_expert_groups(tmp_path: Path) -> None:
    """The V3-like model matches llama.cpp (test_parity_tiny) only with its expert groups."""
    z = np.load(FIXTURES / "deepseek2-F32_V3.npz")
    model, _, _ = load_model(write_tiny_model("deepseek2", "F32_V3", tmp_path / "m.gguf"), numerics="ggml")
    toks = z["tokens"].tolist()
    assert model.args.moe is not None and model.args.moe.n_group == 4
    model.args.moe.n_group = 0
    lg = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, int(z["n_ctx"])))
    assert np.abs(lg - z["logits"]).max() > 0.1


@pytest.mark.parametrize("variant", ["F32", "F32_KVB"])
def test_context_shift_rotates_only_the_rope_part(tmp_path: Path, variant: str) -> None:
    """After a shift, layer 0's cells (which depend on their own token only) are those of the
    same tokens evaluated at their new positions: the latent (or k_nope and V) unchanged, the
    rope key rotated back (to f16 rounding)."""
    model, _, _ = load_model(write_tiny_model("deepseek2", variant, tmp_path / "m.gguf"), numerics="ggml")
    toks = fixture_tokens("deepseek2", 24)
    n_keep, n_discard = 4, 8
    cache = model.new_cache(1, 64)
    model.forward(Batch.single(toks), cache)
    model.shift_cache(cache, 0, n_keep, n_discard)
    kept = toks[:n_keep] + toks[n_keep + n_discard:]
    fresh = model.new_cache(1, 64)
    model.forward(Batch.single(kept), fresh)
    n = len(kept)
    assert int(cache.lengths[0]) == n
    r = model.mla.n_rope
    a, b = cache.k[0][0, :, :n], fresh.k[0][0, :, :n]
    assert np.array_equal(a[..., :-r], b[..., :-r])
    assert np.abs(a[..., -r:] - b[..., -r:]).max() < 2e-2
    assert np.array_equal(cache.v[0][0, :, :n], fresh.v[0][0, :, :n])


def test_half_of_the_mla_lengths_is_a_load_error(tmp_path: Path) -> None:
    src = write_tiny_model("deepseek2", "F32", tmp_path / "m.gguf")
    bad = rewrite_gguf(src, tmp_path / "bad.gguf", drop_keys=("deepseek2.attention.value_length_mla",))
    with pytest.raises(ModelLoadError, match="key_length_mla and value_length_mla"):
        load_model(bad, numerics="ggml")
