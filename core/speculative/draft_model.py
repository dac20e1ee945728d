"""draft-simple: a smaller model with the same vocabulary drafts greedily (llama.cpp's
`common_speculative_gen_draft`).

Each slot has a row in the draft model's own KV cache. To draft, the row is brought up to the
slot's history (the longest common prefix is kept, the rest evaluated), the last sampled
token is fed, and the draft model's top token is taken step by step (its probability within
the top 10, as llama.cpp's top-k 10 draft sampler sees it) until n_max tokens or, after a
token whose probability is below p_min, stops. All drafting slots share each forward.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from llamacli.core.model.state.batch import Batch
from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.state.kv_cache import common_prefix
from llamacli.core.speculative.config import DraftParams
from llamacli.core.speculative.drafter import DraftRequest
from llamacli.core.text.tokenizer import Vocab

VOCAB_MAX_SIZE_DIFFERENCE = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
VOCAB_CHECK_START = 5  # token texts are compared from this id on (SPEC_VOCAB_CHECK_START_TOKEN_ID)
TOP_K = 10


def check_compatible(target: Vocab, draft: Vocab, draft_path: str) -> None:
    """The draft model must tokenize as the target does (llama.cpp's checks)."""
    if target.kind != draft.kind:
        raise ModelLoadError(draft_path, f"draft vocabulary type {draft.kind} differs from the target's ({target.kind})")
    if (target.add_bos, target.add_eos, target.bos, target.eos) != (draft.add_bos, draft.add_eos, draft.bos, draft.eos):
        raise ModelLoadError(draft_path, "the draft model's BOS/EOS tokens differ from the target's")
    n_t, n_d = len(target.tokens), len(draft.tokens)
    if abs(n_t - n_d) > VOCAB_MAX_SIZE_DIFFERENCE:
        raise ModelLoadError(draft_path, f"draft vocabulary has {n_d} tokens, the target's {n_t} (at most {VOCAB_MAX_SIZE_DIFFERENCE} apart)")
    for i in range(VOCAB_CHECK_START, min(n_t, n_d)):
        if target.tokens[i] != draft.tokens[i]:
            raise ModelLoadError(draft_path, f"token {i} differs: target {target.tokens[i]!r}, draft {draft.tokens[i]!r}")


def top_prob(logits: np.ndarray) -> tuple[int, float]:
    """(argmax, its softmax probability among the TOP_K largest logits)."""
    best = int(np.argmax(logits))
    k = min(TOP_K, logits.shape[0])
    top = np.partition(logits, -k)[-k:].astype(np.float64)
    return best, float(1.0 / np.exp(top - top.max()).sum())


class DraftModel:
    name = "draft-simple"

    def __init__(
        self, model: DecoderModel, n_seq: int, n_ctx: int, n_batch: int,
        params: DraftParams = DraftParams(), n_vocab_target: int | None = None,
    ) -> None:
        self.model = model
        self.cache = model.new_cache(n_seq, n_ctx)
        self.tokens: list[list[int]] = [[] for _ in range(n_seq)]  # per slot: what its cache row holds
        self.n_batch = max(1, n_batch)
        self.params = params
        self.n_vocab_target = n_vocab_target

    def begin(self, slot_id: int, prompt: Sequence[int]) -> None:
        pass  # the row is synchronised lazily, keeping whatever prefix still matches

    def accept(self, slot_id: int, n_accepted: int) -> None:
        pass

    def _catch_up(self, slot_id: int, history: Sequence[int]) -> None:
        """Make the slot's draft cache row hold exactly `history`."""
        have = self.tokens[slot_id]
        keep = common_prefix(have, list(history))
        del have[keep:]
        self.cache.truncate(slot_id, keep)
        for a in range(keep, len(history), self.n_batch):
            chunk = list(history[a : a + self.n_batch])
            n = len(chunk)
            self.model.forward_hidden(Batch(chunk, [slot_id] * n, range(a, a + n), np.zeros(n, bool)), self.cache)
            have.extend(chunk)

    def draft(self, requests: list[DraftRequest]) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in requests]
        bounds = [r.params or self.params for r in requests]
        want = [(i, r, min(bounds[i].n_max, r.n_max)) for i, r in enumerate(requests)]
        want = [(i, r, n) for i, r, n in want if n > 0 and n >= bounds[i].n_min]
        for _, r, _ in want:
            self._catch_up(r.slot_id, r.history)
        feed = {i: r.last for i, r, _ in want}
        active = want
        while active:
            sids = [r.slot_id for _, r, _ in active]
            toks = [feed[i] for i, _, _ in active]
            pos = [len(self.tokens[s]) for s in sids]
            logits = self.model.forward(Batch(toks, sids, pos, np.ones(len(toks), bool)), self.cache)  # (A, V)
            still = []
            for (i, r, n), lg, t in zip(active, logits, toks):
                self.tokens[r.slot_id].append(t)
                tok, p = top_prob(lg)
                if self.n_vocab_target is not None and tok >= self.n_vocab_target:
                    continue  # a token the target does not have ends the draft
                out[i].append(tok)
                if len(out[i]) < n and p >= bounds[i].p_min:
                    feed[i] = tok
                    still.append((i, r, n))
            active = still
        return [d if len(d) >= b.n_min else [] for d, b in zip(out, bounds)]
