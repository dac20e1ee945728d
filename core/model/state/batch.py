"""The unified batch: tokens of several sequences decoded by one forward pass."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(init=False)
class Batch:
    """T tokens, each with its sequence (KV-cache row) and position.

    tokens, seq_ids, positions: int arrays of shape (T,). `output` marks the tokens whose
    logits (or hidden states) the caller wants; by default only each sequence's last token.
    """

    tokens: np.ndarray  # int64 (T,)
    seq_ids: np.ndarray  # int64 (T,)
    positions: np.ndarray  # int64 (T,)
    output: np.ndarray  # bool (T,)
    decode: np.ndarray | None  # bool (T,): one-token generation steps (engine batches)

    def __init__(
        self,
        tokens: npt.ArrayLike,
        seq_ids: npt.ArrayLike,
        positions: npt.ArrayLike,
        output: npt.ArrayLike | None = None,
        decode: np.ndarray | None = None,
    ) -> None:
        self.tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        self.seq_ids = np.asarray(seq_ids, dtype=np.int64).reshape(-1)
        self.positions = np.asarray(positions, dtype=np.int64).reshape(-1)
        self.decode = decode
        n = self.tokens.shape[0]
        if self.seq_ids.shape[0] != n or self.positions.shape[0] != n:
            raise ValueError("tokens, seq_ids and positions must have the same length")
        if output is None:
            out = np.zeros(n, dtype=bool)
            # last occurrence of each sequence in batch order
            _, last_rev = np.unique(self.seq_ids[::-1], return_index=True)
            out[n - 1 - last_rev] = True
            self.output = out
        else:
            self.output = np.asarray(output, dtype=bool).reshape(-1)

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
