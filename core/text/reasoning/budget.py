"""The reasoning budget: after N tokens of thinking the engine forces the end of the block.

llama.cpp's reasoning-budget sampler (common/reasoning-budget.cpp), one per generating task:

    IDLE --start tag--> COUNTING --N tokens--> [WAITING_UTF8] --> FORCING --forced tokens--> DONE
                           \\--end tag written by the model-------------------------------/

While FORCING, every logit but the next forced token is -inf, so the model "writes" the budget
message and the end tag itself (they enter its KV cache like any sampled token). A new start
tag after DONE re-arms the budget. `force()` (POST /v1/chat/completions/control, action
reasoning_end) moves a COUNTING budget to FORCING at once.

The tags are matched on the bytes of the generated pieces (special tokens spelled out), so a
tag is seen however the model tokenized it; the forced sequence is the tokenization of
`message + end tag`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


class BudgetState(enum.Enum):
    IDLE = "idle"
    COUNTING = "counting"
    WAITING_UTF8 = "waiting_utf8"  # budget spent in the middle of a UTF-8 character
    FORCING = "forcing"
    DONE = "done"


@dataclass(frozen=True)
class ReasoningBudgetSpec:
    """A task's reasoning budget (TaskParams.reasoning); the engine tokenizes it."""

    start: str = "<think>"
    end: str = "</think>"
    budget: int = -1  # tokens of thinking (-1: unlimited; 0: end at once)
    message: str = ""  # written before the forced end tag
    forced_open: bool = False  # the prompt opened the block: counting starts at once
    control: bool = False  # reasoning may be ended on demand (reasoning_control)

    @property
    def active(self) -> bool:
        """Whether the engine needs to watch this task at all."""
        return self.budget >= 0 or self.control


def _utf8_complete(data: bytes) -> bool:
    """Whether `data` does not end in the middle of a UTF-8 character."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b & 0xC0 == 0x80:  # continuation byte: look further back for the lead byte
            continue
        need = 1 if b < 0x80 else 2 if b >> 5 == 0b110 else 3 if b >> 4 == 0b1110 else 4 if b >> 3 == 0b11110 else 1
        return back >= need
    return True


class ReasoningBudget:
    """The state machine of one generation."""

    def __init__(self, spec: ReasoningBudgetSpec, forced_tokens: Sequence[int], piece: Any) -> None:
        self.spec = spec
        self.start = spec.start.encode("utf-8")
        self.end = spec.end.encode("utf-8")
        self.forced = list(forced_tokens)
        self._piece = piece  # token id -> bytes, special tokens spelled out
        self.budget = spec.budget if spec.budget >= 0 else 1 << 62
        self.remaining = self.budget
        self.force_pos = 0
        self._tail = b""  # recent output bytes, to find tags split across tokens
        self.state = BudgetState.IDLE
        if spec.forced_open:
            self._activate()

    @classmethod
    def for_tokenizer(cls, spec: ReasoningBudgetSpec, tokenizer: Any) -> "ReasoningBudget":
        forced = tokenizer.tokenize(spec.message + spec.end, add_special=False, parse_special=True)
        return cls(spec, forced, lambda t: tokenizer.token_to_piece(t, True))

    def _activate(self) -> None:
        self.state = BudgetState.COUNTING
        self.remaining = self.budget
        self._tail = b""
        if self.remaining <= 0:
            self._start_forcing()

    def _start_forcing(self) -> None:
        self.state = BudgetState.FORCING
        self.force_pos = 0
        if not self.forced:
            self.state = BudgetState.DONE

    def _saw(self, tag: bytes, piece: bytes) -> bool:
        self._tail = (self._tail + piece)[-(max(len(self.start), len(self.end)) + len(piece)) :]
        return tag in self._tail

    # ---- the sampler's two hooks --------------------------------------------------------
    def apply(self, logits: np.ndarray) -> None:
        """While forcing: only the next forced token stays possible."""
        if self.state is not BudgetState.FORCING:
            return
        tok = self.forced[self.force_pos]
        keep = logits[tok]
        logits[:] = -np.inf
        logits[tok] = keep if np.isfinite(keep) else 0.0

    def accept(self, tok: int) -> None:
        piece = self._piece(tok)
        st = self.state
        if st is BudgetState.IDLE or st is BudgetState.DONE:
            if self._saw(self.start, piece):
                self._activate()
        elif st is BudgetState.FORCING:
            self.force_pos += 1
            if self.force_pos >= len(self.forced):
                self.state = BudgetState.DONE
                self._tail = b""
        else:  # COUNTING or WAITING_UTF8
            if self._saw(self.end, piece):
                self.state = BudgetState.DONE
                self._tail = b""
                return
            if st is BudgetState.COUNTING:
                self.remaining -= 1
                if self.remaining > 0:
                    return
            if _utf8_complete(self._tail):
                self._start_forcing()
            else:
                self.state = BudgetState.WAITING_UTF8

    def force(self) -> bool:
        """End the thinking now (reasoning_end); only a counting budget can be forced."""
        if self.state is not BudgetState.COUNTING:
            return False
        self._start_forcing()
        return True

    @property
    def forcing(self) -> bool:
        return self.state is BudgetState.FORCING
