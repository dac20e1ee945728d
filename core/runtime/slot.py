"""A slot: one sequence of the KV cache and the task that currently owns it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from llamacli.core.text.grammar import GrammarConstraint
from llamacli.core.text.reasoning import ReasoningBudget
from llamacli.core.sampling import Sampler
from llamacli.core.runtime.batch_plan import SlotFeed
from llamacli.core.runtime.stop import StopMatcher
from llamacli.core.runtime.tasks import Task, TokenProb
from llamacli.core.text.tokenizer import IncrementalDecoder


@dataclass
class Slot:
    id: int
    n_ctx: int  # cells of this slot's sequence
    cached: list[int] = field(default_factory=list)  # tokens whose K/V are in the cache, in order
    last_used: float = 0.0
    task: Task | None = None
    last_task: Task | None = None  # the task served before, for GET /slots
    lora: tuple[float, ...] = ()  # LoRA scales of the task (and of the K/V in the cache)
    last_step: int = 0  # the engine step that last evaluated tokens of this slot
    # --- per task state (set by `assign`, cleared by `release`) ----------------------------
    generating: bool = False  # False while the prompt is being processed
    n_past: int = 0  # prompt tokens already in the cache
    n_cached: int = 0  # prompt tokens reused from a previous task
    next_token: int = -1  # sampled, to be fed at the next step
    draft: list[int] = field(default_factory=list)  # speculative tokens to verify after next_token
    n_draft: int = 0  # draft tokens verified for this task (timings' draft_n)
    n_draft_accepted: int = 0
    sampler: Sampler | None = None
    decoder: IncrementalDecoder | None = None
    stop: StopMatcher | None = None
    grammar: GrammarConstraint | None = None  # the task's grammar state (constrained output)
    budget: ReasoningBudget | None = None  # the task's reasoning budget
    generated: list[int] = field(default_factory=list)
    probs: list[list[TokenProb]] = field(default_factory=list)
    truncated: bool = False
    order: int = 0
    t_start: float = 0.0
    t_prompt_done: float = 0.0
    hidden: list[np.ndarray] = field(default_factory=list)  # embedding tasks: per-chunk hidden states

    @property
    def busy(self) -> bool:
        return self.task is not None

    @property
    def prompt(self) -> list[int]:
        assert self.task is not None
        return self.task.prompt_tokens

    @property
    def n_prompt_left(self) -> int:
        return len(self.prompt) - self.n_past if self.task is not None and not self.generating else 0

    def assign(self, task: Task, n_reuse: int, order: int) -> None:
        """Take `task`, whose first n_reuse prompt tokens are already cached (the caller has cut
        the KV sequence to them). The engine then gives a completion its sampler, decoder, stop
        matcher, grammar and reasoning budget (they need the tokenizer)."""
        self._clear_task_state()
        del self.cached[n_reuse:]
        self.task = task
        self.n_past = self.n_cached = n_reuse
        self.order = order
        self.t_start = time.perf_counter()

    def release(self) -> None:
        """Back to idle; the cached tokens stay for prompt reuse."""
        self.last_task = self.task
        self.task = None
        self._clear_task_state()
        self.last_used = time.monotonic()

    def _clear_task_state(self) -> None:
        self.generating = False
        self.n_past = self.n_cached = 0
        self.next_token = -1
        self.draft = []
        self.n_draft = self.n_draft_accepted = 0
        self.sampler = self.decoder = self.stop = None
        self.grammar = self.budget = None
        self.generated = []
        self.probs = []
        self.hidden = []
        self.truncated = False

    def feed(self) -> SlotFeed:
        """What the batch builder reads of this slot."""
        embedding = self.task is not None and self.task.kind == "embedding"
        media = self.task.media if self.task is not None else ()
        return SlotFeed(len(self.cached), self.prompt, self.n_past, self.next_token, self.draft, embedding, media)
