"""core/model/families/nemotronh.py (nemotron_h: Nemotron-H / Nemotron Nano 2): which part each
layer runs as llama.cpp decides it, the keys' defaults, the squared-ReLU FFN, the cache (cells
only for the attention layers, states only for the Mamba-2 ones), incremental and batched
decoding, and the recurrent state in the engine: llama-server's prompt reuse, its context shift
(llama.cpp's logits after it), slot files, speculative rollback. The logits and greedy tokens
against llama.cpp's are in test_parity_tiny.py (nemotron_h and nemotron_h_moe, F32 and Q8_0)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.mamba2 import Mamba2Weights
from llamacli.core.model.families.nemotronh import NemotronHModel, NemotronHMoeModel
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.recurrent import HybridCache
from llamacli.core.runtime.engine import Engine, EngineConfig
from llamacli.core.runtime.tasks import Task, TaskParams
from llamacli.core.sampling import SamplingParams
from llamacli.core.text.tokenizer import load_tokenizer
from tests.test_models_granitehybrid import (check_incremental_and_batched, check_slot_round_trip,
                                             check_speculative_rollback, logits_after_shift)
from tests.tiny_models import rewrite_gguf, write_tiny_model

ARCH = "nemotron_h"
FIXTURES = Path(__file__).parent / "fixtures" / "tiny"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = write_tiny_model(ARCH, "Q8_0", tmp_path_factory.mktemp("nh") / "n.gguf")
    model, g, _ = load_model(path, numerics="ggml")
    return model, load_tokenizer(g.metadata)


@pytest.fixture(scope="module")
def f32_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(ARCH, "F32", tmp_path_factory.mktemp("nh") / "f.gguf")


def test_each_layer_runs_the_part_llama_cpp_gives_it(tiny) -> None:  # type: ignore[no-untyped-def]
    """"M-M*-M": feed_forward_length > 0 an FFN layer, else head_count_kv > 0 attention, else
    Mamba-2; no rope, Q.K times 1/sqrt(64), the norms' epsilon from layer_norm_epsilon."""
    model, _ = tiny
    assert isinstance(model, NemotronHModel)
    a = model.args
    assert model.recurrent == (True, False, True, False, False, True)
    assert model.attention_layers == (False, False, False, True, False, False)
    assert a.extra["n_ff"] == (0, 768, 0, 0, 768, 0)
    assert (a.n_head, a.n_head_kv, a.head_dim, a.attn_scale, a.rope.scale) == (4, 2, 64, 0.125, 0.0)
    assert a.norm_eps == np.float32(1e-5) and a.embed_scale is None
    m = model.ssm
    assert (m.d_conv, m.d_inner, m.d_state, m.n_head, m.n_group) == (4, 512, 64, 8, 2)
    for il, lw in enumerate(model.layers):
        kind = "M-M*-M"[il]
        assert (lw.w_up is not None, lw.wq is not None, isinstance(lw.mixer, Mamba2Weights)) == (
            kind == "-", kind == "*", kind == "M")
        assert lw.w_gate is None and lw.moe is None
    assert model.layers[0].mixer is not None and model.layers[0].mixer.norm.shape == (2, 256)  # grouped RMS norm
    cache = model.new_cache(2, 32)
    assert isinstance(cache, HybridCache) and sorted(cache.ssm) == [0, 2, 5]
    assert [cache.k[il].shape[1] for il in range(6)] == [0, 0, 0, 2, 0, 0]  # cells for the attention layer only


def test_keys_default_as_llama_cpp(f32_file: Path, tmp_path: Path) -> None:
    """layer_norm_rms_epsilon, where present, wins over layer_norm_epsilon; without either the
    file is refused naming the key; without head_count_kv every non-FFN layer attends (n_head_kv
    defaults to head_count), so a Mamba-2 layer's missing attn_q is the error."""
    rms = {f"{ARCH}.attention.layer_norm_rms_epsilon": (1e-6, gguf.GGUFValueType.FLOAT32)}
    model, _, _ = load_model(rewrite_gguf(f32_file, tmp_path / "r.gguf", set_values=rms))
    assert model.args.norm_eps == np.float32(1e-6)
    with pytest.raises(ModelLoadError, match="layer_norm_epsilon"):
        load_model(rewrite_gguf(f32_file, tmp_path / "e.gguf", drop_keys=(f"{ARCH}.attention.layer_norm_epsilon",)))
    with pytest.raises(ModelLoadError, match="blk.0.attn_q"):
        load_model(rewrite_gguf(f32_file, tmp_path / "k.gguf", drop_keys=(f"{ARCH}.attention.head_count_kv",)))
    no_heads = {f"{ARCH}.attention.head_count": (0, gguf.GGUFValueType.UINT32)}
    with pytest.raises(ModelLoadError, match="head_count' is 0 on a layer that attends"):
        load_model(rewrite_gguf(f32_file, tmp_path / "h.gguf", set_values=no_heads))
    with pytest.raises(ModelLoadError, match="blk.1.ffn_down"):
        load_model(rewrite_gguf(f32_file, tmp_path / "d.gguf", drop="blk.1.ffn_down.weight"))


def test_the_conv_bias_is_optional(f32_file: Path, tmp_path: Path) -> None:
    model, _, _ = load_model(rewrite_gguf(f32_file, tmp_path / "c.gguf", drop="blk.2.ssm_conv1d.bias"))
    mw = model.layers[2].mixer
    assert isinstance(mw, Mamba2Weights) and mw.conv_b is None
    assert np.isfinite(model.forward(Batch.single([5, 6, 7]), model.new_cache(1, 8))).all()


