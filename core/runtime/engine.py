"""The engine: N slots over one model, a task queue, and one loop thread doing continuous
batching. Drivers (the chat REPL, the HTTP adapter, `llama complete`) only submit tasks and
read their result streams.

One step of the loop (`Engine.step`), each phase in its own module:
  1. admit queued tasks into idle slots (best cached-prefix match, else least recently used;
     `admission`); end cancelled tasks, shift (or end) full contexts (`slot_cache`);
  2. plan: speculative drafts, `scheduler.schedule` (one decode token per generating slot, with
     its draft, then prompt chunks), `batch_plan.build_batch` (the unified batch and which of
     its rows belong to which slot) (`batching`);
  3. one `model.forward_hidden` over that batch, then the logits of the rows to sample
     (`batching.forward`);
  4. per slot: its tokens join the cache; sample (or verify the draft), emit, stop reason
     (`slot_update`; Partials and Finals: `results`);
  5. finished slots are released (their cached tokens stay for prompt reuse).
This module is the loop thread, the public API and the step as that sequence of calls.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from llamacli.core.errors import InvalidRequest
from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.state.lora import LoraAdapter
from llamacli.core.runtime.admission import check_task, place, start_task, task_lora
from llamacli.core.runtime.batching import draft, forward, plan_batch
from llamacli.core.runtime.engine_config import EngineConfig
from llamacli.core.runtime.metrics import Metrics
from llamacli.core.runtime.result_stream import batched_wakeups
from llamacli.core.runtime.results import finish, finish_queued
from llamacli.core.runtime.slot import Slot
from llamacli.core.runtime.slot_cache import erase, idle_slot, restore, shift_or_end
from llamacli.core.runtime.slot_store import SaveResult, save_slot, slot_path
from llamacli.core.runtime.slot_update import SlotUpdate
from llamacli.core.runtime.tasks import Final, Task
from llamacli.core.speculative.speculator import make_speculator
from llamacli.core.text.grammar import CompiledGrammar, compile_grammar_future
from llamacli.core.text.tokenizer import Tokenizer

__all__ = ["Engine", "EngineConfig", "Metrics"]

R = TypeVar("R")


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
        if draft_model is not None and not draft_model.new_cache(1, 1).can_roll_back:
            raise InvalidRequest(f"a draft model must drop rejected draft tokens from its cache: "
                                 f"{draft_model.args.arch}'s recurrent state cannot")
        self.cache.max_checkpoints = c.ctx_checkpoints
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
        self.spec = make_speculator(
            c.speculative, c.n_parallel, self.n_ctx_slot, c.n_batch, draft_model, tokenizer.n_vocab
        )
        # called on the loop thread when a step leaves nothing to run (the server gives freed
        # heap pages back there: http/heap.py)
        self.on_idle: Callable[[], None] | None = None

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self) -> "Engine":
        with self._cond:
            if self._running:
                return self
            self._running = True
        self._thread = threading.Thread(target=self._loop, name="llama-engine", daemon=True)
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
            finish_queued(t, "cancelled")
        self._queue.clear()
        for s in self.slots:
            if s.task is not None:
                finish(s, "cancelled", self.metrics)
        self._count_load()  # the loop thread has ended: nothing runs, nothing waits

    def __enter__(self) -> "Engine":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- in-process API -------------------------------------------------------------------
    def submit(self, task: Task) -> Task:
        """Queue a task; read `task.results` (blocking or async) for its Partials and Final."""
        check_task(task, self.model, self.tokenizer, self.config, self.n_ctx_slot, len(self.loras))
        with self._cond:
            self._queue.append(task)
            self._cond.notify_all()
        return task

    def prepare(self, task: Task) -> Future[CompiledGrammar] | None:
        """The slow part of `submit`, started elsewhere: compiling the task's grammar (on the
        grammar threads). A caller that must not block (an event loop) awaits the future,
        puts its value in `task.compiled_grammar`, then submits. None: nothing to wait for."""
        if task.params.grammar is None or task.kind != "completion":
            return None
        return compile_grammar_future(self.tokenizer, task.params.grammar, self.config.grammar_limits)

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
        s = idle_slot(self.slots, slot_id)
        return save_slot(self.cache, s.id, s.cached, slot_path(directory, filename))

    def restore_slot(self, slot_id: int, directory: str, filename: str) -> SaveResult:
        """Load a saved prompt cache into an idle slot (a later prompt can reuse it)."""
        s = idle_slot(self.slots, slot_id)
        # the file does not say: taken as made with the current adapters
        return restore(s, self.cache, slot_path(directory, filename), self.lora_scales)

    def erase_slot(self, slot_id: int) -> int:
        return erase(idle_slot(self.slots, slot_id), self.cache)

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
                        finish(s, "error", self.metrics, error=e)
            self._count_load()
            if did and self.on_idle is not None and not self._has_work():
                self.on_idle()
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
        return bool(self._queue) and any(not s.busy for s in self.slots) or any(s.busy for s in self.slots)

    def step(self) -> bool:
        """One scheduling step; False when there was nothing to do."""
        self._admit()  # queued tasks into idle slots
        self._retire()  # cancelled tasks end; full contexts shift or end
        if self.spec is not None:  # each generating slot's draft
            draft(self.slots, self.spec, self.n_ctx_slot, self.config.n_predict_max)
        # the slots of this forward (one LoRA group), their chunks, the batch and each slot's rows
        plan = plan_batch(self.slots, self.model, self.loras, self.config.n_batch)
        if plan is None:
            return False
        # (n_out, n_embd): the batch's output rows; (n_logits, n_vocab): the rows to sample
        hidden, logits = forward(self.model, self.cache, plan, self.slots, self.metrics)
        update = SlotUpdate(self.model, self.cache, self.metrics, self.spec, self.eog_ids, self.config.n_predict_max)
        with batched_wakeups():  # the slots' new tokens wake each event loop once, when all are out
            for rows in plan.rows:  # sample or verify, emit, stop; a finished slot is released
                update(self.slots[rows.slot_id], rows, hidden, logits)
        return True

    def _admit(self) -> None:
        """Queued tasks into idle slots, in arrival order; cancelled ones end here."""
        with self._cond:
            queued = list(self._queue)
        for task in queued:
            if task.cancelled.is_set():
                self._remove_queued(task)
                finish_queued(task, "cancelled")
                continue
            lora = task_lora(task, self.lora_scales)
            placed = place(task, self.slots, self.config.slot_prompt_similarity, lora)
            if placed is None:
                continue
            self._remove_queued(task)
            s, lcp = placed
            s.lora = lora
            self._order += 1
            start_task(s, task, lcp, self._order, self.cache, self.tokenizer, self.spec, self.config.n_batch)

    def _remove_queued(self, task: Task) -> None:
        with self._cond:
            try:
                self._queue.remove(task)
            except ValueError:
                pass

    def _retire(self) -> None:
        """End cancelled tasks; shift (or end) generating slots whose context is full."""
        for s in self.slots:
            if s.task is not None and s.task.cancelled.is_set():
                finish(s, "cancelled", self.metrics)
        for s in self.slots:
            if s.task is not None and s.generating and len(s.cached) >= self.n_ctx_slot:
                bos = self.tokenizer.vocab.bos
                shift_or_end(s, self.model, self.cache, self.config.context_shift, bos, self.metrics)
