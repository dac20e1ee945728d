"""The scheduling decision and slot choice, with no model."""

from __future__ import annotations

import pytest

from llamacli.core.model.state.kv_cache import common_prefix
from llamacli.core.runtime.scheduler import Chunk, IdleSlot, SlotState, choose_slot, schedule


def test_decode_tokens_first_then_prompt_chunks_in_arrival_order() -> None:
    slots = [
        SlotState(0, generating=False, n_prompt_left=1000, order=1),
        SlotState(1, generating=True, order=3),
        SlotState(2, generating=False, n_prompt_left=100, order=2),
        SlotState(3, generating=True, order=0),
    ]
    plan = schedule(slots, budget=512)
    assert plan[:2] == [Chunk(3, 1, True), Chunk(1, 1, True)]
    # the short prompt takes all it needs, the long one the rest of the budget
    assert plan[2:] == [Chunk(0, 410, False), Chunk(2, 100, False)]


def test_long_prompt_is_chunked_and_never_starves_decoding() -> None:
    left = 1300
    steps = 0
    while left > 0:
        plan = schedule([SlotState(0, False, left, 0), SlotState(1, True, order=1)], budget=512)
        assert Chunk(1, 1, True) in plan  # the generating slot advances every step
        taken = sum(c.n_tokens for c in plan if not c.decode)
        assert taken <= 511
        left -= taken
        steps += 1
    assert steps == 3


def test_budget_shared_between_prefills() -> None:
    plan = schedule([SlotState(0, False, 100, 0), SlotState(1, False, 100, 1)], budget=150)
    assert plan == [Chunk(0, 75, False), Chunk(1, 75, False)]


def test_short_prompt_is_not_stuck_behind_long_prefills() -> None:
    """A 3-token prompt arriving after eight 480-token prompts is fully scheduled at once."""
    slots = [SlotState(i, False, 480, order=i) for i in range(8)] + [SlotState(8, False, 3, order=8)]
    plan = schedule(slots, budget=512)
    assert Chunk(8, 3, False) in plan
    assert sum(c.n_tokens for c in plan) == 512
    assert all(c.n_tokens in (63, 64) for c in plan if c.slot_id != 8)


def test_fewer_tokens_than_prefilling_slots() -> None:
    plan = schedule([SlotState(i, False, 10, order=i) for i in range(5)], budget=3)
    assert [c.slot_id for c in plan] == [0, 1, 2] and all(c.n_tokens == 1 for c in plan)


def test_budget_smaller_than_generating_slots() -> None:
    plan = schedule([SlotState(i, True, order=i) for i in range(5)], budget=3)
    assert [c.slot_id for c in plan] == [0, 1, 2]


def test_nothing_to_do_and_bad_budget() -> None:
    assert schedule([], 512) == []
    assert schedule([SlotState(0, False, 0, 0)], 512) == []
    with pytest.raises(ValueError):
        schedule([], 0)


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([1, 2], [1, 2]) == 2


def test_choose_slot_prefers_longest_prefix_over_lru() -> None:
    idle = [IdleSlot(0, [9, 9, 9], last_used=0.0), IdleSlot(1, [1, 2, 3, 4], last_used=5.0)]
    assert choose_slot(idle, [1, 2, 3, 7, 8], similarity=0.1) == (1, 3)


def test_choose_slot_falls_back_to_least_recently_used() -> None:
    idle = [IdleSlot(0, [5], last_used=3.0), IdleSlot(1, [6], last_used=1.0), IdleSlot(2, [1], last_used=2.0)]
    # slot 2 shares 1 of 10 tokens = 0.1 >= 0.1... but with similarity 0.5 it does not count
    assert choose_slot(idle, [1] + [0] * 9, similarity=0.5) == (1, 0)
    assert choose_slot(idle, [1] + [0] * 9, similarity=0.1) == (2, 1)
    # similarity 0 disables prefix matching entirely
    assert choose_slot(idle, [1] + [0] * 9, similarity=0.0)[0] == 1
