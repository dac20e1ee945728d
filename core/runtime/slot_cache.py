"""Operations on a slot's cached tokens and K/V beyond prompt reuse: the context shift of a
generating slot whose sequence is full (`_retire` in `Engine.step`), and the cache operations
of idle slots (restore from a slot file, erase) that drivers run through `Engine.call`.
Writing slot files is `slot_store`.

Plain functions: each writes the slot's `cached` tokens and its sequence of the cache, and
nothing else of the engine (`shift_or_end` may end the task, adding to `metrics`).
"""

from __future__ import annotations

from llamacli.core.errors import InvalidRequest, SlotBusy
from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.runtime.metrics import Metrics
from llamacli.core.runtime.results import finish
from llamacli.core.runtime.slot import Slot
from llamacli.core.runtime.slot_store import SaveResult, restore_slot


def shift_or_end(
    s: Slot, model: DecoderModel, cache: KVCache, context_shift: bool, bos: int | None, metrics: Metrics
) -> None:
    """The slot's sequence has no free cell: shift (drop half after n_keep) or stop."""
    assert s.task is not None
    s.truncated = True
    if not context_shift or not model.can_shift:  # llama-server disables the shift where the cache cannot
        finish(s, "limit", metrics)
        return
    n_keep = s.task.params.n_keep
    n_keep = len(s.prompt) if n_keep < 0 else n_keep
    first = 1 if (s.cached and s.cached[0] == bos) else 0
    n_keep = min(n_keep + first, len(s.cached) - 1)
    n_left = len(s.cached) - n_keep
    n_discard = max(1, n_left // 2)
    model.shift_cache(cache, s.id, n_keep, n_discard)
    del s.cached[n_keep : n_keep + n_discard]


def idle_slot(slots: list[Slot], slot_id: int) -> Slot:
    """The slot a cache operation names: it must exist and have no task."""
    if not 0 <= slot_id < len(slots):
        raise InvalidRequest(f"slot {slot_id} does not exist")
    s = slots[slot_id]
    if s.busy:
        raise SlotBusy(f"slot {slot_id} is processing a task")
    return s


def restore(s: Slot, cache: KVCache, path: str, lora: tuple[float, ...]) -> SaveResult:
    """Load a slot file into an idle slot; its K/V are taken as made with LoRA scales `lora`
    (the file does not say)."""
    tokens, res = restore_slot(cache, s.id, path)
    s.cached = tokens
    s.lora = lora
    return res


def erase(s: Slot, cache: KVCache) -> int:
    """Forget an idle slot's cached tokens (and its last task); the number erased."""
    n = len(s.cached)
    cache.clear(s.id)
    s.cached.clear()
    s.last_task = None
    return n
