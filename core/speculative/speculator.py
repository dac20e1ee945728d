"""The engine's side of speculative decoding: which drafters run, how many tokens a slot may
draft this step, and the counters llama-server reports.

Verification (in the engine): the slot's last sampled token and its draft go through one
forward as consecutive rows; row i's logits are sampled with the slot's own sampler exactly
as a plain decode step would be, and the draft is accepted while the sampled token equals
draft[i] (llama.cpp's `common_sampler_sample_and_accept_n`). Every output token is therefore
drawn from the target's distribution given the tokens really accepted, with the same sampler
calls in the same order as without speculation; with batch-invariant logits (the ggml
numerics) the output is the same token for token, greedy or seeded sampling alike. The KV
cells of rejected rows are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from llamacli.core.errors import InvalidRequest
from llamacli.core.model.families.base import DecoderModel
from llamacli.core.speculative.config import SpecConfig
from llamacli.core.speculative.draft_model import DraftModel
from llamacli.core.speculative.drafter import DraftRequest, Drafter
from llamacli.core.speculative.ngram import NgramCache, NgramSimple


def draft_room(n_ctx_slot: int, n_cached: int, limit: int, n_generated: int) -> int:
    """Most draft tokens one step may verify (llama-server's get_n_draft_max): one cell stays
    free beyond the verified rows, and a draft of k tokens yields up to k + 1 new tokens, so
    it stays below the tokens left to generate (limit -1: no limit)."""
    room = n_ctx_slot - n_cached - 2
    if limit >= 0:
        room = min(room, limit - n_generated - 1)
    return max(0, room)


class Speculator:
    """Drafters tried in order for each slot; the first non-empty draft is used."""

    def __init__(self, drafters: list[Drafter]) -> None:
        self.drafters = drafters
        self._last: dict[int, Drafter] = {}  # slot -> the drafter of its last draft

    def begin(self, slot_id: int, prompt: Sequence[int]) -> None:
        self._last.pop(slot_id, None)
        for d in self.drafters:
            d.begin(slot_id, prompt)

    def draft(self, requests: list[DraftRequest]) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in requests]
        todo = [(i, r) for i, r in enumerate(requests) if r.n_max > 0]
        for d in self.drafters:
            if not todo:
                break
            got = d.draft([r for _, r in todo])
            left = []
            for (i, r), toks in zip(todo, got):
                if toks:
                    out[i] = toks[: r.n_max]
                    self._last[r.slot_id] = d
                else:
                    left.append((i, r))
            todo = left
        return out

    def accept(self, slot_id: int, n_accepted: int) -> None:
        d = self._last.get(slot_id)
        if d is not None:
            d.accept(slot_id, n_accepted)


def make_speculator(
    config: SpecConfig, n_seq: int, n_ctx: int, n_batch: int,
    draft_model: DecoderModel | None = None, n_vocab: int | None = None,
) -> Speculator | None:
    """The speculator a configuration asks for (None: speculation off)."""
    config.validate()
    if not config.enabled:
        if draft_model is not None:
            raise InvalidRequest("a draft model was given but --spec-type does not include draft-simple")
        return None
    drafters: list[Drafter] = []
    # the draftless n-gram types first (llama.cpp gives them precedence over a draft model)
    for t in config.types:
        if t == "ngram-simple":
            drafters.append(NgramSimple(config.ngram_size_n, config.ngram_size_m))
        elif t == "ngram-cache":
            drafters.append(NgramCache())
    if config.uses_draft_model:
        if draft_model is None:
            raise InvalidRequest("--spec-type draft-simple needs a draft model (-md FILE)")
        drafters.append(DraftModel(draft_model, n_seq, n_ctx, n_batch, config.draft, n_vocab))
    elif draft_model is not None:
        raise InvalidRequest("a draft model was given but --spec-type does not include draft-simple")
    return Speculator(drafters)
