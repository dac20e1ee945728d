"""The one-token decode step in one compiled call per layer (core/model/families/decode_step.py)
gives the bits of the step through the operations one by one."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.families.decode_step import DecodeStep
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from tests.test_models import _path
from tests.tiny_models import ARCHES, fixture_tokens


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny-step")


def _model(model_dir: Path, arch: str, variant: str) -> DecoderModel:
    model, _, _ = load_model(_path(model_dir, arch, variant), numerics="ggml")
    return model


def _decode(model: DecoderModel, fused: bool, toks: list[int], n_prompt: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Logits of every one-token step after an n_prompt prompt (sequence 1 of 2), and the cache."""
    model.fused_decode = fused
    cache = model.new_cache(2, 64)
    model.forward(Batch.single(toks[:n_prompt], seq_id=1), cache)
    steps = [model.forward(Batch([t], [1], [i]), cache) for i, t in enumerate(toks[n_prompt:], start=n_prompt)]
    return np.concatenate(steps), cache.k + cache.v


def assert_fused_step_same_bits(model: DecoderModel, toks: list[int]) -> None:
    """One-token steps after a 5-token prompt through the compiled step and through the
    operations one by one: the same logits and cache, to the bit."""
    one_by_one, cache_a = _decode(model, False, toks, 5)
    fused, cache_b = _decode(model, True, toks, 5)
    assert np.array_equal(one_by_one, fused)
    assert all(np.array_equal(a, b) for a, b in zip(cache_a, cache_b))


def assert_chunked_and_batched_equal_full(model: DecoderModel, arch: str) -> None:
    """16 tokens in chunks, then token by token, and beside another sequence in one forward:
    the bits of one full forward."""
    toks = fixture_tokens(arch, 16)
    full = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 64))
    cache = model.new_cache(2, 64)
    parts = [model.forward(Batch.single(toks[:7], all_logits=True), cache)]
    parts += [model.forward(Batch.single(toks[i : i + 1], start_pos=i), cache) for i in range(7, 16)]
    np.testing.assert_array_equal(np.concatenate(parts), full)
    other = fixture_tokens(arch, 21)[5:]
    batch = Batch(tokens=np.array(toks + other), seq_ids=np.array([0] * 16 + [1] * 16),
                  positions=np.concatenate([np.arange(16), np.arange(16)]), output=np.ones(32, dtype=bool))
    np.testing.assert_array_equal(model.forward(batch, model.new_cache(2, 64))[:16], full)


@pytest.mark.parametrize("variant", ["Q8_0", "Q4_K"])
@pytest.mark.parametrize("arch", ARCHES)
def test_fused_step_gives_the_same_bits(model_dir: Path, arch: str, variant: str) -> None:
    """Every family (Q/K norms, QKV biases, post norms, GELU and SiLU, sliding windows: gemma3's
    window is 8 tokens, passed here), logits and cache."""
    model = _model(model_dir, arch, variant)
    toks = fixture_tokens(arch, 24)
    one_by_one, cache_a = _decode(model, False, toks, 5)
    fused, cache_b = _decode(model, True, toks, 5)
    assert model._decode_step is not None  # the fused path ran
    assert model.one_token_step_kind() == ("gelu" if arch == "gemma3" else "silu")  # what warmup compiles
    assert np.array_equal(one_by_one, fused)
    assert all(np.array_equal(a, b) for a, b in zip(cache_a, cache_b))


