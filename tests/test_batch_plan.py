"""The unified batch of one engine step and the rows of each slot, with no model."""

from __future__ import annotations

import numpy as np
import pytest

from llamacli.core.runtime.batch_plan import BatchPlan, SlotFeed, build_batch
from llamacli.core.runtime.scheduler import Chunk, SlotState, schedule

PROMPT = list(range(100, 110))  # a 10-token prompt


def arrays(plan: BatchPlan) -> tuple[list[int], list[int], list[int], list[bool], list[bool]]:
    b = plan.batch
    assert b.decode is not None
    return b.tokens.tolist(), b.seq_ids.tolist(), b.positions.tolist(), b.output.tolist(), b.decode.tolist()


def test_decode_rows_one_token_each_all_sampled() -> None:
    feeds = {0: SlotFeed(n_cells=7, next_token=42), 1: SlotFeed(n_cells=3, next_token=43)}
    plan = build_batch([Chunk(1, 1, True), Chunk(0, 1, True)], feeds, n_batch=8)
    assert arrays(plan) == ([43, 42], [1, 0], [3, 7], [True, True], [True, True])
    assert [(r.slot_id, r.tokens, r.first, r.hidden, r.logits) for r in plan.rows] == [
        (1, (43,), 0, slice(0, 1), slice(0, 1)),
        (0, (42,), 1, slice(1, 2), slice(1, 2)),
    ]
    assert plan.logit_rows.tolist() == [0, 1] and plan.n_positions == 8


def test_prompt_chunks_output_only_the_prompts_last_token() -> None:
    # the first chunk of 4 (tokens 3..6 of the prompt: 3 were cached) has no output row
    mid = build_batch([Chunk(0, 4, False)], {0: SlotFeed(3, PROMPT, n_past=3)}, n_batch=4)
    assert arrays(mid) == ([103, 104, 105, 106], [0] * 4, [3, 4, 5, 6], [False] * 4, [False] * 4)
    (r,) = mid.rows
    assert not r.prompt_done and r.hidden == slice(0, 0) and r.logits == slice(0, 0)
    assert mid.logit_rows.size == 0
    # the last chunk: its last token's logits give the first generated token
    last = build_batch([Chunk(0, 3, False)], {0: SlotFeed(7, PROMPT, n_past=7)}, n_batch=4)
    assert arrays(last) == ([107, 108, 109], [0] * 3, [7, 8, 9], [False, False, True], [False] * 3)
    (r,) = last.rows
    assert r.prompt_done and r.hidden == slice(0, 1) and r.logits == slice(0, 1)
    assert last.logit_rows.tolist() == [0]


def test_draft_tokens_follow_the_sampled_token_and_all_are_verified() -> None:
    feeds = {0: SlotFeed(20, next_token=5, draft=[6, 7, 8])}
    plan = build_batch([Chunk(0, 4, True)], feeds, n_batch=8)
    assert arrays(plan) == ([5, 6, 7, 8], [0] * 4, [20, 21, 22, 23], [True] * 4, [True] * 4)
    assert plan.rows[0].logits == slice(0, 4) and plan.logit_rows.tolist() == [0, 1, 2, 3]
    # the scheduler cut the draft at the batch limit: only its first token is verified
    cut = build_batch([Chunk(0, 2, True)], feeds, n_batch=2)
    assert cut.rows[0].tokens == (5, 6) and cut.rows[0].logits == slice(0, 2)


def test_embedding_rows_are_all_outputs_without_logits() -> None:
    feeds = {0: SlotFeed(0, [1, 2, 3, 4, 5], embedding=True), 1: SlotFeed(9, next_token=77)}
    plan = build_batch([Chunk(1, 1, True), Chunk(0, 3, False)], feeds, n_batch=8)
    assert arrays(plan) == ([77, 1, 2, 3], [1, 0, 0, 0], [9, 0, 1, 2], [True] * 4, [True, False, False, False])
    emb = plan.rows[1]
    assert emb.hidden == slice(1, 4) and emb.logits == slice(1, 1) and not emb.prompt_done
    assert plan.logit_rows.tolist() == [0]  # only the decode row is sampled
    rest = build_batch([Chunk(0, 2, False)], {0: SlotFeed(3, [1, 2, 3, 4, 5], n_past=3, embedding=True)}, n_batch=8)
    assert rest.rows[0].prompt_done and rest.rows[0].hidden == slice(0, 2) and rest.logit_rows.size == 0


def test_rows_follow_the_schedule_and_find_each_slots_outputs() -> None:
    """Decode chunks first (oldest first), then prompt chunks in arrival order; each slot's
    hidden and logits rows are those of its own batch rows."""
    feeds = {
        0: SlotFeed(4, PROMPT, n_past=4),  # completion prompt, 6 left
        1: SlotFeed(30, next_token=11, draft=[12]),
        2: SlotFeed(0, [7, 8, 9], embedding=True),
        3: SlotFeed(50, next_token=13),
    }
    states = [
        SlotState(0, False, 6, order=2),
        SlotState(1, True, order=1, n_draft=1),
        SlotState(2, False, 3, order=3),
        SlotState(3, True, order=0),
    ]
    chunks = schedule(states, budget=16)
    plan = build_batch(chunks, feeds, n_batch=16)
    assert [(r.slot_id, r.decode, r.first, len(r.tokens)) for r in plan.rows] == [
        (3, True, 0, 1), (1, True, 1, 2), (0, False, 3, 6), (2, False, 9, 3),
    ]
    b = plan.batch
    out_rows = np.flatnonzero(b.output)  # batch row of each output (hidden) row
    sampled = out_rows[plan.logit_rows]  # batch row of each logits row
    for r in plan.rows:
        mine = range(r.first, r.first + len(r.tokens))
        assert b.tokens[mine.start : mine.stop].tolist() == list(r.tokens)
        assert all(i in mine for i in out_rows[r.hidden]) and all(i in mine for i in sampled[r.logits])
    assert sampled.tolist() == [0, 1, 2, 8]  # slot 3, slot 1 (token + draft), slot 0's last prompt token
    assert out_rows[plan.rows[3].hidden].tolist() == [9, 10, 11]  # every embedding row


def test_the_n_batch_limit() -> None:
    feeds = {0: SlotFeed(0, PROMPT), 1: SlotFeed(5, next_token=1, draft=[2, 3])}
    states = [SlotState(0, False, 10, order=1), SlotState(1, True, order=0, n_draft=2)]
    plan = build_batch(schedule(states, budget=6), feeds, n_batch=6)  # exactly full
    assert plan.batch.n_tokens == 6 and [len(r.tokens) for r in plan.rows] == [3, 3]
    assert not plan.rows[1].prompt_done and plan.rows[1].hidden == slice(3, 3)
    with pytest.raises(ValueError, match="7 tokens in a batch of at most 6"):
        build_batch([Chunk(1, 3, True), Chunk(0, 4, False)], feeds, n_batch=6)


def test_chunks_that_do_not_fit_the_slot_are_refused() -> None:
    feeds = {0: SlotFeed(8, PROMPT, n_past=8), 1: SlotFeed(2, next_token=1, draft=[2])}
    with pytest.raises(ValueError, match="runs past the prompt"):
        build_batch([Chunk(0, 3, False)], feeds, n_batch=8)
    with pytest.raises(ValueError, match="a draft of 1"):
        build_batch([Chunk(1, 3, True)], feeds, n_batch=8)
    with pytest.raises(ValueError, match="empty"):
        build_batch([], feeds, n_batch=8)
