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
    `embd` (T, n_embd): input embeddings instead of the tokens' (a media chunk; `tokens` are
    then placeholders), as llama_batch.embd; `non_causal`: each token sees every key of its
    sequence up to the batch's last position (mtmd's image chunks for gemma3).
    """

    tokens: np.ndarray  # int64 (T,)
    seq_ids: np.ndarray  # int64 (T,)
    positions: np.ndarray  # int64 (T,)
    output: np.ndarray  # bool (T,)
    decode: np.ndarray | None  # bool (T,): one-token generation steps (engine batches)
    embd: np.ndarray | None  # float32 (T, n_embd): embeddings fed instead of token ids
    non_causal: bool

    def __init__(
        self,
        tokens: npt.ArrayLike,
        seq_ids: npt.ArrayLike,
        positions: npt.ArrayLike,
        output: npt.ArrayLike | None = None,
        decode: np.ndarray | None = None,
        embd: np.ndarray | None = None,
        non_causal: bool = False,
    ) -> None:
        self.tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        self.seq_ids = np.asarray(seq_ids, dtype=np.int64).reshape(-1)
        self.positions = np.asarray(positions, dtype=np.int64).reshape(-1)
        self.decode = decode
        self.embd = None if embd is None else np.ascontiguousarray(embd, dtype=np.float32)
        self.non_causal = non_causal
        n = self.tokens.shape[0]
        if self.embd is not None and (self.embd.ndim != 2 or self.embd.shape[0] != n):
            raise ValueError("embd must have one row per token")
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

    @classmethod
    def of_embeddings(
        cls, embd: np.ndarray, start_pos: int = 0, seq_id: int = 0, non_causal: bool = False, all_logits: bool = False
    ) -> "Batch":
        """A batch of one sequence's consecutive embeddings (n, n_embd) starting at `start_pos`."""
        n = embd.shape[0]
        out = np.ones(n, dtype=bool) if all_logits else None
        pos = np.arange(start_pos, start_pos + n)
        return cls(np.zeros(n, dtype=np.int64), np.full(n, seq_id), pos, out, embd=embd, non_causal=non_causal)
