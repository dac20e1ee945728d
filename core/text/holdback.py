"""The tail of streamed text to hold back: the part that could still grow into a stop string
or a marker (of a tool call, of the end of a thought), so that half of one is never emitted."""

from __future__ import annotations

from collections.abc import Sequence


def partial_stop_len(text: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of some stop string
    (or tool-call marker): the part to hold back while streaming."""
    best = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:n]):
                best = n
                break
    return best
