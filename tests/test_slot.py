"""A slot's per-task state: taken by `assign`, cleared by `release`, the cache kept for reuse."""

from __future__ import annotations

from llamacli.core.runtime.batch_plan import SlotFeed
from llamacli.core.runtime.slot import Slot
from llamacli.core.runtime.stop import StopMatcher
from llamacli.core.runtime.tasks import Task


def used_slot() -> Slot:
    """A slot that has served a task: its cells hold that task's prompt and answer."""
    s = Slot(0, n_ctx=64)
    first = Task([1, 2, 3, 4])
    s.assign(first, 0, order=1)
    s.cached = [1, 2, 3, 4, 50, 51]
    s.generating, s.next_token, s.draft, s.generated = True, 51, [52, 53], [50, 51]
    s.n_draft, s.n_draft_accepted, s.truncated = 2, 1, True
    s.stop = StopMatcher(["x"])
    return s


def test_release_keeps_the_cache_and_remembers_the_task() -> None:
    s = used_slot()
    first = s.task
    s.release()
    assert s.task is None and s.last_task is first and not s.busy and s.last_used > 0
    assert s.cached == [1, 2, 3, 4, 50, 51]  # kept for prompt reuse
    assert (s.generating, s.next_token, s.draft, s.generated, s.stop, s.grammar, s.budget) == (
        False, -1, [], [], None, None, None
    )
    assert (s.n_draft, s.n_draft_accepted, s.truncated, s.n_prompt_left) == (0, 0, False, 0)


def test_assign_starts_the_task_after_the_reused_prefix() -> None:
    s = used_slot()
    s.release()
    nxt = Task([1, 2, 3, 9, 9])
    s.assign(nxt, 3, order=2)  # [1, 2, 3] are reused
    assert s.task is nxt and s.cached == [1, 2, 3] and (s.n_past, s.n_cached, s.order) == (3, 3, 2)
    assert s.n_prompt_left == 2 and not s.generating and s.generated == [] and s.t_start > 0
    assert s.feed() == SlotFeed(3, [1, 2, 3, 9, 9], n_past=3, next_token=-1, draft=[], embedding=False)


def test_assign_over_a_busy_slot_leaves_nothing_of_the_previous_task() -> None:
    s = used_slot()  # not released: assign alone must reset every per-task field
    s.assign(Task([7], kind="embedding"), 0, order=3)
    assert s.cached == [] and s.draft == [] and s.generated == [] and s.stop is None and s.next_token == -1
    assert (s.n_draft, s.n_draft_accepted, s.truncated, s.generating) == (0, 0, False, False)
    assert s.feed().embedding and s.feed().prompt == [7]
