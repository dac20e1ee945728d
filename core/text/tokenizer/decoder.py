"""Streaming detokenization that never emits half a UTF-8 character.

Pieces are concatenated exactly as llama.cpp's server streams them (llama_token_to_piece per
token, no space stripping); a multibyte character split across tokens (an emoji spelled with
byte tokens, say) is held back until its last byte arrives. Bytes that can never form a
character become U+FFFD, as does an incomplete tail at `flush()`.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable
from typing import Protocol


class _Pieces(Protocol):
    def token_to_piece(self, token_id: int, special: bool = False) -> bytes: ...


class IncrementalDecoder:
    """Feed token ids, get the text they complete."""

    def __init__(self, tokenizer: _Pieces, special: bool = False) -> None:
        self._tokenizer = tokenizer
        self._special = special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token_ids: int | Iterable[int]) -> str:
        """Text completed by these tokens (possibly "")."""
        ids = [token_ids] if isinstance(token_ids, int) else token_ids
        data = b"".join(self._tokenizer.token_to_piece(t, self._special) for t in ids)
        return self._utf8.decode(data)

    @property
    def pending(self) -> bytes:
        """Bytes held back because they end in an incomplete character."""
        return self._utf8.getstate()[0]

    def flush(self) -> str:
        """Whatever is held back (as U+FFFD), resetting the decoder."""
        text = self._utf8.decode(b"", final=True)
        self._utf8.reset()
        return text
