"""core/model/families/gemma2.py and gemma.py (Gemma 1): what they read from the file, the greedy
continuations against llama.cpp's, and the compiled one-token step (the teacher-forced logits
against llama.cpp's are in test_parity_tiny.py)."""

from __future__ import annotations

import math
from pathlib import Path

import gguf
import numpy as np
import pytest

from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.families.gemma import GemmaModel
from llamacli.core.model.families.gemma2 import Gemma2Model
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.text.chat_templates.detect import default_builtin
from tests.test_decode_step import _decode_together
from tests.tiny_models import GEMMA2_MODELS, GEMMA_MODELS, fixture_tokens, rewrite_gguf, write_tiny_model

FIXTURES = Path(__file__).parent / "fixtures" / "tiny"
MODELS = GEMMA2_MODELS + GEMMA_MODELS


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    d = tmp_path_factory.mktemp("gemma2")
    return {(a, v): write_tiny_model(a, v, d / f"{a}-{v}.gguf") for a, v in MODELS}


@pytest.fixture(scope="module")
def models(files: dict[tuple[str, str], Path]) -> dict[tuple[str, str], DecoderModel]:
    return {m: load_model(p, numerics="ggml")[0] for m, p in files.items()}


def test_hyperparameters_as_llama_cpp_reads_them(models: dict[tuple[str, str], DecoderModel]) -> None:
    model = models["gemma2", "F32"]
    assert isinstance(model, Gemma2Model)
    a = model.args
    assert (a.attn_softcap, a.final_softcap) == (5.0, 8.0)  # the file's caps
    assert a.sliding_window == 16 and a.swa_layers == (True, False, True, False)  # pattern 2: even layers slide
    assert a.scale_q and a.attn_scale == float(np.float32(1) / np.sqrt(np.float32(128)))  # 1/sqrt(head_dim)
    assert a.embed_scale == 16.0 and a.activation == "gelu" and a.rope.neox
    assert a.rope_swa is None and model.ropes(128) == (a.rope, a.rope)  # one rope: no rope.freq_base_swa
    assert model.layers[0].q_norm is None and model.layers[0].post_ffn_norm is not None


def test_gemma_1_has_neither_window_nor_caps_nor_post_norms(models: dict[tuple[str, str], DecoderModel]) -> None:
    model = models["gemma", "F32"]
    assert isinstance(model, GemmaModel)
    a = model.args
    assert a.attn_softcap is None and a.final_softcap is None and a.sliding_window is None
    assert not any(a.swa_layers) and model.layers[0].post_attn_norm is None
    assert a.scale_q and a.attn_scale == float(np.float32(1) / np.sqrt(np.float32(128)))  # 1/sqrt(head_dim_v)
    assert a.embed_scale == 16.0 and a.activation == "gelu" and a.rope.neox


def test_defaults_where_the_file_is_silent(files: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    """llama.cpp's defaults: caps 50 and 30, window 4096; the 27B (46 layers) scales Q by
    1/sqrt(n_embd / n_head); `rope.freq_base_swa` gives the sliding layers their own base."""
    u32, f32 = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.FLOAT32
    dst = rewrite_gguf(files["gemma2", "F32"], tmp_path / "d.gguf",
                       drop_keys=("gemma2.attn_logit_softcapping", "gemma2.final_logit_softcapping",
                                  "gemma2.attention.sliding_window"),
                       set_values={"gemma2.block_count": (46, u32), "gemma2.rope.freq_base_swa": (5000.0, f32)})
    a = Gemma2Model.read_args(GGUFFile(dst))
    assert (a.attn_softcap, a.final_softcap, a.sliding_window) == (50.0, 30.0, 4096)
    assert a.swa_layers == tuple(il % 2 == 0 for il in range(46))
    assert a.attn_scale == pytest.approx(1 / math.sqrt(256 // 4), rel=1e-7)
    assert a.rope_swa is not None and a.rope_swa.base == 5000.0 and a.rope.base == 10000.0


@pytest.mark.parametrize("arch,variant", MODELS)
def test_greedy_continuation_equals_llama_cpp(models: dict[tuple[str, str], DecoderModel], arch: str, variant: str) -> None:
    """Our own 16 greedy tokens after the 40-token prompt (gemma2: past the 16-token window; Q4_K:
    each step through the compiled decode step) are llama.cpp's, every one: the tiny files' steps
    are clear of near-ties (llama.cpp's top two at least 0.014 apart on gemma2 F32, 0.09 on the others)."""
    z = np.load(FIXTURES / f"{arch}-{variant}.npz")
    assert greedy_tokens(models[arch, variant], z) == z["greedy"].tolist()


def greedy_tokens(model: DecoderModel, z: np.lib.npyio.NpzFile) -> list[int]:
    """Our own greedy tokens after a fixture's prompt, as many as llama.cpp's, token by token
    through the cache (the gemma families' tests)."""
    toks = z["tokens"].tolist()
    cache = model.new_cache(1, int(z["n_ctx"]))
    lg = model.forward(Batch.single(toks), cache)[-1]
    got = []
    for i in range(len(z["greedy"])):
        got.append(int(lg.argmax()))
        lg = model.forward(Batch.single(got[-1:], start_pos=len(toks) + i), cache)[-1]
    return got


@pytest.mark.parametrize("arch", ["gemma2", "gemma"])
def test_one_token_steps_equal_the_batched_forward(models: dict[tuple[str, str], DecoderModel], arch: str) -> None:
    """Q4_K: token by token through the compiled decode step (gemma2: soft-capped scores, the
    window on alternate layers; Q scaled before attention; the logits' cap after the step) gives
    the bits of the step through the operations one by one and of one full forward."""
    check_steps_equal_batched(models[arch, "Q4_K"], arch)


def check_steps_equal_batched(model: DecoderModel, arch: str) -> None:
    """The 40 fixture tokens: 10 in a batch, then one by one through the compiled decode step,
    and again through the operations one by one: both give the bits of one full forward (the
    gemma families' tests)."""
    assert model.one_token_step_kind() == "gelu"
    toks = fixture_tokens(arch, 40)
    full = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 64))
    steps = {}
    for fused in (True, False):
        model.fused_decode = fused
        cache = model.new_cache(1, 64)
        parts = [model.forward(Batch.single(toks[:10], all_logits=True), cache)]
        parts += [model.forward(Batch.single(toks[i : i + 1], start_pos=i), cache) for i in range(10, 40)]
        steps[fused] = np.concatenate(parts)
    model.fused_decode = True
    assert model._decode_step is not None  # the fused path ran
    np.testing.assert_array_equal(steps[True], steps[False])
    np.testing.assert_array_equal(steps[True], full)


def test_one_token_steps_of_many_sequences_give_the_same_bits(models: dict[tuple[str, str], DecoderModel]) -> None:
    """gemma2 Q4_K: one token of each of ten sequences through the compiled layers (soft-capped
    scores side by side) gives the bits of the batched operations, logits and cache."""
    model = models["gemma2", "Q4_K"]
    toks = fixture_tokens("gemma2", 24)
    one_by_one, cache_a = _decode_together(model, False, toks)
    fused, cache_b = _decode_together(model, True, toks)
    np.testing.assert_array_equal(one_by_one, fused)
    assert all(np.array_equal(a, b) for a, b in zip(cache_a, cache_b))


def test_files_without_a_template_chat_in_gemma_turns() -> None:
    assert default_builtin({"general.architecture": "gemma2"}) == default_builtin({"general.architecture": "gemma"}) == "gemma"
