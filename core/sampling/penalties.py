"""Repetition, frequency and presence penalties over the last n accepted tokens
(llama_sampler_penalties), vectorised over the penalised tokens only."""

from __future__ import annotations

from collections import Counter, deque

import numpy as np
from llamacli.core.sampling.candidates import F32, Candidates


class Penalties:
    """last_n: history length (0: off, None: unbounded); repeat divides positive logits and
    multiplies negative ones; freq and present subtract count * freq + present."""

    def __init__(
        self, last_n: int | None, repeat: float, freq: float, present: float
    ) -> None:
        self.last_n = last_n
        self.repeat = F32(repeat)
        self.freq = F32(freq)
        self.present = F32(present)
        self.history: deque[int] = deque(maxlen=last_n)
        self.counts: Counter[int] = Counter()

    @property
    def disabled(self) -> bool:
        return self.last_n == 0 or (
            self.repeat == 1 and self.freq == 0 and self.present == 0
        )

    def accept(self, token: int) -> None:
        if self.last_n == 0:
            return
        if self.last_n is not None and len(self.history) >= self.last_n:
            old = self.history[0]
            self.counts[old] -= 1
            if self.counts[old] == 0:
                del self.counts[old]
        self.history.append(int(token))
        self.counts[int(token)] += 1

    def apply(self, c: Candidates) -> None:
        if self.disabled:
            return
        if self.counts:
            tokens = np.fromiter(
                self.counts.keys(), dtype=np.int64, count=len(self.counts)
            )
            counts = np.fromiter(
                self.counts.values(), dtype=np.int64, count=len(self.counts)
            )
            pos, which = c.positions(tokens)
            lg = c.logits[pos]
            lg = np.where(lg <= 0, lg * self.repeat, lg / self.repeat).astype(F32)
            cnt = counts[which].astype(F32)
            lg = lg - (cnt * self.freq + F32(1) * self.present)
            c.logits[pos] = lg
        c.sorted = False

    def reset(self) -> None:
        self.history.clear()
        self.counts.clear()
