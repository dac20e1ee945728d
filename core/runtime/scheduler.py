"""The scheduling decision of one engine step, as a pure function (no model, no threads).

Every step makes one unified batch: first the next token of every generating slot (so that
decoding never waits on a long prompt), then prompt chunks of the slots in prefill, sharing
the rest of the token budget fairly. A long prompt is thus processed in chunks across steps
while the other slots keep generating, and a short prompt arriving during long prefills is
done in one step (chunked prefill).
"""

from __future__ import annotations

from dataclasses import dataclass

from llamacli.core.model.state.kv_cache import common_prefix


@dataclass(frozen=True)
class SlotState:
    """What the scheduler needs to know about a busy slot."""

    slot_id: int
    generating: bool  # True: needs one decode token; False: in prefill
    n_prompt_left: int = 0  # prefill: prompt tokens not yet in the cache
    order: int = 0  # arrival order of its task (lower first)
    whole: bool = False  # prefill only in one chunk (encoders: no KV cache to continue from)
    n_draft: int = 0  # generating: speculative draft tokens to verify after its next token
    atoms: tuple[tuple[int, int], ...] = ()  # prefill: [a, b) prompt ranges (from the next prompt
    # token) that go into one batch whole: non-causal images


@dataclass(frozen=True)
class Chunk:
    slot_id: int
    n_tokens: int  # decode: 1 + draft tokens verified with it; prefill: the next n prompt tokens
    decode: bool


def schedule(slots: list[SlotState], budget: int) -> list[Chunk]:
    """Chunks for one forward pass of at most `budget` tokens.

    Decode tokens always come first (budget permitting, oldest first), each with as much of
    its slot's speculative draft as the budget allows. Prefilling slots then
    share what is left fairly (water-filling: a slot needing less than an equal share takes
    what it needs, the rest is split among the others), so a short prompt finishes its
    prefill in the next step even while long prompts are being processed. `whole` prompts
    (encoders) are never split: they go first, oldest first, as long as they fit.
    """
    if budget < 1:
        raise ValueError("the batch budget must be at least 1 token")
    out: list[Chunk] = []
    left = budget
    for s in sorted((s for s in slots if s.generating), key=lambda s: s.order):
        if left == 0:
            break
        n = min(1 + s.n_draft, left)
        out.append(Chunk(s.slot_id, n, True))
        left -= n
    pre = sorted((s for s in slots if not s.generating and s.n_prompt_left > 0), key=lambda s: s.order)
    take: dict[int, int] = {}
    for s in (s for s in pre if s.whole):  # whole prompts first, in arrival order, while they fit
        if s.n_prompt_left > left:
            break  # the oldest waits for a batch with room rather than being overtaken
        take[s.slot_id] = s.n_prompt_left
        left -= s.n_prompt_left
    by_need = sorted((s for s in pre if not s.whole), key=lambda s: (s.n_prompt_left, s.order))
    for i, s in enumerate(by_need):
        share = left // (len(by_need) - i)
        if share == 0:
            share = 1 if left > 0 else 0  # fewer tokens than slots: the oldest go first
        n = _snap(min(s.n_prompt_left, share), s.atoms, left)
        take[s.slot_id] = n
        left -= n
    if left < 0:
        raise AssertionError("over budget")
    for s in pre:  # arrival order in the batch
        if take.get(s.slot_id, 0) > 0:
            out.append(Chunk(s.slot_id, take[s.slot_id], False))
    return out


def _snap(n: int, atoms: tuple[tuple[int, int], ...], room: int) -> int:
    """A chunk of n tokens that does not end inside an atom: cut before it, or, when the atom
    is next, take it whole if the budget left (room) holds it, else nothing this step."""
    for a, b in atoms:
        if a < n < b:
            return a if a > 0 else (b if b <= room else 0)
    return n


@dataclass(frozen=True)
class IdleSlot:
    slot_id: int
    cached: tuple[int, ...] | list[int]  # tokens in its cache
    last_used: float  # when it last finished a task


def choose_slot(idle: list[IdleSlot], prompt: list[int], similarity: float) -> tuple[int, int]:
    """(slot id, reusable prefix length) for a new prompt, as llama-server picks: the idle slot
    whose cached tokens share the longest prefix, if that prefix is at least `similarity` of
    the prompt; otherwise the least recently used idle slot."""
    if not idle:
        raise ValueError("no idle slot")
    best, best_lcp = None, -1
    if similarity > 0 and prompt:
        for s in idle:
            lcp = common_prefix(list(s.cached), prompt)
            if lcp > best_lcp and lcp / len(prompt) >= similarity:
                best, best_lcp = s, lcp
    if best is None:
        best = min(idle, key=lambda s: s.last_used)
        best_lcp = common_prefix(list(best.cached), prompt)
    return best.slot_id, best_lcp
