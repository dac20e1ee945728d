"""The engine with real models: continuous batching, deferral, cancellation, prompt cache,
stop strings, context shift, slot files, embeddings."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from llamacli.core.model.state.batch import Batch
from llamacli.core.runtime.engine import Engine, EngineConfig
from llamacli.core.errors import ContextOverflow, InvalidRequest
from llamacli.core.model.weights.gguf_file import read_metadata
from llamacli.core.model.load import load_model
from llamacli.core.model.kernels.pooling import pool
from llamacli.core.sampling import SamplingParams
from llamacli.core.runtime.tasks import Final, Partial, Task, TaskParams
from llamacli.core.text.tokenizer import load_tokenizer
from tests.tiny_models import fixture_tokens, write_tiny_model

GREEDY = SamplingParams(temperature=0.0)


def greedy(n: int, **kw) -> TaskParams:  # type: ignore[no-untyped-def]
    return TaskParams(n_predict=n, sampling=SamplingParams(temperature=0.0), **kw)


def reference_greedy(model, prompt: list[int], n: int, eog: frozenset[int]) -> list[int]:  # type: ignore[no-untyped-def]
    """The plainest loop: prefill, argmax, feed, repeat (what llama-completion does)."""
    cache = model.new_cache(1, len(prompt) + n + 1)
    logits = model.forward(Batch.single(prompt), cache)[-1]
    out: list[int] = []
    for i in range(n):
        t = int(logits.argmax())
        if t in eog:
            break
        out.append(t)
        logits = model.forward(Batch.single([t], start_pos=len(prompt) + i), cache)[-1]
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path = write_tiny_model("gemma3", "Q8_0", tmp_path_factory.mktemp("eng") / "g.gguf")
    model, g, _ = load_model(path, numerics="ggml")
    return model, load_tokenizer(g.metadata)


@pytest.fixture(scope="module")
def demo_invariant(demo_model: str):  # type: ignore[no-untyped-def]
    # The ggml numerics are batch-invariant without asking (--batch-invariant is a no-op there).
    model, g, _ = load_model(demo_model, numerics="ggml")
    return model, load_tokenizer(read_metadata(demo_model))


def collect(task: Task) -> tuple[list[Partial], Final]:
    parts: list[Partial] = []
    final = None
    for r in task.results:
        if isinstance(r, Final):
            final = r
        else:
            parts.append(r)
    assert final is not None
    return parts, final


def test_engine_greedy_equals_plain_loop(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    prompt = fixture_tokens("gemma3", 12)
    with Engine(model, tok, EngineConfig(n_ctx=256, n_parallel=2)) as eng:
        parts, final = collect(eng.submit(Task(prompt, greedy(20))))
    want = reference_greedy(model, prompt, 20, eng.eog_ids)
    assert final.tokens == want
    assert [t for p in parts for t in p.tokens] == want
    assert "".join(p.content for p in parts) == final.content == tok.detokenize(want)
    assert final.stop_type in ("limit", "eos")
    assert final.timings.prompt_n == 12 and final.timings.predicted_n == len(want)


def test_eight_concurrent_tasks_equal_alone_demo(demo_invariant) -> None:  # type: ignore[no-untyped-def]
    """Eight prompts decoded together give each one's text alone (the default engine)."""
    model, tok = demo_invariant
    texts = ["The capital of France is", "def add(a, b):", "1, 2, 3, 4,", "Once upon a time",
             "La capitale de l'Italie est", "The best way to learn", "import numpy as np\n", "Water boils at"]
    prompts = [tok.tokenize(t, add_special=True, parse_special=True) for t in texts]
    with Engine(model, tok, EngineConfig(n_ctx=8 * 64, n_parallel=8)) as eng:
        tasks = [eng.submit(Task(p, greedy(12, cache_prompt=False))) for p in prompts]
        together = [collect(t)[1] for t in tasks]
        assert all(f.id_slot >= 0 for f in together)
        alone = [eng.run(Task(p, greedy(12, cache_prompt=False))) for p in prompts]
    for t, a, b in zip(texts, together, alone):
        assert a.tokens == b.tokens, t
        assert a.content == b.content


