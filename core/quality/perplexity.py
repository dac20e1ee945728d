"""`llama perplexity`: llama-perplexity's three passes over a text.

- `perplexity`: chunks of n_ctx tokens, the second half of each scored (every position's
  prediction of the next token), PPL = exp(mean nll) with its uncertainty
  (tools/perplexity/perplexity.cpp `perplexity`); optionally writing the KL-divergence base file.
- `perplexity_strided` (`--ppl-stride`): windows of the context size moved by the stride, the
  last `stride` predictions of each scored (`perplexity_v2`).
- `kl_divergence`: the chunks of a base file's tokens, the model's distributions compared with
  the stored ones (`kl_divergence`).

Each reports after every chunk through `on_chunk` (what llama.cpp prints as it goes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from llamacli.core.errors import InvalidRequest
from llamacli.core.model.families.base import DecoderModel
from llamacli.core.quality import kld as K
from llamacli.core.quality.chunks import ChunkPlan, ChunkRunner, Piece
from llamacli.core.quality.kld_file import LogitsFile, LogitsFileWriter, scored_per_chunk
from llamacli.core.quality.logprobs import KldSums, encode_rows, row_width, softmax_nll, target_stats


@dataclass
class PerplexityResult:
    """What a perplexity pass measured."""

    n_tokens: int  # tokens of the text
    plan: ChunkPlan
    chunk_ppl: list[float] = field(default_factory=list)  # running PPL after each chunk
    nll: float = 0.0  # sums over the scored positions
    nll2: float = 0.0
    count: int = 0
    seconds: float = 0.0

    @property
    def ppl(self) -> float:
        return math.exp(self.nll / self.count) if self.count else math.nan

    @property
    def uncertainty(self) -> float | None:
        """llama.cpp's final estimate's +/-: PPL * sqrt(var(nll) / (count - 1)); None when
        the variance is not positive (it prints an error instead)."""
        if self.count < 2:
            return None
        mean = self.nll / self.count
        var = self.nll2 / self.count - mean * mean
        return math.sqrt(var / (self.count - 1)) * self.ppl if var > 0 else None

    def add(self, nll: np.ndarray) -> None:
        self.nll += float(nll.sum())
        self.nll2 += float((nll * nll).sum())
        self.count += int(nll.shape[0])


def _ignore(*args: object) -> None:
    return None


@dataclass
class Progress:
    """What a pass reports as it goes (llama.cpp's log lines and the CLI's progress bar)."""

    on_start: Callable[[ChunkPlan], None] = _ignore  # the plan, before the first chunk
    on_first_group: Callable[[float], None] = _ignore  # seconds of the first pass (the ETA line)
    on_chunk: Callable[[int, PerplexityResult], None] = _ignore  # chunks done (1-based), the sums so far
    on_status: Callable[[K.KldStatus], None] = _ignore  # KL-divergence pass: after each chunk


def _targets(tokens: np.ndarray, plan: ChunkPlan, p: Piece) -> np.ndarray:
    """The token following each output position of a piece."""
    return np.asarray(tokens[p.chunk * plan.n_ctx + p.positions + 1], dtype=np.int64)


E = TypeVar("E")


def run_groups(runner: ChunkRunner, tokens: np.ndarray, bos: int | None, progress: Progress,
               on_piece: Callable[[Piece], E | None], report: Callable[[E], None]) -> None:
    """Every group of chunks through the runner, `on_piece` for each piece; then, as
    llama.cpp orders its lines, the first group's time (the ETA line) and `report` for each
    event `on_piece` returned (what happened as a chunk completed)."""
    plan = runner.plan
    for g, chunk0 in enumerate(range(0, plan.n_chunk, plan.n_seq)):
        t0 = time.perf_counter()
        events = [e for piece in runner.run(tokens, chunk0, bos) if (e := on_piece(piece)) is not None]
        if g == 0:
            progress.on_first_group(time.perf_counter() - t0)
        for e in events:
            report(e)


def perplexity(model: DecoderModel, tokens: np.ndarray, plan: ChunkPlan, bos: int | None,
               progress: Progress | None = None, base_path: str | None = None) -> PerplexityResult:
    """PPL over the chunks of `plan` (bos: the token put first in each chunk, or None); with
    base_path, also write every scored distribution there (llama.cpp's --kl-divergence-base)."""
    progress = progress or Progress()
    progress.on_start(plan)
    res = PerplexityResult(int(tokens.shape[0]), plan)
    runner = ChunkRunner(model, plan, plan.first, plan.n_ctx - 1)
    n_vocab = model.args.n_vocab
    t0 = time.perf_counter()
    writer = LogitsFileWriter(base_path, plan.n_ctx, n_vocab, tokens, plan.n_chunk) if base_path else None
    last = plan.n_ctx - 2  # the last scored position

    def on_piece(piece: Piece) -> tuple[int, PerplexityResult] | None:
        targets = _targets(tokens, plan, piece)
        for sl, logits in runner.logits(piece.hidden):
            if writer is None:
                res.add(target_stats(logits, targets[sl]).nll)
            else:
                rows = np.empty((logits.shape[0], row_width(n_vocab)), dtype=np.uint16)
                res.add(encode_rows(logits, targets[sl], rows))
                writer.write_rows(rows)
        if int(piece.positions[-1]) != last:
            return None
        res.chunk_ppl.append(res.ppl)
        return piece.chunk + 1, dataclasses.replace(res)  # the sums as they were after this chunk

    with writer or contextlib.nullcontext():
        run_groups(runner, tokens, bos, progress, on_piece, lambda e: progress.on_chunk(*e))
    res.seconds = time.perf_counter() - t0
    return res


def _pad(n: int, to: int = 256) -> int:
    return (n + to - 1) // to * to


def strided_context(n_ctx: int, n_batch: int, stride: int) -> int:
    """The window of `--ppl-stride`: llama.cpp's context size after it adds stride/2 to
    n_seq * n_ctx and pads it (llama_context: a multiple of 256, per sequence too)."""
    n_seq = max(1, n_batch // n_ctx)
    total = _pad(n_seq * n_ctx + stride // 2)
    return _pad(total // n_seq) * n_seq


def perplexity_strided(model: DecoderModel, tokens: np.ndarray, n_ctx: int, n_batch: int, n_ubatch: int,
                       stride: int, n_chunks: int, progress: Progress | None = None) -> PerplexityResult:
    """llama.cpp's perplexity_v2: windows of `strided_context` tokens starting every `stride`
    tokens, scoring the last `stride` predictions of each. No BOS substitution (llama.cpp
    puts BOS in only after evaluating the batch, so the model never sees it)."""
    progress = progress or Progress()
    if stride <= 0:
        raise InvalidRequest(f"stride is {stride} but must be greater than zero")
    window = strided_context(n_ctx, n_batch, stride)
    n_batch = min(n_batch, max(1, n_batch // n_ctx) * n_ctx)
    n_tok = int(tokens.shape[0])
    if n_tok < 2 * window:
        raise InvalidRequest(f"you need at least {2 * window} tokens to evaluate perplexity with a context of "
                             f"{window}; the data file you provided tokenizes to only {n_tok} tokens")
    if stride >= window:  # the scored range would start before the window
        raise InvalidRequest(f"--ppl-stride {stride} must be less than the context of {window} tokens")
    n_max = (n_tok - window + stride - 1) // stride
    n_chunk = n_max if n_chunks < 0 else min(n_chunks, n_max)
    if n_chunk == 0:
        raise InvalidRequest("--chunks 0: no chunk to evaluate")
    plan = ChunkPlan(window, min(n_batch, window), min(n_ubatch, n_batch, window), 1, n_chunk)
    progress.on_start(plan)
    res = PerplexityResult(n_tok, plan)
    runner = ChunkRunner(model, plan, window - stride - 1, window - 1)
    t0 = time.perf_counter()
    for i in range(n_chunk):
        start = i * stride
        # a window as chunk 0 of its own token array: ChunkRunner cuts [0, window)
        view = np.asarray(tokens[start : start + window])
        t1 = time.perf_counter()
        for piece in runner.run(view, 0, None):
            targets = np.asarray(view[piece.positions + 1], dtype=np.int64)
            for sl, logits in runner.logits(piece.hidden):
                res.add(softmax_nll(logits, targets[sl]))
        if i == 0:
            progress.on_first_group(time.perf_counter() - t1)
        res.chunk_ppl.append(res.ppl)
        progress.on_chunk(i + 1, res)
    res.seconds = time.perf_counter() - t0
    return res


@dataclass
class KldResult:
    """What a KL-divergence pass measured."""

    base: LogitsFile
    plan: ChunkPlan
    sums: KldSums
    statuses: list[K.KldStatus] = field(default_factory=list)  # after each chunk
    seconds: float = 0.0

    @property
    def summary(self) -> K.KldSummary | None:
        return K.summary(self.sums)


def kl_divergence(model: DecoderModel, base: LogitsFile, n_batch: int, n_ubatch: int, bos: int | None,
                  progress: Progress | None = None) -> KldResult:
    """Compare the model with a base file over the file's chunks (its n_ctx and tokens)."""
    progress = progress or Progress()
    n_vocab = model.args.n_vocab
    if base.n_vocab != n_vocab:
        raise InvalidRequest(f"{base.path}: inconsistent vocabulary ({base.n_vocab} vs {n_vocab} of the model)")
    if n_batch <= 0 or n_ubatch <= 0:
        raise InvalidRequest("--batch-size and --ubatch-size must be at least 1")
    plan = ChunkPlan.of(base.n_ctx, n_batch, n_ubatch, base.n_chunk)
    progress.on_start(plan)
    res = KldResult(base, plan, KldSums())
    runner = ChunkRunner(model, plan, plan.first, plan.n_ctx - 1)
    tokens = np.asarray(base.tokens, dtype=np.int64)
    first, last = plan.first, plan.n_ctx - 2

    def on_piece(piece: Piece) -> K.KldStatus | None:
        targets = _targets(tokens, plan, piece)
        stored = base.rows[piece.chunk]  # (scored_per_chunk, nv)
        for sl, logits in runner.logits(piece.hidden):
            res.sums.add(logits, stored[piece.positions[sl] - first], targets[sl])
        if int(piece.positions[-1]) != last:
            return None
        st = K.status(res.sums, piece.chunk + 1)
        res.statuses.append(st)
        return st

    t0 = time.perf_counter()
    run_groups(runner, tokens, bos, progress, on_piece, progress.on_status)
    res.seconds = time.perf_counter() - t0
    assert res.sums.count == plan.n_chunk * scored_per_chunk(plan.n_ctx)
    return res
