"""The engine: N slots over one model, a task queue, and one loop thread doing continuous
batching. Drivers (the chat REPL, the HTTP adapter, `llama complete`) only submit tasks and
read their result streams.

One step of the loop (`Engine.step`):
  1. admit queued tasks into idle slots (best cached-prefix match, else least recently used);
     end cancelled tasks, shift (or end) full contexts;
  2. plan: speculative drafts, `scheduler.schedule` (one decode token per generating slot, with
     its draft, then prompt chunks), `batch_plan.build_batch` (the unified batch and which of
     its rows belong to which slot);
  3. one `model.forward_hidden` over that batch, then the logits of the rows to sample;
  4. per slot: its tokens join the cache; sample (or verify the draft), emit, stop reason;
  5. finished slots are released (their cached tokens stay for prompt reuse).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from llamacli.core.errors import ContextOverflow, InvalidRequest, SlotBusy
from llamacli.core.text.grammar import GrammarConstraint, GrammarError, compile_grammar
from llamacli.core.model.state.lora import LoraAdapter, LoraSet
from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.kernels.pooling import pool
from llamacli.core.text.reasoning import ReasoningBudget
from llamacli.core.sampling import Sampler
from llamacli.core.runtime.batch_plan import BatchPlan, SlotRows, build_batch
from llamacli.core.runtime.scheduler import IdleSlot, SlotState, choose_slot, schedule
from llamacli.core.runtime.slot import Slot
from llamacli.core.runtime.slot_store import SaveResult, restore_slot, save_slot, slot_path
from llamacli.core.speculative.config import SpecConfig
from llamacli.core.speculative.drafter import DraftRequest
from llamacli.core.speculative.speculator import draft_room, make_speculator
from llamacli.core.runtime.stop import AfterToken, StopMatcher, stop_reason
from llamacli.core.runtime.tasks import Final, Partial, Task, Timings, TokenProb
from llamacli.core.text.tokenizer import IncrementalDecoder, Tokenizer
from llamacli.core.text.tool_calls.tokens import preserving

R = TypeVar("R")


@dataclass
class EngineConfig:
    """Engine-wide settings (llama-server's flags, already parsed)."""

    n_ctx: int = 4096  # total context, shared by the slots
    n_parallel: int = 1
    n_batch: int = 512  # most tokens in one forward pass
    slot_prompt_similarity: float = 0.10
    context_shift: bool = False
    kv_unified: bool = (
        False  # every slot may use all n_ctx cells (memory grows with n_parallel)
    )
    n_predict_max: int = -1  # server-wide cap on n_predict (-1: none)
    speculative: SpecConfig = field(default_factory=SpecConfig)  # --spec-type and friends

    @property
    def n_ctx_slot(self) -> int:
        return (
            self.n_ctx
            if self.kv_unified
            else max(1, self.n_ctx // max(1, self.n_parallel))
        )


@dataclass
class Metrics:
    """Counters behind /metrics (llama-server's `llamacpp:` names)."""

    prompt_tokens_total: int = 0  # processed (decoded) prompt tokens; cached ones apart
    prompt_tokens_cached_total: int = 0
    prompt_seconds_total: float = 0.0
    tokens_predicted_total: int = 0
    tokens_predicted_seconds_total: float = 0.0
    n_decode_total: int = 0
    n_busy_slots_total: int = 0
    n_tokens_max: int = 0
    requests_processing: int = 0
    requests_deferred: int = 0
    spec_draft_tokens_total: int = 0  # speculative decoding: tokens drafted and verified
    spec_accepted_tokens_total: int = 0
    spec_drafts_total: int = 0  # verification steps


class Engine:
    def __init__(
        self,
        model: DecoderModel,
        tokenizer: Tokenizer,
        config: EngineConfig | None = None,
        loras: list[tuple[LoraAdapter, float]] | None = None,
        draft_model: DecoderModel | None = None,
    ) -> None:
        """draft_model: the -md model of speculative draft-simple (same vocabulary)."""
        self.model = model
        self.tokenizer = tokenizer
        self.config = config or EngineConfig()
        c = self.config
        if c.n_parallel < 1:
            raise InvalidRequest("n_parallel must be at least 1")
        if c.n_batch < 1:
            raise InvalidRequest("n_batch must be at least 1")
        self.n_ctx_slot = c.n_ctx_slot
        self.cache = model.new_cache(c.n_parallel, self.n_ctx_slot)
        self.slots = [Slot(i, self.n_ctx_slot) for i in range(c.n_parallel)]
        self.metrics = Metrics()
        self._queue: deque[Task] = deque()
        self._calls: deque[tuple[Callable[[], Any], Future[Any]]] = deque()
        self._cond = threading.Condition()
        self._running = False
        self._thread: threading.Thread | None = None
        self._order = 0
        self.eog_ids = frozenset(tokenizer.vocab.eog_ids)
        # LoRA adapters (loaded with the model) and their scales for tasks that name none
        self.loras = [a for a, _ in loras or []]
        self.lora_scales = tuple(float(s) for _, s in loras or [])
        self._steps = 0
        self.spec = make_speculator(
            c.speculative, c.n_parallel, self.n_ctx_slot, c.n_batch, draft_model, tokenizer.n_vocab
        )

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self) -> "Engine":
        with self._cond:
            if self._running:
                return self
            self._running = True
        self._thread = threading.Thread(
            target=self._loop, name="llama-engine", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, cancel: bool = True) -> None:
        """Stop the loop thread; with cancel, running and queued tasks end as `cancelled`."""
        with self._cond:
            if cancel:
                for t in list(self._queue):
                    t.cancel()
                for s in self.slots:
                    if s.task is not None:
                        s.task.cancel()
            self._running = False
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        for t in list(self._queue):
            self._finish_queued(t, "cancelled")
        self._queue.clear()
        for s in self.slots:
            if s.task is not None:
                self._finish(s, "cancelled")
        self._count_load()  # the loop thread has ended: nothing runs, nothing waits

    def __enter__(self) -> "Engine":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- in-process API -------------------------------------------------------------------
    def submit(self, task: Task) -> Task:
        """Queue a task; read `task.results` (blocking or async) for its Partials and Final."""
        if not task.prompt_tokens:
            raise InvalidRequest("the prompt is empty")
        if task.params.id_slot >= self.config.n_parallel:
            raise InvalidRequest(
                f"id_slot {task.params.id_slot} does not exist (slots: {self.config.n_parallel})"
            )
        if len(task.prompt_tokens) >= self.n_ctx_slot:
            raise ContextOverflow(len(task.prompt_tokens), self.n_ctx_slot)
        if task.kind == "completion" and not self.model.has_lm_head:
            raise InvalidRequest(f"this model ({self.model.args.arch}) is an encoder: it computes embeddings, not text")
        self.model.check_input(len(task.prompt_tokens), self.config.n_batch)
        if task.kind == "embedding" and task.pooling == "rank" and not self.model.n_cls_out:
            raise InvalidRequest("rank pooling needs a model with a classification head (cls, cls.output)")
        if task.params.sampling is not None:
            task.params.sampling.validate()
        if task.params.lora is not None and len(task.params.lora) != len(self.loras):
            raise InvalidRequest(f"lora: {len(task.params.lora)} scales given for {len(self.loras)} adapters")
        if task.params.grammar is not None and task.kind == "completion":
            compile_grammar(self.tokenizer, task.params.grammar)  # GrammarError (400) if unusable
        with self._cond:
            self._queue.append(task)
            self._cond.notify_all()
        return task

    def run(self, task: Task) -> Final:
        """Submit and wait for the Final result (raises its error, if any)."""
        self.submit(task)
        final: Final | None = None
        for r in task.results:
            if isinstance(r, Final):
                final = r
        assert final is not None
        if final.error is not None:
            raise final.error
        return final

    def call(self, fn: Callable[[], R]) -> R:
        """Run fn on the loop thread between two steps (for cache operations) and return its value."""
        fut: Future[R] = Future()
        with self._cond:
            if not self._running:
                return fn()
            self._calls.append((fn, fut))
            self._cond.notify_all()
        return fut.result()

    @property
    def n_queued(self) -> int:
        return len(self._queue)

    # ---- the loop -------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._running and not self._calls and not self._has_work():
                    self._cond.wait()
                if not self._running:
                    return
                calls = list(self._calls)
                self._calls.clear()
            for fn, fut in calls:
                try:
                    fut.set_result(fn())
                except BaseException as e:  # noqa: BLE001 - handed to the caller
                    fut.set_exception(e)
            try:
                did = self.step()
            except Exception as e:  # a bug or a model error: fail the running tasks, keep serving
                did = True
                for s in self.slots:
                    if s.task is not None:
                        self._finish(s, "error", error=e)
            self._count_load()
            if not did:
                # queued work that cannot start yet (e.g. pinned to a busy slot): nap until
                # something changes instead of spinning; 50 ms also bounds how late a
                # cancelled queued task is noticed
                with self._cond:
                    if self._running and not self._calls:
                        self._cond.wait(0.05)

    def _count_load(self) -> None:
        """The requests_processing / requests_deferred gauges, as the step left the slots and
        the queue (written here only, on the loop thread; /metrics reads them)."""
        self.metrics.requests_processing = sum(1 for s in self.slots if s.busy)
        self.metrics.requests_deferred = len(self._queue)

    def _has_work(self) -> bool:
        return (
            bool(self._queue)
            and any(not s.busy for s in self.slots)
            or any(s.busy for s in self.slots)
        )

    def step(self) -> bool:
        """One scheduling step; False when there was nothing to do."""
        self._admit()  # queued tasks into idle slots
        self._retire()  # cancelled tasks end; full contexts shift or end
        plan = self._plan()  # drafts, schedule, the batch and each slot's rows
        if plan is None:
            return False
        hidden = self._forward(plan)  # (n_out, n_embd): the batch's output rows
        # (n_logits, n_vocab): the rows to sample (a prompt's last token, decode tokens, drafts)
        logits = self.model.logits(hidden[plan.logit_rows]) if plan.logit_rows.size else None
        for rows in plan.rows:  # sample or verify, emit, stop; a finished slot is released
            self._update(self.slots[rows.slot_id], rows, hidden, logits)
        return True

    def _retire(self) -> None:
        """End cancelled tasks; shift (or end) generating slots whose context is full."""
        for s in self.slots:
            if s.task is not None and s.task.cancelled.is_set():
                self._finish(s, "cancelled")
        for s in self.slots:
            if s.task is not None and s.generating and len(s.cached) >= self.n_ctx_slot:
                self._context_full(s)

    def _plan(self) -> BatchPlan | None:
        """Drafts, then the slots of this forward (one LoRA group), their chunks and the batch."""
        if self.spec is not None:
            self._draft()
        ready = [s for s in self.slots if s.task is not None and (s.generating or s.n_prompt_left > 0)]
        if self.loras and ready:
            # one LoRA set per forward: that of the slot that has waited longest (groups alternate)
            first = min(ready, key=lambda s: (s.last_step, s.order))
            ready = [s for s in ready if s.lora == first.lora]
            self.model.precision.lora = LoraSet(tuple((a, sc) for a, sc in zip(self.loras, first.lora) if sc != 0.0))
        states = [
            SlotState(s.id, s.generating, s.n_prompt_left, s.order, whole=not self.model.causal, n_draft=len(s.draft))
            for s in ready
        ]
        chunks = schedule(states, self.config.n_batch)
        if not chunks:
            return None
        self._steps += 1
        for ch in chunks:
            self.slots[ch.slot_id].last_step = self._steps
        return build_batch(chunks, {s.id: s.feed() for s in ready}, self.config.n_batch)

    def _forward(self, plan: BatchPlan) -> np.ndarray:
        """One forward pass over the batch: the hidden states of its output rows."""
        hidden = self.model.forward_hidden(plan.batch, self.cache)  # (n_out, n_embd)
        m = self.metrics
        m.n_decode_total += 1
        m.n_busy_slots_total += sum(1 for s in self.slots if s.busy)
        m.n_tokens_max = max(m.n_tokens_max, plan.n_positions)
        return hidden

    def _update(self, s: Slot, rows: SlotRows, hidden: np.ndarray, logits: np.ndarray | None) -> None:
        """After the forward: the slot's fed tokens are cached; sample (or verify the draft),
        pool a finished embedding, report prompt progress."""
        s.cached.extend(rows.tokens)
        if rows.decode:
            assert logits is not None
            if len(rows.tokens) == 1:
                self._sample(s, logits[rows.logits.start])
            else:
                self._verify(s, logits[rows.logits])
            return
        s.n_past += len(rows.tokens)
        assert s.task is not None
        if s.task.kind == "embedding":
            s.hidden.append(hidden[rows.hidden])
            if rows.prompt_done:
                self._finish_embedding(s)
            return
        if rows.prompt_done:
            s.t_prompt_done = time.perf_counter()
        if s.task.params.return_progress:
            self._progress(s)
        if rows.prompt_done:
            assert logits is not None
            self._sample(s, logits[rows.logits.start])

    # ---- speculative decoding (core/speculative) -------------------------------------------
    def _draft(self) -> None:
        """Set each generating slot's draft (empty where nothing is proposed or fits)."""
        assert self.spec is not None
        reqs: list[DraftRequest] = []
        for s in self.slots:
            s.draft = []
            if s.task is None or not s.generating or s.task.kind != "completion":
                continue
            room = draft_room(self.n_ctx_slot, len(s.cached), self._limit(s.task.params.n_predict), len(s.generated))
            if room > 0:
                reqs.append(DraftRequest(s.id, s.cached, s.next_token, room, s.task.params.speculative))
        for r, d in zip(reqs, self.spec.draft(reqs)):
            self.slots[r.slot_id].draft = d

    def _verify(self, s: Slot, logits: np.ndarray) -> None:
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
            self._sample(s, lg)
            if s.task is None or i == len(draft) or s.next_token != draft[i]:
                break
        del s.cached[base + n_acc :]
        self.cache.truncate(s.id, len(s.cached))
        s.draft = []
        self.spec.accept(s.id, n_acc)

    # ---- admission ------------------------------------------------------------------------
    def _admit(self) -> None:
        with self._cond:
            queued = list(self._queue)
        for task in queued:
            if task.cancelled.is_set():
                self._remove_queued(task)
                self._finish_queued(task, "cancelled")
                continue
            idle = [s for s in self.slots if not s.busy]
            if task.params.id_slot >= 0:
                idle = [s for s in idle if s.id == task.params.id_slot]
            if not idle:
                continue
            self._remove_queued(task)
            lora = self._task_lora(task)
            # a cache made with other adapters is no prefix of this task's (llama-server clears it)
            cand = [IdleSlot(s.id, s.cached if s.lora == lora else (), s.last_used) for s in idle]
            sid, lcp = choose_slot(
                cand, task.prompt_tokens, self.config.slot_prompt_similarity
            )
            self.slots[sid].lora = lora
            self._start(self.slots[sid], task, lcp)

    def _task_lora(self, task: Task) -> tuple[float, ...]:
        """The LoRA scales a task runs with: its own, else the engine's current ones."""
        return self.lora_scales if task.params.lora is None else tuple(task.params.lora)

    def _remove_queued(self, task: Task) -> None:
        with self._cond:
            try:
                self._queue.remove(task)
            except ValueError:
                pass

    def _start(self, s: Slot, task: Task, lcp: int) -> None:
        p = task.params
        n_reuse = lcp if (p.cache_prompt and task.kind == "completion") else 0
        n_reuse = min(n_reuse, len(task.prompt_tokens) - 1)  # evaluate at least one token
        self.cache.truncate(s.id, n_reuse)
        self._order += 1
        s.assign(task, n_reuse, self._order)  # the slot owns the task: an error below fails it
        if task.kind != "completion":
            return
        sampling = replace(p.sampling, ignore_eos=p.sampling.ignore_eos or p.ignore_eos)
        s.sampler = Sampler.for_tokenizer(sampling, self.tokenizer, self.n_ctx_slot)
        s.sampler.accept_prompt(task.prompt_tokens)
        s.decoder = IncrementalDecoder(preserving(self.tokenizer, p.preserved_tokens))
        s.stop = StopMatcher(list(p.stop))
        if p.grammar is not None:
            s.grammar = GrammarConstraint(compile_grammar(self.tokenizer, p.grammar))
        if p.reasoning is not None and p.reasoning.active:
            s.budget = ReasoningBudget.for_tokenizer(p.reasoning, self.tokenizer)
        if self.spec is not None:
            self.spec.begin(s.id, task.prompt_tokens)
        if p.return_progress:
            self._progress(s)  # 0% before any prompt token is evaluated

    def _timings(self, s: Slot, now: float) -> Timings:
        """The task's timings so far (llama-server's `timings`)."""
        t = Timings(cache_n=s.n_cached, draft_n=s.n_draft, draft_n_accepted=s.n_draft_accepted)
        t.prompt_n = s.n_past - s.n_cached
        prompt_done = s.generating or (
            s.task is not None and s.n_past == len(s.prompt) and s.t_prompt_done >= s.t_start
        )
        done = s.t_prompt_done if prompt_done else now
        t.prompt_ms = (done - s.t_start) * 1e3 if t.prompt_n else 0.0
        t.predicted_n = len(s.generated)
        t.predicted_ms = (now - done) * 1e3 if s.generating else 0.0
        return t

    def _progress(self, s: Slot) -> None:
        """A prompt-progress Partial (return_progress), as llama-server's prompt_progress."""
        assert s.task is not None
        now = time.perf_counter()
        progress: dict[str, float] = {
            "total": len(s.task.prompt_tokens),
            "cache": s.n_cached,
            "processed": s.n_past,
            "time_ms": int((now - s.t_start) * 1e3) if s.n_past > s.n_cached else 0,
        }
        timings = self._timings(s, now) if s.task.params.timings_per_token else None
        s.task.results.put(Partial("", [], timings=timings, progress=progress))

    # ---- per-token processing --------------------------------------------------------------
    def _sample(self, s: Slot, logits: np.ndarray) -> None:
        """The slot's next token from its logits (n_vocab,): sample it, stream it, and end the
        task if a stop condition holds (else it is fed at the next step)."""
        assert s.task is not None
        p = s.task.params
        s.generating = True
        limit = self._limit(p.n_predict)
        if limit == 0:  # -n 0: the prompt is evaluated, nothing generated
            self._finish(s, "limit")
            return
        tok = self._pick(s, logits)
        if tok is None:
            return
        if tok in self.eog_ids and not p.ignore_eos:
            self._finish(s, "eos")
            return
        self._emit(s, tok)
        assert s.stop is not None
        reason = stop_reason(
            AfterToken(
                stopped_word=s.stop.stopped_word,
                grammar_complete=s.grammar is not None and s.grammar.is_stopped,
                n_generated=len(s.generated),
                limit=limit,
                ms_generating=(time.perf_counter() - s.t_prompt_done) * 1e3,
                t_max_predict_ms=p.t_max_predict_ms,
            )
        )
        if reason is not None:
            self._finish(s, reason)
        else:
            s.next_token = tok

    def _pick(self, s: Slot, logits: np.ndarray) -> int | None:
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
        tok = s.sampler.sample(logits)
        s.sampler.accept(tok)
        if budget is not None:
            budget.accept(tok)
        if grammar is not None and not grammar.accept(tok):
            msg = "the sampled token breaks the grammar (logit_bias or ignore_eos removed every allowed token)"
            self._finish(s, "error", error=GrammarError(f"{msg}: {grammar.error()}"))
            return None
        return tok

    def _emit(self, s: Slot, tok: int) -> None:
        """Stream a generated token: its text (held back while a stop string may be forming)
        and, when asked, its probabilities and the timings so far."""
        assert s.task is not None and s.sampler is not None and s.decoder is not None and s.stop is not None
        p = s.task.params
        s.generated.append(tok)
        post = p.post_sampling_probs
        probs = [TokenProb(i, pr) for i, pr in s.sampler.last_probs(p.n_probs, post_sampling=post)] if p.n_probs > 0 else []
        chosen = s.sampler.last_chosen_prob(post_sampling=post) if p.n_probs > 0 else None
        text = s.stop.push(s.decoder.feed(tok))
        s.task.results.put(
            Partial(
                text,
                [tok],
                [probs] if p.n_probs else [],
                [chosen] if chosen is not None else [],
                timings=self._timings(s, time.perf_counter()) if p.timings_per_token else None,
            )
        )

    def _limit(self, n_predict: int) -> int:
        """Tokens a task may generate (-1: no limit), the server-wide cap applied."""
        cap = self.config.n_predict_max
        if cap >= 0 and (n_predict < 0 or n_predict > cap):
            return cap
        return n_predict

    def _context_full(self, s: Slot) -> None:
        """The slot's sequence has no free cell: shift (drop half after n_keep) or stop."""
        assert s.task is not None
        s.truncated = True
        if not self.config.context_shift:
            self._finish(s, "limit")
            return
        n_keep = s.task.params.n_keep
        n_keep = len(s.prompt) if n_keep < 0 else n_keep
        bos = 1 if (s.cached and s.cached[0] == self.tokenizer.vocab.bos) else 0
        n_keep = min(n_keep + bos, len(s.cached) - 1)
        n_left = len(s.cached) - n_keep
        n_discard = max(1, n_left // 2)
        self.model.shift_cache(self.cache, s.id, n_keep, n_discard)
        del s.cached[n_keep : n_keep + n_discard]

    # ---- endings --------------------------------------------------------------------------
    def _finish(
        self,
        s: Slot,
        stop_type: str,
        error: Exception | None = None,
        embedding: np.ndarray | None = None,
    ) -> None:
        task = s.task
        assert task is not None
        now = time.perf_counter()
        t = self._timings(s, now)
        content = ""
        if s.stop is not None and s.decoder is not None:
            if stop_type != "word":
                tail = s.stop.push(s.decoder.flush()) + s.stop.flush()
                if tail:
                    task.results.put(Partial(tail, []))
            content = s.stop.text
        m = self.metrics
        m.prompt_tokens_total += t.prompt_n
        m.prompt_tokens_cached_total += t.cache_n
        m.prompt_seconds_total += t.prompt_ms / 1e3
        m.tokens_predicted_total += t.predicted_n
        m.tokens_predicted_seconds_total += t.predicted_ms / 1e3
        task.results.put(
            Final(
                content=content,
                tokens=list(s.generated),
                prompt_tokens=list(task.prompt_tokens),
                stop_type=stop_type,
                stopping_word=s.stop.stopped_word if s.stop is not None else "",
                truncated=s.truncated,
                tokens_cached=s.n_cached,
                timings=t,
                id_slot=s.id,
                error=error,
                embedding=embedding,
            )
        )
        task.results.close()
        s.release()  # cells written so far stay valid: s.cached matches the cache

    def _finish_embedding(self, s: Slot) -> None:
        assert s.task is not None
        h = (
            np.concatenate(s.hidden)
            if s.hidden
            else np.zeros((0, self.model.args.n_embd), np.float32)
        )
        seq_ids = np.zeros(h.shape[0], dtype=np.int64)
        emb = h if s.task.pooling == "none" else pool(h, seq_ids, s.task.pooling)[0]
        if s.task.pooling == "rank":
            emb = self.model.classify(emb[None])[0]  # (n_cls_out,): the relevance score(s)
        self._finish(s, "eos", embedding=emb)

    def _finish_queued(self, task: Task, stop_type: str) -> None:
        task.results.put(Final("", [], list(task.prompt_tokens), stop_type))
        task.results.close()

    def set_lora_scales(self, scales: tuple[float, ...]) -> None:
        """The scales of tasks that name none (POST /lora-adapters); run it through `call`."""
        if len(scales) != len(self.loras):
            raise InvalidRequest(f"{len(scales)} LoRA scales given for {len(self.loras)} adapters")
        self.lora_scales = tuple(float(s) for s in scales)

    # ---- slot cache operations (run them through `call`) -----------------------------------
    def slot_tokens(self, slot_id: int) -> list[int]:
        return list(self.slots[slot_id].cached)

    def save_slot(self, slot_id: int, directory: str, filename: str) -> SaveResult:
        """Write an idle slot's cached tokens and K/V to directory/filename."""
        s = self._idle_slot(slot_id)
        return save_slot(self.cache, s.id, s.cached, slot_path(directory, filename))

    def restore_slot(self, slot_id: int, directory: str, filename: str) -> SaveResult:
        """Load a saved prompt cache into an idle slot (a later prompt can reuse it)."""
        s = self._idle_slot(slot_id)
        tokens, res = restore_slot(self.cache, s.id, slot_path(directory, filename))
        s.cached = tokens
        s.lora = self.lora_scales  # the file does not say: taken as made with the current adapters
        return res

    def erase_slot(self, slot_id: int) -> int:
        s = self._idle_slot(slot_id)
        n = len(s.cached)
        self.cache.clear(s.id)
        s.cached.clear()
        s.last_task = None
        return n

    def _idle_slot(self, slot_id: int) -> Slot:
        if not 0 <= slot_id < len(self.slots):
            raise InvalidRequest(f"slot {slot_id} does not exist")
        s = self.slots[slot_id]
        if s.busy:
            raise SlotBusy(f"slot {slot_id} is processing a task")
        return s
