"""llama-perplexity's KL-divergence base file (`--kl-divergence-base`), byte for byte.

Layout (little-endian), as tools/perplexity/perplexity.cpp writes it:

    "_logits_"                     8 bytes
    n_ctx      int32               tokens per chunk
    n_vocab    int32
    n_chunk    int32
    tokens     int32 [n_chunk * n_ctx]   the text's tokens (no BOS substitution)
    per chunk, per scored position (n_ctx - 1 - n_ctx/2 of them):
               uint16 [nv]         nv = 2*ceil(n_vocab/2) + 4: scale and min_log_prob as two
                                   float32s, then one code per token (logprobs.encode_rows)

A file is written under a temporary name and appears complete or not at all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import TracebackType

import numpy as np

from llamacli.core.errors import InvalidRequest
from llamacli.core.quality.logprobs import row_width
from llamacli.core.quantize.gguf_out import AtomicOutput

MAGIC = b"_logits_"
_HEAD = 8 + 3 * 4


def scored_per_chunk(n_ctx: int) -> int:
    """Positions scored (and stored) per chunk: the second half, less the last token."""
    return n_ctx - 1 - n_ctx // 2


class BaseFileError(InvalidRequest):
    """A KL-divergence base file that cannot be read (names the file and the problem)."""


@dataclass
class LogitsFile:
    """A base file opened for reading: its header, tokens and the stored rows (memory-mapped)."""

    path: str
    n_ctx: int
    n_vocab: int
    n_chunk: int
    tokens: np.ndarray  # int32 (n_chunk * n_ctx,)
    rows: np.ndarray  # uint16 (n_chunk, scored_per_chunk(n_ctx), nv), a view of the file

    @classmethod
    def open(cls, path: str) -> LogitsFile:
        try:
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                head = f.read(_HEAD)
        except OSError as e:
            raise BaseFileError(f"failed to open {path}: {e.strerror or e}") from None
        if len(head) < 8 or head[:8] != MAGIC:
            raise BaseFileError(f"{path} does not look like a file containing log-probabilities")
        if len(head) < _HEAD:
            raise BaseFileError(f"{path}: failed reading n_vocab, n_chunk")
        n_ctx, n_vocab, n_chunk = (int(v) for v in np.frombuffer(head, dtype="<i4", count=3, offset=8))
        if n_ctx < 2 or n_vocab < 1 or n_chunk < 1:
            raise BaseFileError(f"{path}: invalid header (n_ctx {n_ctx}, n_vocab {n_vocab}, n_chunk {n_chunk})")
        n_tok = n_ctx * n_chunk
        nv = row_width(n_vocab)
        per = scored_per_chunk(n_ctx)
        need = _HEAD + 4 * n_tok + 2 * n_chunk * per * nv
        if size < _HEAD + 4 * n_tok:
            raise BaseFileError(f"{path}: failed reading evaluation tokens")
        if size < need:
            have = (size - _HEAD - 4 * n_tok) // max(1, 2 * per * nv)
            raise BaseFileError(f"{path} is truncated: it holds the log-probabilities of {have} of its {n_chunk} chunks")
        mm = np.memmap(path, dtype=np.uint8, mode="r", shape=(need,))
        tokens = mm[_HEAD : _HEAD + 4 * n_tok].view("<i4")
        rows = mm[_HEAD + 4 * n_tok : need].view("<u2").reshape(n_chunk, per, nv)
        return cls(path, n_ctx, n_vocab, n_chunk, tokens, rows)


class LogitsFileWriter:
    """Writes a base file chunk by chunk: header and tokens first, then each chunk's rows."""

    def __init__(self, path: str, n_ctx: int, n_vocab: int, tokens: np.ndarray, n_chunk: int) -> None:
        self.out = AtomicOutput(path)
        self.n_ctx = n_ctx
        self.n_vocab = n_vocab
        self.n_chunk = n_chunk
        self._tokens = np.asarray(tokens[: n_chunk * n_ctx], dtype="<i4")
        self.nv = row_width(n_vocab)

    def __enter__(self) -> LogitsFileWriter:  # noqa: PYI034
        self.out.__enter__()
        self.out.write(MAGIC + np.array([self.n_ctx, self.n_vocab, self.n_chunk], dtype="<i4").tobytes())
        self.out.write(self._tokens.tobytes())
        return self

    def write_rows(self, rows: np.ndarray) -> None:
        """Rows (n, nv) uint16 of the scored positions, in order."""
        self.out.write(np.ascontiguousarray(rows, dtype="<u2").tobytes())

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.out.__exit__(exc_type, exc, tb)
