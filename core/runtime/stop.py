"""Stop strings: find a complete one in the generated text, and hold back only the tail that
could still grow into one, so that a partial stop string is never streamed."""

from __future__ import annotations

from dataclasses import dataclass, field

from llamacli.core.text.holdback import StopPrefixes


@dataclass
class StopMatcher:
    """Tracks the generated text of one task.

    `push(piece)` returns the text that is safe to stream now. When a stop string appears,
    `stopped_word` is set and the text from it on is dropped.
    """

    stops: list[str]
    text: str = ""  # everything generated so far (up to a stop string)
    sent: int = 0  # characters of `text` already returned
    stopped_word: str = ""
    _max_len: int = field(init=False, default=0)
    _prefixes: StopPrefixes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.stops = [s for s in self.stops if s]
        self._max_len = max((len(s) for s in self.stops), default=0)
        self._prefixes = StopPrefixes(self.stops)

    def push(self, piece: str) -> str:
        if self.stopped_word:
            return ""
        start = max(0, len(self.text) - self._max_len + 1)
        self.text += piece
        if self.stops:
            hit = -1
            for s in self.stops:  # earliest occurrence of any stop string wins
                i = self.text.find(s, start)
                if i >= 0 and (hit < 0 or i < hit):
                    hit, self.stopped_word = i, s
            if hit >= 0:
                self.text = self.text[:hit]
                out = self.text[self.sent :]
                self.sent = len(self.text)
                return out
        hold = self._prefixes.partial_len(self.text)
        end = len(self.text) - hold
        out = self.text[self.sent : end] if end > self.sent else ""
        self.sent = max(self.sent, end)
        return out

    def flush(self) -> str:
        """At the end of generation: whatever was held back (no stop string completed)."""
        out = self.text[self.sent :]
        self.sent = len(self.text)
        return out


@dataclass(frozen=True)
class AfterToken:
    """What decides whether a task ends after emitting a token (all known without a model)."""

    stopped_word: str = ""  # a stop string completed
    grammar_complete: bool = False  # the grammar is complete and EOG is barred (ignore_eos): nothing may follow
    n_generated: int = 0  # tokens generated so far, this one included
    limit: int = -1  # most tokens the task may generate (n_predict, server cap applied; -1: none)
    ms_generating: float = 0.0  # since the prompt was evaluated
    t_max_predict_ms: float = 0.0  # time limit on generation (0: none)


def stop_reason(a: AfterToken) -> str | None:
    """The task's stop type ("word", "eos", "limit") after a token, or None to go on.

    The first condition that holds wins: a stop string, a complete grammar that EOG may not
    end (ignore_eos), n_predict, then the time limit (llama-server's t_max_predict_ms)."""
    if a.stopped_word:
        return "word"
    if a.grammar_complete:
        return "eos"
    if 0 <= a.limit <= a.n_generated:
        return "limit"
    if a.t_max_predict_ms > 0 and a.ms_generating > a.t_max_predict_ms:
        return "limit"
    return None
