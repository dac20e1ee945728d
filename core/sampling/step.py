"""What every step of the sampler chain provides (llama.cpp's `llama_sampler_i`)."""

from __future__ import annotations

from typing import Protocol

from llamacli.core.sampling.candidates import Candidates


class Step(Protocol):
    """apply: rework the candidates in place; accept: see the token chosen (or a prompt
    token); reset: back to the state right after construction."""

    def apply(self, c: Candidates) -> None: ...

    def accept(self, token: int) -> None: ...

    def reset(self) -> None: ...


class Stateless:
    """Mixin for steps with no history."""

    def accept(self, token: int) -> None:
        return None

    def reset(self) -> None:
        return None
