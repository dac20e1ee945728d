"""LoRA adapters: logits against llama.cpp's with the same adapters and scales
(tests/fixtures/lora, made by scripts/oracle_lora.py), loading errors, and the engine's rules
(one adapter set per forward, caches not shared across sets)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from llamacli.core.model.state.batch import Batch
from llamacli.core.runtime.engine import Engine, EngineConfig
from llamacli.core.errors import InvalidRequest, ModelLoadError
from llamacli.core.model.state.lora import NO_LORA, LoraSet, load_lora
from llamacli.core.model.load import load_model
from llamacli.core.sampling import SamplingParams
from llamacli.core.runtime.tasks import Final, Task, TaskParams
from llamacli.core.text.tokenizer import load_tokenizer
from tests.tiny_lora import CASES, LORAS, base_model, write_tiny_lora
from tests.test_parity_tiny import TOL  # the same models and numerics as there
from tests.tiny_models import fixture_tokens, write_tiny_model

FIXTURES = Path(__file__).parent / "fixtures" / "lora"


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_writer_is_deterministic(tmp_path: Path) -> None:
    for name in LORAS:
        a = write_tiny_lora(name, tmp_path / "a.gguf").read_bytes()
        assert write_tiny_lora(name, tmp_path / "b.gguf").read_bytes() == a


@pytest.mark.parametrize("case", list(CASES))
def test_logits_match_llama_cpp(tmp_path: Path, case: str) -> None:
    z = np.load(FIXTURES / f"{case}.npz")
    arch, variant = base_model(CASES[case][0][0])
    mp = write_tiny_model(arch, variant, tmp_path / "m.gguf")
    assert _sha(mp) == str(z["sha256_model"])
    model, g, _ = load_model(mp)
    active = []
    for i, (name, scale) in enumerate(CASES[case]):
        f = write_tiny_lora(name, tmp_path / f"{name}.gguf")
        assert _sha(f) == str(z[f"sha256_{i}"])
        active.append((load_lora(f, g, quantized=True), scale))
    toks = z["tokens"].tolist()
    model.precision.lora = LoraSet(tuple(active))
    logits = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 128))
    model.precision.lora = NO_LORA
    base = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 128))
    ref = z["logits"]
    assert np.abs(logits - ref).max() < TOL[variant]
    assert np.abs(base - ref).max() > 20 * TOL[variant]  # the adapters do change the model
    assert (logits.argmax(1) == ref.argmax(1)).mean() > 0.9


@pytest.mark.parametrize("numerics", ["ggml", "f32"])
def test_scale_zero_equals_no_adapter(tmp_path: Path, numerics: str) -> None:
    mp = write_tiny_model("llama", "F32", tmp_path / "m.gguf")
    model, g, _ = load_model(mp, numerics=numerics)
    ad = load_lora(write_tiny_lora("llama-F32-a", tmp_path / "a.gguf"), g, quantized=model.precision.quantized_weights)
    toks = fixture_tokens("llama")
    base = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 128))
    model.precision.lora = LoraSet(((ad, 0.0),))
    zero = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 128))
    np.testing.assert_allclose(zero, base, rtol=0, atol=1e-4)
    if numerics == "ggml":
        np.testing.assert_array_equal(zero, base)
    ref = np.load(Path(__file__).parent / "fixtures" / "tiny" / "llama-F32.npz")["logits"]
    assert np.abs(zero - ref).max() < TOL["F32"]


def test_load_errors(tmp_path: Path) -> None:
    llama = write_tiny_model("llama", "F32", tmp_path / "m.gguf")
    qwen = write_tiny_model("qwen2", "F32", tmp_path / "q.gguf")
    ad = write_tiny_lora("llama-F32-a", tmp_path / "a.gguf")
    _, gq, _ = load_model(qwen)
    with pytest.raises(ModelLoadError, match="arch"):
        load_lora(ad, gq, quantized=True)
    _, gl, _ = load_model(llama)
    with pytest.raises(ModelLoadError, match="general.type"):
        load_lora(llama, gl, quantized=True)  # a model, not an adapter


def _engine(tmp_path: Path, n_parallel: int = 2) -> tuple[Engine, list[int]]:
    mp = write_tiny_model("llama", "F32", tmp_path / "m.gguf")
    model, g, _ = load_model(mp)
    a = load_lora(write_tiny_lora("llama-F32-a", tmp_path / "a.gguf"), g, quantized=True)
    b = load_lora(write_tiny_lora("llama-F32-b", tmp_path / "b.gguf"), g, quantized=True)
    engine = Engine(model, load_tokenizer(g.metadata), EngineConfig(n_ctx=256 * n_parallel, n_parallel=n_parallel),
                    [(a, 1.0), (b, 0.0)])
    return engine, fixture_tokens("llama", 24)


def _greedy(lora: tuple[float, ...] | None, n: int = 8) -> TaskParams:
    return TaskParams(n_predict=n, sampling=SamplingParams(temperature=0.0, n_probs=0), lora=lora, ignore_eos=True)


def _final(task: Task) -> Final:
    out = [r for r in task.results if isinstance(r, Final)]
    assert out and out[-1].error is None, out
    return out[-1]


def test_engine_never_mixes_adapter_sets_and_answers_as_alone(tmp_path: Path) -> None:
    engine, toks = _engine(tmp_path)
    sets = [(1.0, 0.0), (0.0, 0.0), (1.0, 0.5)]
    alone = []
    with engine:
        for s in sets:
            alone.append(_final(engine.submit(Task(toks, _greedy(s)))).tokens)
    assert alone[0] != alone[1]  # the adapter matters
    seen: list[tuple[tuple[float, ...], set[int]]] = []
    forward = engine.model.forward_hidden

    def spy(batch: Batch, cache: object) -> np.ndarray:
        act = tuple(sc for _, sc in engine.model.precision.lora.active)
        seen.append((act, {int(s) for s in np.unique(batch.seq_ids)}))
        return forward(batch, cache)  # type: ignore[arg-type]

    engine.model.forward_hidden = spy  # type: ignore[method-assign]
    engine2 = Engine(engine.model, engine.tokenizer, EngineConfig(n_ctx=768, n_parallel=3),
                     list(zip(engine.loras, engine.lora_scales)))
    with engine2:
        tasks = [engine2.submit(Task(toks, _greedy(s, 8), )) for s in sets]
        got = [_final(t).tokens for t in tasks]
    assert got == alone
    slot_set: dict[int, tuple[float, ...]] = {}
    for act, slots in seen:
        for s in slots:
            slot_set.setdefault(s, act)
            assert slot_set[s] == act  # a slot always ran with its own set
        assert len({slot_set[s] for s in slots}) == 1  # one set per forward


def test_prompt_cache_knows_its_adapters(tmp_path: Path) -> None:
    engine, toks = _engine(tmp_path, n_parallel=1)
    with engine:
        first = _final(engine.submit(Task(toks, _greedy((1.0, 0.0), 4))))
        other = _final(engine.submit(Task(toks, _greedy((0.0, 0.0), 4))))
        assert other.tokens_cached == 0  # made with another adapter set: not reused
        again = _final(engine.submit(Task(toks, _greedy((0.0, 0.0), 4))))
        assert again.tokens_cached == len(toks) - 1 and again.tokens == other.tokens
        default = _final(engine.submit(Task(toks, _greedy(None, 4))))  # None: the engine's (1, 0)
        assert default.tokens_cached == 0 and default.tokens == first.tokens
        engine.call(lambda: engine.set_lora_scales((0.0, 0.0)))
        after = _final(engine.submit(Task(toks, _greedy(None, 4))))
        assert after.tokens == other.tokens
    with pytest.raises(InvalidRequest, match="2 adapters"):
        engine.submit(Task(toks, _greedy((1.0,), 4)))
