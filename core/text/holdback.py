"""The tail of streamed text to hold back: the part that could still grow into a stop string
or a marker (of a tool call, of the end of a thought), so that half of one is never emitted."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence


class StopPrefixes:
    """Stop strings kept sorted, so that the held-back tail is found in one pass over the
    last (longest stop - 1) characters of a text, with a binary search per candidate start:
    the work per token does not grow with the number of stop strings."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = sorted({s for s in stops if s})
        self.max_len = max((len(s) for s in self.stops), default=0)
        self._firsts = frozenset(s[0] for s in self.stops)

    def partial_len(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of some stop."""
        n = len(text)
        for p in range(max(0, n - self.max_len + 1), n):
            if text[p] not in self._firsts:
                continue
            tail = text[p:]
            i = bisect_left(self.stops, tail)  # the stops that start with `tail` begin here
            if i < len(self.stops) and self.stops[i] == tail:
                i += 1  # the whole stop is no partial one; a longer one may follow
            if i < len(self.stops) and self.stops[i].startswith(tail):
                return n - p
        return 0


def partial_stop_len(text: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of some stop string
    (or tool-call marker): the part to hold back while streaming."""
    return StopPrefixes(stops).partial_len(text)
