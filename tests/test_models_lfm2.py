"""core/model/families/lfm2.py and shortconv.py (lfm2: Liquid LFM2): which layers are short convs,
the mixer against its formula, the keys llama.cpp requires or refuses, incremental and batched
decoding, and the conv state in the engine: llama-server's prompt reuse, its context shift
(llama.cpp's logits after it), slot files, speculative rollback. The logits and greedy tokens
against llama.cpp's are in test_parity_tiny.py (lfm2 and lfm2moe, F32 and Q8_0)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.lfm2 import Lfm2Model, Lfm2MoeModel
from llamacli.core.model.families.shortconv import ShortConvWeights
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.recurrent import HybridCache
from llamacli.core.text.tokenizer import load_tokenizer
from tests.test_models_granitehybrid import (check_incremental_and_batched, check_server_prompt_reuse,
                                             check_slot_round_trip, check_speculative_rollback, logits_after_shift)
from tests.tiny_models import rewrite_gguf, write_tiny_model

ARCH = "lfm2"
FIXTURES = Path(__file__).parent / "fixtures" / "tiny"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = write_tiny_model(ARCH, "Q8_0", tmp_path_factory.mktemp("lfm") / "q.gguf")
    model, g, _ = load_model(path, numerics="ggml")
    return model, load_tokenizer(g.metadata)


@pytest.fixture(scope="module")
def f32_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(ARCH, "F32", tmp_path_factory.mktemp("lfm") / "f.gguf")


def test_layers_and_cache_as_llama_cpp_reads_them(tiny) -> None:  # type: ignore[no-untyped-def]
    """"CCACAC": head_count_kv 0 a short conv (kernel shortconv.l_cache), else attention with Q/K
    norms and NeoX rope; the final norm token_embd_norm; K/V cells for the attention layers only,
    a conv state of (n_embd, L - 1) for the others."""
    model, _ = tiny
    assert isinstance(model, Lfm2Model)
    a = model.args
    assert model.recurrent == (True, True, False, True, False, True)
    assert (a.n_head, a.n_head_kv, a.head_dim, a.attn_scale, a.rope.neox, a.extra["l_cache"]) == (4, 2, 64, 0.125, True, 3)
    for lw in model.layers:
        assert (lw.wq is None) == isinstance(lw.mixer, ShortConvWeights)
        assert lw.w_gate is not None and (lw.q_norm is not None) == (lw.wq is not None)
    cache = model.new_cache(2, 32)
    assert isinstance(cache, HybridCache) and sorted(cache.conv) == [0, 1, 3, 5]
    assert cache.conv[0].shape == (2, 256, 2) and cache.ssm[0].size == 0
    assert [cache.k[il].shape[1] for il in range(6)] == [0, 0, 2, 0, 2, 0]


def test_short_conv_is_its_formula(tiny) -> None:  # type: ignore[no-untyped-def]
    """out = out_proj(c * conv(b * x)), b, c, x the in_proj's three parts, the conv causal over
    the sequence's last L inputs (zeros before its start)."""
    model, _ = tiny
    lw, pr = model.layers[0], model.precision
    mw = lw.mixer
    assert isinstance(mw, ShortConvWeights)
    h = K.rms_norm(np.random.default_rng(3).standard_normal((5, 256)).astype(np.float32), lw.attn_norm, 1e-5)
    got = model.recurrent_mixer(0, lw, h, Batch.single([1, 2, 3, 4, 5]), model.new_cache(1, 8))
    bcx = pr.linear(h, mw.in_proj).astype(np.float64)
    bx = np.vstack([np.zeros((2, 256)), bcx[:, :256] * bcx[:, 512:]])
    conv = np.stack([(bx[t:t + 3].T * mw.conv_w).sum(1) for t in range(5)])
    want = pr.linear((bcx[:, 256:512] * conv).astype(np.float32), mw.out_proj)
    assert np.abs(got - want).max() < 1e-3 * np.abs(want).max()


