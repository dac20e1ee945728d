"""A slot's cache beyond prompt reuse, without a model: the context shift, erase, and the
checks of cache operations on idle slots."""

from __future__ import annotations

from typing import Any

import pytest

from llamacli.core.errors import InvalidRequest, SlotBusy
from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.runtime.metrics import Metrics
from llamacli.core.runtime.slot import Slot
from llamacli.core.runtime.slot_cache import erase, idle_slot, shift_or_end
from llamacli.core.runtime.tasks import Final, Task, TaskParams


class ShiftSpy:
    can_shift = True

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []

    def shift_cache(self, cache: Any, seq: int, n_keep: int, n_discard: int) -> None:
        self.calls.append((seq, n_keep, n_discard))


def full_slot(n_keep: int) -> Slot:
    s = Slot(1, n_ctx=10)
    s.assign(Task([1, 2, 3], TaskParams(n_keep=n_keep)), 0, order=1)
    s.generating, s.cached = True, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    return s


def test_without_context_shift_a_full_slot_ends() -> None:
    s = full_slot(0)
    task = s.task
    assert task is not None
    shift_or_end(s, ShiftSpy(), None, False, 1, Metrics())  # type: ignore[arg-type]
    (final,) = list(task.results)
    assert isinstance(final, Final) and final.stop_type == "limit" and final.truncated


def test_a_model_that_cannot_shift_ends_the_full_slot() -> None:
    """M-RoPE (qwen2vl): llama-server turns the shift off where the cache cannot shift."""
    s = full_slot(0)
    task = s.task
    assert task is not None
    model = ShiftSpy()
    model.can_shift = False
    shift_or_end(s, model, None, True, 1, Metrics())  # type: ignore[arg-type]
    (final,) = list(task.results)
    assert model.calls == [] and isinstance(final, Final) and final.stop_type == "limit"


def test_the_shift_keeps_bos_and_n_keep_and_drops_half_of_the_rest() -> None:
    s = full_slot(2)
    model = ShiftSpy()
    shift_or_end(s, model, None, True, 1, Metrics())  # type: ignore[arg-type]
    assert model.calls == [(1, 3, 3)]  # bos + 2 kept; half of the 7 others dropped
    assert s.cached == [1, 2, 3, 7, 8, 9, 10] and s.truncated and s.busy


def test_n_keep_minus_one_keeps_the_whole_prompt() -> None:
    s = full_slot(-1)
    model = ShiftSpy()
    shift_or_end(s, model, None, True, None, Metrics())  # type: ignore[arg-type]  # no BOS token
    assert model.calls == [(1, 3, 3)] and s.cached == [1, 2, 3, 7, 8, 9, 10]


def test_cache_operations_need_an_existing_idle_slot() -> None:
    slots = [Slot(0, n_ctx=8), Slot(1, n_ctx=8)]
    slots[1].assign(Task([1]), 0, order=1)
    assert idle_slot(slots, 0) is slots[0]
    with pytest.raises(InvalidRequest, match="slot 2 does not exist"):
        idle_slot(slots, 2)
    with pytest.raises(SlotBusy):
        idle_slot(slots, 1)


def test_erase_forgets_the_tokens_and_the_last_task() -> None:
    cache = KVCache(1, 1, 8, 1, 2, 2)
    cache.lengths[0] = 3
    s = Slot(0, n_ctx=8, cached=[1, 2, 3], last_task=Task([1]))
    assert erase(s, cache) == 3
    assert s.cached == [] and s.last_task is None and int(cache.lengths[0]) == 0
