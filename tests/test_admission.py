"""Admission without a model: which idle slot a queued task goes to, and its LoRA scales."""

from __future__ import annotations

from llamacli.core.runtime.admission import place, task_lora
from llamacli.core.runtime.slot import Slot
from llamacli.core.runtime.tasks import Task, TaskParams


def idle_slots(*cached: list[int]) -> list[Slot]:
    slots = [Slot(i, n_ctx=64, cached=list(c)) for i, c in enumerate(cached)]
    for i, s in enumerate(slots):
        s.last_used = float(i)  # slot 0 is the least recently used
    return slots


def test_the_slot_sharing_the_longest_prefix_takes_the_task() -> None:
    slots = idle_slots([9, 9], [1, 2, 3], [1, 2])
    s, lcp = place(Task([1, 2, 3, 4]), slots, 0.1, ()) or (None, 0)
    assert s is slots[1] and lcp == 3


def test_a_cache_made_with_other_lora_scales_is_not_reused() -> None:
    slots = idle_slots([5], [1, 2, 3])
    slots[1].lora = (1.0,)
    s, lcp = place(Task([1, 2, 3, 4]), slots, 0.1, (0.5,)) or (None, 0)
    assert s is slots[0] and lcp == 0  # no usable prefix: the least recently used slot


def test_a_task_pinned_to_a_busy_slot_waits() -> None:
    slots = idle_slots([1], [1])
    slots[1].assign(Task([7, 7]), 0, order=1)
    assert place(Task([1, 2], TaskParams(id_slot=1)), slots, 0.1, ()) is None
    assert place(Task([1, 2], TaskParams(id_slot=0)), slots, 0.1, ()) == (slots[0], 1)


def test_no_idle_slot_means_no_place() -> None:
    slots = idle_slots([1])
    slots[0].assign(Task([7, 7]), 0, order=1)
    assert place(Task([1, 2]), slots, 0.1, ()) is None


def test_a_task_runs_with_its_own_lora_scales_else_the_engines() -> None:
    assert task_lora(Task([1]), (0.5, 1.0)) == (0.5, 1.0)
    assert task_lora(Task([1], TaskParams(lora=(0.0, 2.0))), (0.5, 1.0)) == (0.0, 2.0)
