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
    `embd` (T, n_embd): input embeddings for the rows whose token is negative (media
    placeholders; the other rows are ignored), as llama_batch.embd; `see_upto` (T,): the last
    key position each token attends to (its own position: causal; the end of its image: the
    non-causal attention mtmd asks for gemma3's image tokens). None: causal everywhere.
    `rope_pos` (T, 4): M-RoPE positions (t, h, w, e) of each token (qwen2vl: image tokens turn
    by their row and column; after an image the rope position runs behind the cache cell); None:
    each token's position in every component.
    """

    tokens: np.ndarray  # int64 (T,)
    seq_ids: np.ndarray  # int64 (T,)
    positions: np.ndarray  # int64 (T,)
    output: np.ndarray  # bool (T,)
    decode: np.ndarray | None  # bool (T,): one-token generation steps (engine batches)
    embd: np.ndarray | None  # float32 (T, n_embd): embeddings fed instead of negative token ids
    see_upto: np.ndarray | None  # int64 (T,): the last key position each token sees
    rope_pos: np.ndarray | None  # int64 (T, 4): M-RoPE positions (t, h, w, e)

    def __init__(
        self,
        tokens: npt.ArrayLike,
        seq_ids: npt.ArrayLike,
        positions: npt.ArrayLike,
        output: npt.ArrayLike | None = None,
        decode: np.ndarray | None = None,
        embd: np.ndarray | None = None,
        see_upto: npt.ArrayLike | None = None,
        rope_pos: npt.ArrayLike | None = None,
    ) -> None:
        self.tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        self.seq_ids = np.asarray(seq_ids, dtype=np.int64).reshape(-1)
        self.positions = np.asarray(positions, dtype=np.int64).reshape(-1)
        self.decode = decode
        self.embd = None if embd is None else np.ascontiguousarray(embd, dtype=np.float32)
        self.see_upto = None if see_upto is None else np.asarray(see_upto, dtype=np.int64).reshape(-1)
        self.rope_pos = None if rope_pos is None else np.asarray(rope_pos, dtype=np.int64)
        n = self.tokens.shape[0]
        if self.rope_pos is not None and self.rope_pos.shape != (n, 4):
            raise ValueError("rope_pos must have four positions per token")
        if self.embd is not None and (self.embd.ndim != 2 or self.embd.shape[0] != n):
            raise ValueError("embd must have one row per token")
        if self.see_upto is not None and self.see_upto.shape[0] != n:
            raise ValueError("see_upto must have one position per token")
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
        """A batch of one sequence's consecutive embeddings (n, n_embd) starting at `start_pos`;
        non_causal: every row sees all of them."""
        n = embd.shape[0]
        out = np.ones(n, dtype=bool) if all_logits else None
        pos = np.arange(start_pos, start_pos + n)
        upto = np.full(n, start_pos + n - 1) if non_causal else None
        return cls(np.full(n, -1, dtype=np.int64), np.full(n, seq_id), pos, out, embd=embd, see_upto=upto)
