"""Control tokens whose text a tool-call format needs to see (llama.cpp's preserved tokens).

A detokenizer normally drops control tokens; `[TOOL_CALLS]` or `<|python_tag|>` must reach
the parser as text. The engine wraps its tokenizer with `preserving` for tasks that name them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class PreservedPieces:
    """A tokenizer view whose `token_to_piece` spells the preserved tokens out."""

    def __init__(self, tokenizer: Any, token_ids: Iterable[int]) -> None:
        self._tokenizer = tokenizer
        self.ids = frozenset(token_ids)

    def token_to_piece(self, token_id: int, special: bool = False) -> bytes:
        return self._tokenizer.token_to_piece(token_id, special or token_id in self.ids)


def preserving(tokenizer: Any, texts: Iterable[str]) -> Any:
    """``tokenizer`` itself, or a view that keeps the given token texts in the output."""
    lookup = tokenizer.vocab.token_to_id
    ids = [lookup[t] for t in texts if t in lookup]
    return PreservedPieces(tokenizer, ids) if ids else tokenizer
