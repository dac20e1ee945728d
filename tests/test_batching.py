"""The batch of a step without a model: LoRA groups, step numbers, drafts, the forward's
counters (a stub model stands in for the forward pass)."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from llamacli.core.runtime.batch_plan import BatchPlan
from llamacli.core.runtime.batching import draft, forward, plan_batch
from llamacli.core.runtime.metrics import Metrics
from llamacli.core.runtime.slot import Slot
from llamacli.core.runtime.tasks import Task, TaskParams
from llamacli.core.speculative.drafter import DraftRequest


def stub_model() -> Any:
    return SimpleNamespace(causal=True, precision=SimpleNamespace(lora=None))


def busy(slot_id: int, prompt: list[int], order: int, lora: tuple[float, ...] = ()) -> Slot:
    s = Slot(slot_id, n_ctx=64)
    s.assign(Task(prompt), 0, order)
    s.lora = lora
    return s


def test_nothing_to_evaluate_is_no_plan() -> None:
    assert plan_batch([Slot(0, n_ctx=64)], stub_model(), [], 8) is None


def test_steps_are_numbered_and_mark_the_slots_they_evaluate() -> None:
    slots = [busy(0, [1, 2, 3], order=1), Slot(1, n_ctx=64)]
    plan = plan_batch(slots, stub_model(), [], 8)
    assert isinstance(plan, BatchPlan) and [r.slot_id for r in plan.rows] == [0]
    assert [s.last_step for s in slots] == [1, 0]
    plan_batch(slots, stub_model(), [], 8)  # the next forward is step 2
    assert [s.last_step for s in slots] == [2, 0]


def test_one_lora_group_per_forward_and_the_groups_alternate() -> None:
    a, b = object(), object()
    model = stub_model()
    slots = [busy(0, [1, 2], order=1, lora=(1.0, 0.0)), busy(1, [3, 4], order=2, lora=(0.0, 1.0))]
    plan = plan_batch(slots, model, [a, b], 8)  # type: ignore[list-item]
    assert plan is not None and [r.slot_id for r in plan.rows] == [0]
    assert model.precision.lora.active == ((a, 1.0),)
    plan = plan_batch(slots, model, [a, b], 8)  # type: ignore[list-item]
    assert plan is not None and [r.slot_id for r in plan.rows] == [1]  # it has waited longest
    assert model.precision.lora.active == ((b, 1.0),)


class Proposer:
    def __init__(self) -> None:
        self.requests: list[DraftRequest] = []

    def draft(self, requests: Sequence[DraftRequest]) -> list[list[int]]:
        self.requests = list(requests)
        return [[7, 8] for _ in requests]


def test_only_generating_completions_get_a_draft_within_their_room() -> None:
    gen = busy(0, [1, 2], order=1)
    gen.generating, gen.cached, gen.next_token = True, [1, 2], 5
    pre = busy(1, [3, 4], order=2)
    pre.draft = [9]
    spec = Proposer()
    draft([gen, pre], spec, n_ctx_slot=64, n_predict_max=-1)  # type: ignore[arg-type]
    assert [r.slot_id for r in spec.requests] == [0] and spec.requests[0].last == 5
    assert (gen.draft, pre.draft) == ([7, 8], [])
    ended = Slot(0, n_ctx=64)
    ended.assign(Task([1, 2], TaskParams(n_predict=1)), 0, order=1)
    ended.generating, ended.generated = True, [5]
    draft([ended], spec, n_ctx_slot=64, n_predict_max=-1)  # type: ignore[arg-type]
    assert spec.requests == [] and ended.draft == []  # no token left to generate: no room


def test_forward_counts_the_decode_and_computes_only_the_sampled_rows() -> None:
    slots = [busy(0, [1, 2, 3], order=1), busy(1, [4], order=2)]
    plan = plan_batch(slots, stub_model(), [], 8)
    assert plan is not None
    hidden = np.arange(8, dtype=np.float32).reshape(2, 4)  # two output rows: each prompt's last
    seen: list[np.ndarray] = []
    model = SimpleNamespace(
        forward_hidden=lambda batch, cache: hidden, logits=lambda h: seen.append(h) or h * 2
    )
    m = Metrics()
    h, logits = forward(model, None, plan, slots, m)  # type: ignore[arg-type]
    assert h is hidden and logits is not None and np.array_equal(logits, hidden * 2)
    assert (m.n_decode_total, m.n_busy_slots_total, m.n_tokens_max) == (1, 2, 3)
