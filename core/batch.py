"""The unified batch: tokens of several sequences decoded by one forward pass."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Batch:
    """T tokens, each with its sequence (KV-cache row) and position.

    tokens, seq_ids, positions: int arrays of shape (T,). `output` marks the tokens whose
    logits (or hidden states) the caller wants; by default only each sequence's last token.
    """

    tokens: np.ndarray
    seq_ids: np.ndarray
    positions: np.ndarray
    output: np.ndarray = field(default=None)  # type: ignore[assignment]  # bool (T,)
    decode: np.ndarray | None = None  # bool (T,): one-token generation steps (engine batches)

    def __post_init__(self) -> None:
        self.tokens = np.asarray(self.tokens, dtype=np.int64).reshape(-1)
        self.seq_ids = np.asarray(self.seq_ids, dtype=np.int64).reshape(-1)
        self.positions = np.asarray(self.positions, dtype=np.int64).reshape(-1)
        n = self.tokens.shape[0]
        if self.seq_ids.shape[0] != n or self.positions.shape[0] != n:
            raise ValueError("tokens, seq_ids and positions must have the same length")
        if self.output is None:
            out = np.zeros(n, dtype=bool)
            # last occurrence of each sequence in batch order
            _, last_rev = np.unique(self.seq_ids[::-1], return_index=True)
            out[n - 1 - last_rev] = True
            self.output = out
        else:
            self.output = np.asarray(self.output, dtype=bool).reshape(-1)

    @property
    def n_tokens(self) -> int:
        return int(self.tokens.shape[0])

    @classmethod
    def single(cls, tokens: list[int] | np.ndarray, start_pos: int = 0, seq_id: int = 0, all_logits: bool = False) -> "Batch":
        """A batch of one sequence's consecutive tokens starting at `start_pos`."""
        toks = np.asarray(tokens, dtype=np.int64)
        n = toks.shape[0]
        out = np.ones(n, dtype=bool) if all_logits else None
        return cls(toks, np.full(n, seq_id), np.arange(start_pos, start_pos + n), out)
