"""What one engine step evaluates (phases 2 and 3 of `Engine.step`): the speculative drafts
of the generating slots, the slots of this forward (one LoRA group), the scheduler's chunks
and the batch they make (`scheduler.schedule` and `batch_plan.build_batch`, both pure), then
the model's forward pass over that batch and the logits of the rows to sample.

Plain functions over the engine's slots and model: `draft` writes each slot's `draft`;
`plan_batch` writes the slots' `last_step` and the model's active LoRA set; `forward` writes
the cache (through the model) and the decode counters of `metrics`.
"""

from __future__ import annotations

import numpy as np

from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.model.state.lora import LoraAdapter, LoraSet
from llamacli.core.runtime.batch_plan import BatchPlan, build_batch
from llamacli.core.runtime.metrics import Metrics
from llamacli.core.runtime.scheduler import SlotState, schedule
from llamacli.core.runtime.slot import Slot
from llamacli.core.runtime.slot_update import limit
from llamacli.core.speculative.drafter import DraftRequest
from llamacli.core.speculative.speculator import Speculator, draft_room


def draft(slots: list[Slot], spec: Speculator, n_ctx_slot: int, n_predict_max: int) -> None:
    """Set each generating slot's draft (empty where nothing is proposed or fits)."""
    reqs: list[DraftRequest] = []
    for s in slots:
        s.draft = []
        if s.task is None or not s.generating or s.task.kind != "completion":
            continue
        room = draft_room(n_ctx_slot, len(s.cached), limit(s.task.params.n_predict, n_predict_max), len(s.generated))
        if room > 0:
            reqs.append(DraftRequest(s.id, s.cached, s.next_token, room, s.task.params.speculative))
    for r, d in zip(reqs, spec.draft(reqs)):
        slots[r.slot_id].draft = d


def plan_batch(slots: list[Slot], model: DecoderModel, loras: list[LoraAdapter], n_batch: int) -> BatchPlan | None:
    """The slots of this forward (one LoRA group), their chunks and the batch; None when no
    slot has anything to evaluate. Steps are numbered one past the latest step any slot took
    part in (a slot's `last_step`; it never goes back), so the numbers count the forwards."""
    ready = [s for s in slots if s.task is not None and (s.generating or s.n_prompt_left > 0)]
    if loras and ready:
        # one LoRA set per forward: that of the slot that has waited longest (groups alternate)
        first = min(ready, key=lambda s: (s.last_step, s.order))
        ready = [s for s in ready if s.lora == first.lora]
        model.precision.lora = LoraSet(tuple((a, sc) for a, sc in zip(loras, first.lora) if sc != 0.0))
    states = [
        SlotState(s.id, s.generating, s.n_prompt_left, s.order, whole=not model.causal, n_draft=len(s.draft),
                  atoms=_atoms(s))
        for s in ready
    ]
    chunks = schedule(states, n_batch)
    if not chunks:
        return None
    step = 1 + max(s.last_step for s in slots)
    for ch in chunks:
        slots[ch.slot_id].last_step = step
    return build_batch(chunks, {s.id: s.feed() for s in ready}, n_batch)


def _atoms(s: Slot) -> tuple[tuple[int, int], ...]:
    """The non-causal images still ahead in a prefilling slot's prompt, relative to n_past."""
    if s.task is None or s.generating or not s.task.media:
        return ()
    return tuple((sp.start - s.n_past, sp.end - s.n_past) for sp in s.task.media if sp.non_causal and sp.end > s.n_past)


def forward(
    model: DecoderModel, cache: KVCache, plan: BatchPlan, slots: list[Slot], metrics: Metrics
) -> tuple[np.ndarray, np.ndarray | None]:
    """One forward pass over the batch: the hidden states of its output rows (n_out, n_embd)
    and the logits of the rows to sample (n_logits, n_vocab: a prompt's last token, decode
    tokens, drafts; None when there are none)."""
    hidden = model.forward_hidden(plan.batch, cache)  # (n_out, n_embd)
    m = metrics
    m.n_decode_total += 1
    m.n_busy_slots_total += sum(1 for s in slots if s.busy)
    m.n_tokens_max = max(m.n_tokens_max, plan.n_positions)
    logits = model.logits(hidden[plan.logit_rows]) if plan.logit_rows.size else None
    return hidden, logits