def test_keys_llama_cpp_requires_or_we_refuse(f32_file: Path, tmp_path: Path) -> None:
    for key in ("shortconv.l_cache", "attention.layer_norm_rms_epsilon"):
        with pytest.raises(ModelLoadError, match=key):
            load_model(rewrite_gguf(f32_file, tmp_path / "k.gguf", drop_keys=(f"{ARCH}.{key}",)))
    swa = {f"{ARCH}.attention.sliding_window": (128, gguf.GGUFValueType.UINT32)}
    with pytest.raises(ModelLoadError, match="sliding_window"):
        load_model(rewrite_gguf(f32_file, tmp_path / "w.gguf", set_values=swa))
    with pytest.raises(ModelLoadError, match="token_embd_norm"):
        load_model(rewrite_gguf(f32_file, tmp_path / "n.gguf", drop="token_embd_norm.weight"))
    with pytest.raises(ModelLoadError, match="blk.1.shortconv.conv"):
        load_model(rewrite_gguf(f32_file, tmp_path / "c.gguf", drop="blk.1.shortconv.conv.weight"))


def test_incremental_and_batched_decoding_equal_full_forward(tiny) -> None:  # type: ignore[no-untyped-def]
    check_incremental_and_batched(tiny[0], ARCH)


def test_context_shift_gives_llama_cpps_logits(f32_file: Path) -> None:
    """llama-server's shift on lfm2 (scripts/oracle_fixtures.py make_hybrid_shift): the attention
    cells move down and their keys turn back (NeoX rope), the conv states stay as they are. The
    next decodes give llama.cpp's logits; clearing the states instead would not."""
    z = np.load(FIXTURES / f"{ARCH}-F32-shift.npz")
    model, _, _ = load_model(f32_file, numerics="ggml")
    assert np.abs(logits_after_shift(model, z, False) - z["logits"]).max() < 0.01
    assert np.abs(logits_after_shift(model, z, True) - z["logits"]).max() > 0.1


def test_prompt_cache_reuses_what_llama_server_reuses(tiny) -> None:  # type: ignore[no-untyped-def]
    """llama-server's prompt reuse and tokens on the Q8_0 file (recorded with `-fa off`:
    scripts/oracle_fixtures.py HYBRID_SERVER_FLAGS)."""
    check_server_prompt_reuse(*tiny, ARCH)


def test_slot_file_round_trip_carries_the_conv_state(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    check_slot_round_trip(tiny[0], ARCH, tmp_path)


def test_speculative_decoding_rolls_the_state_back(tiny) -> None:  # type: ignore[no-untyped-def]
    check_speculative_rollback(*tiny, 2, 5)


def test_experts_as_lfm2_8b_a1b(tmp_path: Path) -> None:
    """lfm2moe: after leading_dense_block_count dense layers, a router of expert_gating_func
    (sigmoid) choosing the top 2 with exp_probs_b, weights normalised and not scaled, over experts
    of expert_feed_forward_length rows; a gating function llama.cpp would not run is refused."""
    path = write_tiny_model("lfm2moe", "F32", tmp_path / "m.gguf")
    model, _, _ = load_model(path, numerics="ggml")
    assert isinstance(model, Lfm2MoeModel) and model.recurrent == (True, True, False, True, False, True)
    m = model.args.moe
    assert m is not None and (m.n_expert, m.n_expert_used, m.n_ff_exp, m.gating, m.probs_bias, m.norm_weights,
                              m.weights_scale, m.n_shared) == (8, 2, 256, "sigmoid", True, True, 0.0, 0)
    assert [lw.moe is not None for lw in model.layers] == [False, False, True, True, True, True]
    check_incremental_and_batched(model, "lfm2moe")
    none = {"lfm2moe.expert_gating_func": (0, gguf.GGUFValueType.UINT32)}
    with pytest.raises(ModelLoadError, match="expert_gating_func is 0"):
        load_model(rewrite_gguf(path, tmp_path / "g.gguf", set_values=none))
