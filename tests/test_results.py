"""What a task's stream receives, without a model: timings, progress, the Final and the
metrics a finished task adds."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from llamacli.core.runtime.metrics import Metrics
from llamacli.core.runtime.results import emit, finish, finish_queued, send_progress, slot_timings
from llamacli.core.runtime.slot import Slot
from llamacli.core.runtime.stop import StopMatcher
from llamacli.core.runtime.tasks import Final, Partial, Task, TaskParams
from llamacli.core.text.tokenizer import IncrementalDecoder


def started(prompt: list[int], n_reuse: int = 0, **params: object) -> Slot:
    s = Slot(3, n_ctx=64, cached=list(prompt[:n_reuse]))
    s.assign(Task(prompt, TaskParams(**params)), n_reuse, order=1)  # type: ignore[arg-type]
    return s


def test_timings_count_evaluated_prompt_tokens_apart_from_cached_ones() -> None:
    s = started([1, 2, 3, 4, 5], n_reuse=2)
    s.n_past = 5
    s.t_start, s.t_prompt_done = 10.0, 10.5
    s.generating, s.generated = True, [7, 8]
    t = slot_timings(s, now=11.5)
    assert (t.cache_n, t.prompt_n, t.predicted_n) == (2, 3, 2)
    assert (t.prompt_ms, t.predicted_ms) == (500.0, 1000.0)


def test_progress_before_any_prompt_token() -> None:
    s = started([1, 2, 3], return_progress=True)
    send_progress(s)
    assert s.task is not None
    p = s.task.results.get(timeout=0)
    assert isinstance(p, Partial) and p.progress == {"total": 3, "cache": 0, "processed": 0, "time_ms": 0}


class Pieces:
    def token_to_piece(self, token_id: int, special: bool = False) -> bytes:
        return {5: b"ab x", 6: b"y"}[token_id]


def generating(stop: list[str]) -> Slot:
    s = started([1, 2], stop=stop)
    s.n_past, s.generating = 2, True
    s.sampler = SimpleNamespace()  # type: ignore[assignment]  # n_probs = 0: never asked
    s.decoder = IncrementalDecoder(Pieces())
    s.stop = StopMatcher(stop)
    return s


def test_emit_holds_back_a_possible_stop_string_and_finish_sends_it() -> None:
    s = generating(["xyz"])
    task = s.task
    assert task is not None
    emit(s, 5)
    emit(s, 6)
    m = Metrics()
    finish(s, "limit", m)
    assert not s.busy and s.last_task is task
    *parts, final = list(task.results)
    assert [(p.content, p.tokens) for p in parts] == [("ab ", [5]), ("", [6]), ("xy", [])]
    assert isinstance(final, Final) and (final.content, final.tokens, final.stop_type) == ("ab xy", [5, 6], "limit")
    assert final.id_slot == 3 and (m.prompt_tokens_total, m.tokens_predicted_total) == (2, 2)


def test_a_stop_string_ending_drops_the_held_back_text() -> None:
    s = generating(["x"])
    task = s.task
    assert task is not None
    emit(s, 5)
    assert s.stop is not None and s.stop.stopped_word == "x"
    finish(s, "word", Metrics())
    *parts, final = list(task.results)
    assert [p.content for p in parts] == ["ab "]
    assert isinstance(final, Final) and (final.content, final.stopping_word) == ("ab ", "x")


def test_a_queued_task_ends_with_an_empty_final() -> None:
    task = Task([4, 5])
    finish_queued(task, "cancelled")
    (final,) = list(task.results)
    assert isinstance(final, Final) and (final.stop_type, final.tokens, final.prompt_tokens) == ("cancelled", [], [4, 5])


def test_an_embedding_final_carries_the_vector() -> None:
    s = started([1, 2])
    task = s.task
    assert task is not None
    finish(s, "eos", Metrics(), embedding=np.ones(3, np.float32))
    (final,) = list(task.results)
    assert isinstance(final, Final) and final.embedding.tolist() == [1.0, 1.0, 1.0]
