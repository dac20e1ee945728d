"""After the forward pass, per slot (phase 4 of `Engine.step`): the fed tokens join the
slot's cache; a completion samples its next token (or verifies its speculative draft row
after row), streams it and ends on a stop condition; an embedding task collects hidden
states and is pooled when its prompt is done; prompt progress is reported.

`SlotUpdate` holds what these steps read of the engine, taken afresh each step (a driver may
swap the engine's `metrics`, a test its `spec`); `pick` and `limit` are plain functions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.runtime.batch_plan import SlotRows
from llamacli.core.runtime.metrics import Metrics
from llamacli.core.runtime.results import emit, finish, finish_embedding, send_progress
from llamacli.core.runtime.slot import Slot
from llamacli.core.runtime.stop import AfterToken, stop_reason
from llamacli.core.speculative.speculator import Speculator
from llamacli.core.text.grammar import GrammarError


def limit(n_predict: int, n_predict_max: int) -> int:
    """Tokens a task may generate (-1: no limit), the server-wide cap applied."""
    if n_predict_max >= 0 and (n_predict < 0 or n_predict > n_predict_max):
        return n_predict_max
    return n_predict


def pick(s: Slot, logits: np.ndarray, metrics: Metrics) -> int | None:
    """Sample a token under the slot's reasoning budget or grammar, and let them (and the
    sampler's history) accept it; None when the token breaks the grammar (the task ends)."""
    assert s.task is not None and s.sampler is not None
    grammar, budget = s.grammar, s.budget
    if budget is not None and s.task.end_reasoning.is_set():
        s.task.end_reasoning.clear()
        budget.force()
    if budget is not None and budget.forcing:
        budget.apply(logits)  # the budget message and end tag, one token per step
    elif grammar is not None:
        grammar.apply(logits)  # -inf where the grammar forbids; EOG only where it may end
        if grammar.failed:
            finish(s, "error", metrics, error=GrammarError(f"the grammar cannot go on here: {grammar.error()}"))
            return None
    tok = s.sampler.sample(logits)
    s.sampler.accept(tok)
    if budget is not None:
        budget.accept(tok)
    if grammar is not None and not grammar.accept(tok):
        if grammar.allowed_last(tok):  # the mask let it through: the parser itself gave up
            msg = "the grammar cannot go on after this token"
        else:
            msg = "the sampled token breaks the grammar (logit_bias or ignore_eos removed every allowed token)"
        finish(s, "error", metrics, error=GrammarError(f"{msg}: {grammar.error()}"))
        return None
    return tok


@dataclass(frozen=True)
class SlotUpdate:
    """One step's update of the slots it evaluated. Reads the model (pooling, the classifier)
    and the cache (dropping rejected draft rows); writes the slots, `metrics` and the
    speculator's acceptance counts."""

    model: DecoderModel
    cache: KVCache
    metrics: Metrics
    spec: Speculator | None
    eog_ids: frozenset[int]
    n_predict_max: int

    def __call__(self, s: Slot, rows: SlotRows, hidden: np.ndarray, logits: np.ndarray | None) -> None:
        """After the forward: the slot's fed tokens are cached; sample (or verify the draft),
        pool a finished embedding, report prompt progress."""
        s.cached.extend(rows.tokens)
        if rows.decode:
            assert logits is not None
            if len(rows.tokens) == 1:
                self.sample(s, logits[rows.logits.start])
            else:
                self.verify(s, logits[rows.logits])
            return
        s.n_past += len(rows.tokens)
        assert s.task is not None
        if s.task.kind == "embedding":
            s.hidden.append(hidden[rows.hidden])
            if rows.prompt_done:
                finish_embedding(s, self.model, self.metrics)
            return
        if rows.prompt_done:
            s.t_prompt_done = time.perf_counter()
        if s.task.params.return_progress:
            send_progress(s)
        if rows.prompt_done:
            assert logits is not None
            self.sample(s, logits[rows.logits.start])

    def sample(self, s: Slot, logits: np.ndarray) -> None:
        """The slot's next token from its logits (n_vocab,): sample it, stream it, and end the
        task if a stop condition holds (else it is fed at the next step)."""
        assert s.task is not None
        p = s.task.params
        s.generating = True
        n_limit = limit(p.n_predict, self.n_predict_max)
        if n_limit == 0:  # -n 0: the prompt is evaluated, nothing generated
            finish(s, "limit", self.metrics)
            return
        tok = pick(s, logits, self.metrics)
        if tok is None:
            return
        emit(s, tok)  # an end-of-generation token too: llama-server streams, returns and counts it
        if tok in self.eog_ids and not p.ignore_eos:
            finish(s, "eos", self.metrics)
            return
        assert s.stop is not None
        reason = stop_reason(
            AfterToken(
                stopped_word=s.stop.stopped_word,
                # a complete grammar lets only EOG follow: the next step samples it, as llama-server
                # does (and returns it); with EOG barred (ignore_eos) nothing may follow
                grammar_complete=s.grammar is not None and s.grammar.is_stopped and p.ignore_eos,
                n_generated=len(s.generated),
                limit=n_limit,
                ms_generating=(time.perf_counter() - s.t_prompt_done) * 1e3,
                t_max_predict_ms=p.t_max_predict_ms,
            )
        )
        if reason is not None:
            finish(s, reason, self.metrics)
        else:
            s.next_token = tok

    def verify(self, s: Slot, logits: np.ndarray) -> None:
        """Rows (1 + k, n_vocab) of the sampled token and k draft tokens: sample row after row
        as plain decoding would, while each sampled token equals the draft's next one; then
        drop the cache cells of the rows after the last accepted token."""
        assert self.spec is not None
        draft = s.draft[: logits.shape[0] - 1]
        base = len(s.cached) - len(draft)  # cells up to the sampled token's
        s.n_draft += len(draft)
        m = self.metrics
        m.spec_draft_tokens_total += len(draft)
        m.spec_drafts_total += 1
        n_acc = 0
        for i, lg in enumerate(logits):
            if i > 0:  # row i exists because draft[i - 1] was just sampled
                n_acc += 1
                s.n_draft_accepted += 1
                m.spec_accepted_tokens_total += 1
            self.sample(s, lg)
            if s.task is None or i == len(draft) or s.next_token != draft[i]:
                break
        del s.cached[base + n_acc :]
        self.cache.truncate(s.id, len(s.cached))
        s.draft = []
        self.spec.accept(s.id, n_acc)
