"""A text's tokens cut into chunks and run through the model's batched prefill, as
llama-perplexity and llama-imatrix do it.

Chunk i is tokens [i*n_ctx, (i+1)*n_ctx), evaluated from position 0 with a fresh KV cache; its
first token is replaced by BOS when the vocabulary adds one (the text keeps its own token).
n_seq = max(1, n_batch / n_ctx) chunks go through together, each its own sequence (KV row),
in batches of n_batch tokens (a chunk longer than n_batch takes several), each batch in
forward passes of at most n_ubatch tokens (llama.cpp's physical batch).
The model's logits are computed only for the positions the caller asks for, a block of rows
at a time (a 262144-token vocabulary makes 1 MiB per row).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from llamacli.core.errors import InvalidRequest
from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.state.batch import Batch

LOGIT_BLOCK_ELEMENTS = 1 << 23  # float32 logits computed at once (32 MiB)
MIN_LOGIT_BLOCK = 32  # rows: a part of an ubatch's outputs keeps >= 16 rows if the ubatch has them


@dataclass(frozen=True)
class ChunkPlan:
    """How the tokens are cut and batched (llama-perplexity's arithmetic)."""

    n_ctx: int  # tokens per chunk
    n_batch: int  # tokens per batch (all sequences together)
    n_ubatch: int  # tokens per forward pass
    n_seq: int  # chunks evaluated side by side
    n_chunk: int  # chunks to evaluate

    @property
    def first(self) -> int:
        """The first scored position: the first half of a chunk is context only."""
        return self.n_ctx // 2

    @classmethod
    def of(cls, n_ctx: int, n_batch: int, n_ubatch: int, n_chunk: int) -> ChunkPlan:
        """n_seq = max(1, n_batch / n_ctx) chunks side by side; the batch no larger than they
        are, the forward pass no larger than the batch (llama.cpp's context parameters)."""
        n_seq = max(1, n_batch // n_ctx)
        n_batch = min(n_batch, n_seq * n_ctx)
        return cls(n_ctx, n_batch, min(n_ubatch, n_batch), n_seq, n_chunk)

    def n_batches(self) -> int:
        """Batches per chunk (several when n_batch < n_ctx)."""
        return (self.n_ctx + self.n_batch - 1) // self.n_batch


def plan_chunks(n_tokens: int, n_ctx: int, n_batch: int, n_ubatch: int, n_chunks: int,
                purpose: str = "to evaluate perplexity with a context of") -> ChunkPlan:
    """The plan for a text of n_tokens, or InvalidRequest with llama.cpp's message."""
    if n_ctx <= 0:
        raise InvalidRequest("this tool requires '--ctx-size' > 0")
    if n_batch <= 0 or n_ubatch <= 0:
        raise InvalidRequest("--batch-size and --ubatch-size must be at least 1")
    if n_tokens < 2 * n_ctx:
        raise InvalidRequest(f"you need at least {2 * n_ctx} tokens {purpose} {n_ctx}; "
                             f"the data file you provided tokenizes to only {n_tokens} tokens")
    n_chunk_max = n_tokens // n_ctx
    n_chunk = n_chunk_max if n_chunks < 0 else min(n_chunks, n_chunk_max)
    if n_chunk == 0:
        raise InvalidRequest("--chunks 0: no chunk to evaluate")
    return ChunkPlan.of(n_ctx, n_batch, n_ubatch, n_chunk)


@dataclass
class Piece:
    """Consecutive output positions of one chunk, from one forward pass."""

    chunk: int  # index of the chunk
    positions: np.ndarray  # int64 (n,): positions in the chunk
    hidden: np.ndarray  # float32 (n, n_embd): final-normed hidden states


def chunk_tokens(tokens: np.ndarray, plan: ChunkPlan, chunk: int, bos: int | None) -> np.ndarray:
    """The tokens the model sees for a chunk: BOS in place of the first one when given."""
    seq = np.array(tokens[chunk * plan.n_ctx : (chunk + 1) * plan.n_ctx], dtype=np.int64)
    if bos is not None:
        seq[0] = bos
    return seq


def logit_blocks(n: int, n_vocab: int) -> list[slice]:
    """Row blocks for computing n rows of logits: near-equal parts of at most
    LOGIT_BLOCK_ELEMENTS values (but at least MIN_LOGIT_BLOCK rows each when there are that many)."""
    rows = max(MIN_LOGIT_BLOCK, LOGIT_BLOCK_ELEMENTS // max(1, n_vocab))
    parts = max(1, -(-n // rows))
    bounds = np.linspace(0, n, parts + 1).round().astype(int)
    return [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


class ChunkRunner:
    """Runs groups of chunks through a model, keeping one KV cache for them."""

    def __init__(self, model: DecoderModel, plan: ChunkPlan, out_lo: int, out_hi: int) -> None:
        """Outputs: positions [out_lo, out_hi) of every chunk."""
        if not model.has_lm_head:
            raise InvalidRequest(f"{model.args.arch} is an encoder: it has no logits to evaluate")
        self.model = model
        self.plan = plan
        self.out_lo, self.out_hi = out_lo, out_hi
        self.cache = model.new_cache(plan.n_seq, plan.n_ctx)

    def run(self, tokens: np.ndarray, chunk0: int, bos: int | None) -> Iterator[Piece]:
        """Evaluate chunks chunk0 .. chunk0 + n_seq - 1 (those that exist) side by side; the
        output rows come chunk by chunk, in position order."""
        p = self.plan
        n_seq = min(p.n_seq, p.n_chunk - chunk0)
        seqs = [chunk_tokens(tokens, p, chunk0 + s, bos) for s in range(n_seq)]
        self.cache.clear()
        for j in range(p.n_batches()):
            a = j * p.n_batch
            b = min(p.n_ctx, a + p.n_batch)
            pos = np.arange(a, b)
            toks = np.concatenate([s[a:b] for s in seqs])  # sequence by sequence, as llama.cpp
            seq_ids = np.repeat(np.arange(n_seq), b - a)
            positions = np.tile(pos, n_seq)
            want = (positions >= self.out_lo) & (positions < self.out_hi)
            for u in range(0, toks.shape[0], p.n_ubatch):
                sl = slice(u, u + p.n_ubatch)
                batch = Batch(toks[sl], seq_ids[sl], positions[sl], want[sl])
                hidden = self.model.forward_hidden(batch, self.cache)
                yield from self._split(chunk0, batch, hidden)

    @staticmethod
    def _split(chunk0: int, batch: Batch, hidden: np.ndarray) -> Iterator[Piece]:
        seqs = batch.seq_ids[batch.output]
        pos = batch.positions[batch.output]
        for s in np.unique(seqs):
            rows = seqs == s
            yield Piece(chunk0 + int(s), pos[rows], hidden[rows])

    def logits(self, hidden: np.ndarray) -> Iterator[tuple[slice, np.ndarray]]:
        """(rows, logits (n, n_vocab)) for blocks of the given hidden rows."""
        for sl in logit_blocks(hidden.shape[0], self.model.args.n_vocab):
            yield sl, self.model.logits(hidden[sl])