def test_squared_relu_ffn(tiny) -> None:  # type: ignore[no-untyped-def]
    """An FFN layer's block: down(relu(up(rms_norm(x)))^2) added to x (ggml_relu, ggml_sqr); a
    plain ReLU would give another result."""
    model, _ = tiny
    lw, pr = model.layers[1], model.precision
    x = np.random.default_rng(3).standard_normal((3, 256)).astype(np.float32)
    no_angles = np.zeros((3, 0), dtype=np.float32)
    out = model.block(1, lw, x, Batch.single([5, 6, 7]), model.new_cache(1, 8), [], no_angles, no_angles)
    u = pr.linear(K.rms_norm(x, lw.attn_norm, model.args.norm_eps), lw.w_up)
    want = pr.linear(np.maximum(u, 0) ** 2, lw.w_down)
    np.testing.assert_array_equal(out, x + want)
    assert (u < 0).any() and np.abs(pr.linear(np.maximum(u, 0), lw.w_down) - want).max() > 0.1


def test_incremental_and_batched_decoding_equal_full_forward(tiny) -> None:  # type: ignore[no-untyped-def]
    check_incremental_and_batched(tiny[0], ARCH)


def test_context_shift_gives_llama_cpps_logits(f32_file: Path) -> None:
    """llama-server's shift on nemotron_h (scripts/oracle_fixtures.py make_hybrid_shift): rope type
    NONE, so llama.cpp moves the attention cells' positions and leaves their keys; the Mamba-2
    states stay as they are. The next decodes give llama.cpp's logits; clearing the states
    instead would not."""
    z = np.load(FIXTURES / f"{ARCH}-F32-shift.npz")
    model, _, _ = load_model(f32_file, numerics="ggml")
    assert np.abs(logits_after_shift(model, z, False) - z["logits"]).max() < 0.01
    assert np.abs(logits_after_shift(model, z, True) - z["logits"]).max() > 0.1


def test_prompt_cache_reuses_what_llama_server_reuses(tiny) -> None:  # type: ignore[no-untyped-def]
    """The /completion requests llama-server answered on this file (tests/fixtures/tiny/
    nemotron_h-Q8_0-server.json, scripts/oracle_fixtures.py --hybrid-server), replayed on one slot
    of the engine: the prompt tokens reused (the same prompt again and a part of it: back to the
    context checkpoint; a continuation: the whole state; a short other prompt: nothing) and the
    tokens are llama-server's."""
    model, tok = tiny
    steps = json.loads((FIXTURES / f"{ARCH}-Q8_0-server.json").read_text())["steps"]
    assert [st["cache_n"] for st in steps] == [0, 33, 42, 33, 0]
    params = TaskParams(n_predict=6, sampling=SamplingParams(temperature=0.0))
    with Engine(model, tok, EngineConfig(n_ctx=512, n_parallel=1)) as eng:
        for st in steps:
            f = eng.run(Task(st["prompt"], params))
            # llama-server's tokens end with the end-of-generation token that stopped it
            ended = [t for t in st["tokens"][-1:] if f.stop_type == "eos" and t in tok.vocab.eog_ids]
            assert (f.tokens_cached, f.tokens + ended) == (st["cache_n"], st["tokens"])


def test_slot_file_round_trip_carries_the_recurrent_state(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    check_slot_round_trip(tiny[0], ARCH, tmp_path)


def test_speculative_decoding_rolls_the_state_back(tiny) -> None:  # type: ignore[no-untyped-def]
    check_speculative_rollback(*tiny, 2, 5)


@pytest.fixture(scope="module")
def moe_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model("nemotron_h_moe", "F32", tmp_path_factory.mktemp("nhm") / "m.gguf")


def test_experts_as_nemotron_3_nano(moe_file: Path, tmp_path: Path) -> None:
    """nemotron_h_moe: the FFN layers are a sigmoid router (top 2 chosen with exp_probs_b,
    normalised, times 2.5) over experts of up and down only plus one shared expert of 512 rows;
    trailing nextn (MTP) blocks are not run; experts in a latent space are refused."""
    model, _, _ = load_model(moe_file, numerics="ggml")
    assert isinstance(model, NemotronHMoeModel) and model.recurrent == (True, False, True, False, False, True)
    m = model.args.moe
    assert m is not None and (m.n_expert, m.n_expert_used, m.n_ff_exp, m.gating, m.probs_bias, m.norm_weights,
                              m.weights_scale, m.gated, m.n_group) == (8, 2, 256, "sigmoid", True, True, 2.5, False, 0)
    for il in (1, 4):
        mw = model.layers[il].moe
        assert mw is not None and mw.gate is None and mw.probs_bias is not None and mw.shared is not None
        assert mw.shared[0] is None and mw.shared[1].n_out == 512
    check_incremental_and_batched(model, "nemotron_h_moe")
    nextn = {"nemotron_h_moe.nextn_predict_layers": (1, gguf.GGUFValueType.UINT32)}
    short, _, _ = load_model(rewrite_gguf(moe_file, tmp_path / "n.gguf", set_values=nextn))
    assert short.args.n_layer == 5 and short.recurrent == (True, False, True, False, False)
    latent = {"nemotron_h_moe.moe_latent_size": (64, gguf.GGUFValueType.UINT32)}
    with pytest.raises(ModelLoadError, match="moe_latent_size"):
        load_model(rewrite_gguf(moe_file, tmp_path / "l.gguf", set_values=latent))