def test_deferral_when_all_slots_busy(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    prompt = fixture_tokens("gemma3", 8)
    with Engine(model, tok, EngineConfig(n_ctx=128, n_parallel=1)) as eng:
        tasks = [eng.submit(Task(prompt, greedy(6, cache_prompt=False))) for _ in range(3)]
        finals = [collect(t)[1] for t in tasks]
    assert all(f.tokens == finals[0].tokens for f in finals)
    assert {f.id_slot for f in finals} == {0}


def test_cancel_running_and_queued(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    prompt = fixture_tokens("gemma3", 8)
    p = TaskParams(n_predict=100000, ignore_eos=True, sampling=SamplingParams(temperature=0.0))
    with Engine(model, tok, EngineConfig(n_ctx=100000, n_parallel=1)) as eng:
        running = eng.submit(Task(prompt, p))
        queued = eng.submit(Task(prompt, p))
        first = running.results.get(timeout=30)
        assert isinstance(first, Partial)
        queued.cancel()
        running.cancel()
        _, f1 = collect(running)
        _, f2 = collect(queued)
        assert f1.stop_type == "cancelled" and f2.stop_type == "cancelled"
        assert f1.tokens  # it had started
        # the slot is free again: a new task runs at once
        t0 = time.perf_counter()
        assert eng.run(Task(prompt, greedy(2))).tokens
        assert time.perf_counter() - t0 < 30


def test_prompt_cache_reuse(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    prompt = fixture_tokens("gemma3", 16)
    with Engine(model, tok, EngineConfig(n_ctx=128, n_parallel=1)) as eng:
        a = eng.run(Task(prompt, greedy(4)))
        b = eng.run(Task(prompt, greedy(4)))
        c = eng.run(Task(prompt[:10] + prompt[:3], greedy(4)))
        d = eng.run(Task(prompt, greedy(4, cache_prompt=False)))
    assert a.tokens_cached == 0
    assert b.tokens_cached == 15 and b.timings.prompt_n == 1  # all but the last token reused
    assert c.tokens_cached == 10
    assert d.tokens_cached == 0
    assert a.tokens == b.tokens == d.tokens


def test_slot_choice_prefers_matching_prefix(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    p1, p2 = fixture_tokens("gemma3", 20), list(reversed(fixture_tokens("gemma3", 20)))
    with Engine(model, tok, EngineConfig(n_ctx=256, n_parallel=2)) as eng:
        a = eng.run(Task(p1, greedy(2)))
        b = eng.run(Task(p2, greedy(2)))
        assert a.id_slot != b.id_slot  # least recently used slot for an unrelated prompt
        c = eng.run(Task(p1 + [5, 6], greedy(2)))
        assert c.id_slot == a.id_slot and c.tokens_cached == 20


def test_stop_string_and_n_predict(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    prompt = fixture_tokens("gemma3", 10)
    with Engine(model, tok, EngineConfig(n_ctx=256, n_parallel=1)) as eng:
        full = eng.run(Task(prompt, greedy(30, ignore_eos=True)))
        assert full.stop_type == "limit" and len(full.tokens) == 30
        text = full.content
        word = text[len(text) // 2 : len(text) // 2 + 3]
        assert word.strip()
        parts, cut = collect(eng.submit(Task(prompt, greedy(30, ignore_eos=True, stop=[word]))))
    assert cut.stop_type == "word" and cut.stopping_word == word
    assert cut.content == text[: text.index(word)]
    assert "".join(p.content for p in parts) == cut.content  # nothing of the stop string streamed


def test_context_full_without_and_with_shift(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    prompt = fixture_tokens("gemma3", 20)
    p = TaskParams(n_predict=60, ignore_eos=True, sampling=SamplingParams(temperature=0.0))
    with Engine(model, tok, EngineConfig(n_ctx=48, n_parallel=1)) as eng:
        f = eng.run(Task(prompt, p))
    assert f.truncated and f.stop_type == "limit" and len(f.tokens) == 48 - 20 + 1  # the last needs no cell
    with Engine(model, tok, EngineConfig(n_ctx=48, n_parallel=1, context_shift=True)) as eng:
        f = eng.run(Task(prompt, TaskParams(n_predict=60, n_keep=4, ignore_eos=True, sampling=SamplingParams(temperature=0.0))))
    assert f.truncated and f.stop_type == "limit" and len(f.tokens) == 60


def test_prompt_longer_than_context_and_empty(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    with Engine(model, tok, EngineConfig(n_ctx=32, n_parallel=1)) as eng:
        with pytest.raises(ContextOverflow) as ei:
            eng.submit(Task(fixture_tokens("gemma3", 40), greedy(1)))
        assert ei.value.n_prompt_tokens == 40 and ei.value.n_ctx == 32
        with pytest.raises(InvalidRequest):
            eng.submit(Task([], greedy(1)))
        with pytest.raises(InvalidRequest):
            eng.submit(Task([1, 2], greedy(1, id_slot=5)))


def test_slot_save_restore_erase(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    prompt = fixture_tokens("gemma3", 16)
    with Engine(model, tok, EngineConfig(n_ctx=128, n_parallel=2)) as eng:
        a = eng.run(Task(prompt, greedy(4, id_slot=0)))
        saved = eng.call(lambda: eng.save_slot(0, str(tmp_path), "s0.bin"))
        assert saved.n_tokens == 16 + 3  # prompt + generated tokens fed back (the last is not)
        assert eng.call(lambda: eng.erase_slot(0)) == saved.n_tokens
        restored = eng.call(lambda: eng.restore_slot(1, str(tmp_path), "s0.bin"))
        assert restored.n_tokens == saved.n_tokens
        b = eng.run(Task(prompt, greedy(4, id_slot=1)))
        assert b.tokens_cached == 15 and b.tokens == a.tokens
        for bad in ("../x", "/etc/passwd", "a/b", "..", ".hidden", "x\x00y", ""):
            with pytest.raises(InvalidRequest):
                eng.call(lambda bad=bad: eng.save_slot(0, str(tmp_path), bad))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s0.bin"]


def test_embedding_task_pools_hidden_states(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    prompt = fixture_tokens("gemma3", 9)
    with Engine(model, tok, EngineConfig(n_ctx=64, n_parallel=1)) as eng:
        f = eng.run(Task(prompt, kind="embedding", pooling="mean"))
    h = model.forward(Batch.single(prompt, all_logits=True), model.new_cache(1, 16), return_hidden=True)
    np.testing.assert_allclose(f.embedding, pool(h, np.zeros(9, np.int64), "mean")[0], rtol=1e-5, atol=1e-6)


def test_async_consumer(tiny) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    model, tok = tiny
    prompt = fixture_tokens("gemma3", 8)

    async def consume(eng: Engine) -> list[int]:
        task = eng.submit(Task(prompt, greedy(5, ignore_eos=True)))
        toks: list[int] = []
        async for r in task.results:
            if isinstance(r, Partial):
                toks += r.tokens
        return toks

    with Engine(model, tok, EngineConfig(n_ctx=64, n_parallel=1)) as eng:
        got = asyncio.run(consume(eng))
    assert len(got) == 5


def test_metrics_count_tokens(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    with Engine(model, tok, EngineConfig(n_ctx=64, n_parallel=1)) as eng:
        eng.run(Task(fixture_tokens("gemma3", 8), greedy(3, ignore_eos=True)))
        m = eng.metrics
    assert m.prompt_tokens_total == 8 and m.tokens_predicted_total == 3 and m.n_decode_total >= 3


def test_load_gauges_as_the_loop_leaves_them(tiny) -> None:  # type: ignore[no-untyped-def]
    """requests_processing / requests_deferred are written by the loop thread after each step:
    read between two steps (through `call`), one task runs and one waits, then none."""
    model, tok = tiny
    p = TaskParams(n_predict=100000, ignore_eos=True, sampling=SamplingParams(temperature=0.0))
    with Engine(model, tok, EngineConfig(n_ctx=100000, n_parallel=1)) as eng:
        m = eng.metrics
        running = eng.submit(Task(fixture_tokens("gemma3", 8), p))
        queued = eng.submit(Task(fixture_tokens("gemma3", 8), p))
        assert isinstance(running.results.get(timeout=30), Partial)  # it has generated a token
        eng.call(lambda: None)  # a whole step after both submits: the next read sees both
        assert eng.call(lambda: (m.requests_processing, m.requests_deferred)) == (1, 1)
        queued.cancel()
        running.cancel()
        collect(running), collect(queued)
        assert eng.call(lambda: (m.requests_processing, m.requests_deferred)) == (0, 0)
    assert (m.requests_processing, m.requests_deferred) == (0, 0)


def test_many_threads_submitting(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    prompt = fixture_tokens("gemma3", 8)
    results: list[Final] = []
    with Engine(model, tok, EngineConfig(n_ctx=256, n_parallel=4)) as eng:
        def worker() -> None:
            results.append(eng.run(Task(prompt, greedy(4, ignore_eos=True))))

        th = [threading.Thread(target=worker) for _ in range(6)]
        for t in th:
            t.start()
        for t in th:
            t.join()
    assert len(results) == 6 and all(len(r.tokens) == 4 for r in results)


def test_n_probs_and_ignore_eos(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    prompt = fixture_tokens("gemma3", 8)
    with Engine(model, tok, EngineConfig(n_ctx=128, n_parallel=1)) as eng:
        parts, final = collect(eng.submit(Task(prompt, greedy(5, n_probs=3, ignore_eos=True))))
    steps = [p for p in parts if p.tokens]
    assert len(steps) == 5
    for p in steps:
        assert len(p.probs[0]) == 3
        ps = [tp.prob for tp in p.probs[0]]
        assert ps == sorted(ps, reverse=True) and 0 < sum(ps) <= 1.0001
        assert p.probs[0][0].id == p.tokens[0]  # greedy: the chosen token is the most probable
        assert p.chosen_probs[0] == pytest.approx(ps[0])
    assert not any(t in eng.eog_ids for t in final.tokens)


def test_task_pinned_to_busy_slot_waits_for_it(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    prompt = fixture_tokens("gemma3", 8)
    with Engine(model, tok, EngineConfig(n_ctx=256, n_parallel=2)) as eng:
        a = eng.submit(Task(prompt, greedy(20, ignore_eos=True, id_slot=0)))
        b = eng.submit(Task(prompt, greedy(3, ignore_eos=True, id_slot=0)))
        fa, fb = collect(a)[1], collect(b)[1]
    assert fa.id_slot == fb.id_slot == 0
    assert fb.tokens_cached > 0  # it ran after a, on a's cache


def test_n_predict_zero_generates_nothing(tiny) -> None:  # type: ignore[no-untyped-def]
    """n_predict 0 (-n 0): the prompt is evaluated, no token is generated (as llama.cpp)."""
    model, tok = tiny
    prompt = fixture_tokens("gemma3", 8)
    with Engine(model, tok, EngineConfig(n_ctx=128, n_parallel=1)) as eng:
        parts, final = collect(eng.submit(Task(prompt, greedy(0))))
    assert final.tokens == [] and final.content == "" and parts == []
    assert final.stop_type == "limit" and final.timings.prompt_n == 8


def test_prompt_progress_and_timings_per_token(tiny) -> None:  # type: ignore[no-untyped-def]
    """return_progress: a 0% Partial before the prompt, then one per prompt batch (llama-server's
    prompt_progress); timings_per_token: every Partial carries finite timings that never go back."""
    model, tok = tiny
    prompt = fixture_tokens("gemma3", 20)
    with Engine(model, tok, EngineConfig(n_ctx=64, n_parallel=1, n_batch=8)) as eng:
        params = greedy(3, ignore_eos=True, return_progress=True, timings_per_token=True)
        parts, final = collect(eng.submit(Task(prompt, params)))
        plain, _ = collect(eng.submit(Task(prompt, greedy(3, ignore_eos=True, cache_prompt=False))))
    progress = [p for p in parts if p.progress is not None]
    assert [p.progress["processed"] for p in progress] == [0, 8, 16, 20]
    assert all(p.progress["total"] == 20 and p.progress["cache"] == 0 and not p.tokens for p in progress)
    first = progress[0].timings
    assert first is not None and first.prompt_n == 0 and first.prompt_ms == 0.0 and first.predicted_n == 0
    assert progress[-1].timings is not None and progress[-1].timings.prompt_ms > 0
    tokens = [p for p in parts if p.tokens]
    assert len(tokens) == 3 and all(p.timings is not None for p in tokens)
    assert [p.timings.predicted_n for p in tokens] == [1, 2, 3]  # type: ignore[union-attr]
    ms = [p.timings.prompt_ms for p in parts if p.timings is not None]
    assert ms == sorted(ms)
    assert final.tokens == [t for p in tokens for t in p.tokens]
    assert all(p.timings is None and p.progress is None for p in plain)


def test_on_idle_runs_when_the_last_task_ends(tiny) -> None:  # type: ignore[no-untyped-def]
    """Engine.on_idle (the server gives freed heap pages back there) runs on the loop thread
    once the steps have nothing left, never while a slot is busy, once per idle spell."""
    model, tok = tiny
    prompt = fixture_tokens("gemma3", 8)
    idle: list[tuple[str, int]] = []
    with Engine(model, tok, EngineConfig(n_ctx=256, n_parallel=2)) as eng:
        eng.on_idle = lambda: idle.append((threading.current_thread().name, sum(s.busy for s in eng.slots)))
        a, b = eng.submit(Task(prompt, greedy(6))), eng.submit(Task(prompt, greedy(9)))
        collect(a), collect(b)
        deadline = time.monotonic() + 10
        while not idle and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        n = len(idle)  # 1, or 2 if the first task ended before the second came
        assert 1 <= n <= 2
        collect(eng.submit(Task(prompt, greedy(3))))
        while len(idle) < n + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
    assert idle == [("llama-engine", 0)] * (n + 1)


def test_a_cancelled_tasks_final_reaches_an_async_reader_before_the_next_forward(tiny, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The engine holds back async wake-ups only while it emits a step's tokens: a Final put
    before the forward (a cancelled queued task ended in _admit) wakes its reader at once."""
    import asyncio

    model, tok = tiny
    prompt = fixture_tokens("gemma3", 8)
    p = TaskParams(n_predict=100000, ignore_eos=True, sampling=SamplingParams(temperature=0.0))
    gate = threading.Semaphore(0)
    blocking = threading.Event()
    in_forward = threading.Event()
    real = model.forward_hidden

    def gated(batch, cache):  # type: ignore[no-untyped-def]
        if blocking.is_set():
            in_forward.set()
            gate.acquire(timeout=60)
        return real(batch, cache)

    monkeypatch.setattr(model, "forward_hidden", gated)
    eng = Engine(model, tok, EngineConfig(n_ctx=4096, n_parallel=1)).start()
    try:
        running = eng.submit(Task(prompt, p))
        assert isinstance(running.results.get(timeout=60), Partial)
        queued = eng.submit(Task(prompt, p))  # waits for the only slot

        async def final_of_queued() -> Final:
            async for r in queued.results:
                if isinstance(r, Final):
                    return r
            raise AssertionError("no Final")

        async def main() -> Final:
            reader = asyncio.ensure_future(final_of_queued())
            await asyncio.sleep(0.1)  # the reader awaits an empty stream
            blocking.set()
            assert await asyncio.get_running_loop().run_in_executor(None, in_forward.wait, 60)
            queued.cancel()
            gate.release()  # this forward ends; the next step ends `queued`, then blocks in its forward
            return await asyncio.wait_for(reader, 30)

        loop = asyncio.new_event_loop()
        try:
            final = loop.run_until_complete(main())
        finally:
            loop.close()
        assert final.stop_type == "cancelled" and final.tokens == []
    finally:
        blocking.clear()
        for _ in range(4):
            gate.release()
        eng.stop()