def _decode_together(model: DecoderModel, fused: bool, toks: list[int]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Logits of aggregate decode steps: 10 sequences (ids out of order, prompts of 3 to 12
    tokens: some beyond gemma3's 8-token window) each add one token per step, and the cache."""
    model.fused_decode = fused
    seqs = np.array([7, 2, 9, 0, 5, 1, 8, 3, 6, 4])
    lens = np.array([3, 12, 5, 9, 4, 11, 6, 10, 7, 8])
    cache = model.new_cache(10, 64)
    for s, n in zip(seqs, lens):
        model.forward(Batch.single(toks[s : s + n], seq_id=int(s)), cache)
    steps = []
    for i in range(4):
        tok = np.array([toks[(s + i) % len(toks)] for s in seqs])
        steps.append(model.forward(Batch(tok, seqs, lens + i, decode=np.ones(10, bool)), cache))
    return np.concatenate(steps), cache.k + cache.v


@pytest.mark.parametrize("variant", ["Q8_0", "Q4_K"])
@pytest.mark.parametrize("arch", ARCHES)
def test_fused_step_of_many_sequences_gives_the_same_bits(model_dir: Path, arch: str, variant: str) -> None:
    """One token of each of several sequences through the compiled layers (their attention side
    by side): the bits of the batched operations (attention in padded groups), logits and cache."""
    model = _model(model_dir, arch, variant)
    toks = fixture_tokens(arch, 24)
    one_by_one, cache_a = _decode_together(model, False, toks)
    fused, cache_b = _decode_together(model, True, toks)
    step = model._decode_step
    assert step is not None and step.takes(model, Batch([1, 2], [0, 1], [5, 7]))
    assert not step.takes(model, Batch([1, 2], [0, 0], [5, 6]))  # two tokens of one sequence: the batched path
    assert np.array_equal(one_by_one, fused)
    assert all(np.array_equal(a, b) for a, b in zip(cache_a, cache_b))
    with pytest.raises(ValueError, match="beyond the cache"):  # not a write outside it
        model.forward(Batch([1, 2], [3, 10], [30, 30]), model.new_cache(10, 64))


@pytest.mark.parametrize("arch,variant", [("qwen3moe", "Q8_0"), ("qwen3moe", "Q4_K"), ("qwen3moe", "MXFP4"), ("glm4moe", "Q4_K")])
def test_expert_layers_step_gives_the_same_bits(model_dir: Path, arch: str, variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """qwen3moe's layers with experts in two compiled calls each (core/model/kernels/qmm/experts.py:
    the router, top k, weights, each routed expert's matmuls, the weighted sum; on by default,
    decode_step.MOE_LAYERS): the bits of the step through moe.py one operation at a time,
    logits and cache. glm4moe (sigmoid gating, shared experts) keeps the step through its
    operations."""
    from llamacli.core.model.families import decode_step

    assert decode_step.MOE_LAYERS  # on by default
    monkeypatch.setattr(decode_step, "MOE_LAYERS", False)
    assert _model(model_dir, arch, variant).one_token_step_kind() is None
    monkeypatch.setattr(decode_step, "MOE_LAYERS", True)
    model = _model(model_dir, arch, variant)
    toks = fixture_tokens(arch, 24)
    one_by_one, cache_a = _decode(model, False, toks, 5)
    fused, cache_b = _decode(model, True, toks, 5)
    assert (model._decode_step is not None) == (arch == "qwen3moe")
    assert model.one_token_step_kind() == ("moe" if arch == "qwen3moe" else None)  # what warmup compiles
    assert np.array_equal(one_by_one, fused)
    assert all(np.array_equal(a, b) for a, b in zip(cache_a, cache_b))


def test_overridden_block_keeps_its_own_code(model_dir: Path) -> None:
    """A family that overrides the attention or FFN block gets no fused step."""
    model = _model(model_dir, "llama", "Q8_0")
    assert DecodeStep.plan(model) is not None

    class OwnFfn(type(model)):  # type: ignore[misc]
        def ffn(self, lw, h):  # type: ignore[no-untyped-def]
            return super().ffn(lw, h)

    model.__class__ = OwnFfn
    assert DecodeStep.plan(model) is None


def test_float_weights_are_not_fused(model_dir: Path) -> None:
    model = _model(model_dir, "llama", "F16")
    assert DecodeStep.plan(model) is None and model.one_token_step_kind() is None


@pytest.mark.parametrize("arch,variant", [("granite", "Q4_K"), ("granitemoe", "Q8_0")])
def test_residual_scale_in_the_fused_step_gives_the_same_bits(model_dir: Path, arch: str, variant: str) -> None:
    """Granite's residual_scale (each block's output times it before the residual add) in the
    compiled layers: the bits of the operations one by one, one sequence and several. granitemoe
    without its shared FFN, so that its layers with experts run in experts.py's calls."""
    model = _model(model_dir, arch, variant)
    assert model.args.residual_scale == pytest.approx(0.22)
    if model.args.moe is not None:
        model.args.moe = replace(model.args.moe, n_shared=0, n_ff_shared=0)
        for lw in model.layers:
            assert lw.moe is not None
            lw.moe.shared = None
    toks = fixture_tokens(arch, 24)
    for run in (_decode, _decode_together) if model.args.moe is None else (_decode,):
        args = (toks, 5) if run is _decode else (toks,)
        one_by_one, cache_a = run(model, False, *args)  # type: ignore[operator]
        fused, cache_b = run(model, True, *args)  # type: ignore[operator]
        assert model._decode_step is not None and model.one_token_step_kind() == ("silu" if arch == "granite" else "moe")
        assert np.array_equal(one_by_one, fused)
        assert all(np.array_equal(a, b) for a, b in zip(cache_a, cache_b))
