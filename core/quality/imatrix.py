"""`llama imatrix`: llama-imatrix's importance matrix (tools/imatrix/imatrix.cpp).

For every matmul of a `blk.*` weight (and `output.weight` with --process-output) the
collector adds, per input column, the squares of the input rows (float32, one row after
another, as llama.cpp's `collect_imatrix`), and counts the rows. It sees the inputs through
the model's optional matmul observer (`Precision.observer`), so the forward pass runs as
always: the observer is only set during this pass. Like llama.cpp it skips matmuls of fewer
than 16 rows (llama.cpp: "why are small batches ignored?"); a tied output projection is named
`token_embd.weight` and so never collected. Mixture-of-experts weights (ggml's MUL_MAT_ID,
`Precision.expert_observer`) get statistics per expert: each expert's sums and count over the
rows routed to it, in llama.cpp's order (slot by slot, token by token), from every batch.

The text is cut into chunks as for perplexity (core/quality/chunks.py), every position an
output; the perplexity of the second halves is computed along the way unless --no-ppl.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from llamacli.core.errors import InvalidRequest
from llamacli.core.model.families.base import DecoderModel
from llamacli.core.quality.chunks import ChunkPlan, ChunkRunner, Piece
from llamacli.core.quality.logprobs import target_stats
from llamacli.core.quality.perplexity import PerplexityResult, Progress, run_groups
from llamacli.core.quantize.imatrix_file import (
    ImatrixEntry,
    chunk_count_of,
    partial_warnings,
    read_imatrix,
    write_imatrix_dat,
    write_imatrix_gguf,
)

MIN_ROWS = 16  # llama.cpp ignores matmuls of fewer input rows


class ImatrixError(InvalidRequest):
    """The statistics cannot be collected (inconsistent sizes, non-finite values)."""


@dataclass
class ImatrixOutput:
    """Where and how the collector saves (llama-imatrix's -o, --output-format, -ofreq,
    --save-frequency)."""

    path: str = "imatrix.gguf"
    fmt: str = ""  # "gguf", "dat" or "" (GGUF, with a warning for another suffix)
    out_freq: int = 10  # save every N chunks
    save_freq: int = 0  # keep a copy `path.at_N` every N chunks (0: never)
    dataset: str = ""  # the text's file name, recorded in the file


@dataclass
class ImatrixCollector:
    """Sums of squared inputs per column and row counts, per weight."""

    chunk_size: int  # tokens per chunk (-c)
    output: ImatrixOutput = field(default_factory=ImatrixOutput)
    process_output: bool = False
    warn: Callable[[str], None] = lambda line: None
    entries: dict[str, ImatrixEntry] = field(default_factory=dict)
    datasets: list[str] = field(default_factory=list)  # from --in-file files
    last_chunk: int = 0

    def wants(self, name: str) -> bool:
        return name.startswith("blk.") or (self.process_output and name == "output.weight")

    def observe(self, name: str, x: np.ndarray) -> None:
        """Precision's matmul observer: x (T, n_in) float32 is the input of weight `name`."""
        if x.shape[0] < MIN_ROWS or not self.wants(name):
            return
        n_in = x.shape[1]
        e = self.entries.get(name)
        if e is None:
            e = self.entries[name] = ImatrixEntry(np.zeros(n_in, dtype=np.float32), np.zeros(1, dtype=np.int64))
        if e.n_mat > 1 and np.all(e.counts == e.counts[0]):  # one count per dense weight
            e.counts = e.counts[:1].copy()
        if e.sums.shape[0] != n_in:
            raise ImatrixError(f"inconsistent size for {name} ({e.sums.shape[0]} vs {n_in})")
        # acc[j] += x[r, j]^2 for r = 0, 1, ... in float32 (a row-wise reduction adds in that order)
        x32 = np.asarray(x, dtype=np.float32)
        e.sums = np.add.reduce(np.concatenate([e.sums[None, :], x32 * x32]), axis=0)
        if not np.all(np.isfinite(e.sums)):
            raise ImatrixError(f"non-finite values detected in {name}")
        e.counts += x.shape[0]
        for c in e.counts:
            self._chunk_reached(int(c) // self.chunk_size)

    def observe_experts(self, name: str, x: np.ndarray, selected: np.ndarray, n_expert: int) -> None:
        """Precision's expert observer (collect_imatrix's MUL_MAT_ID branch): for slot idx, then
        token row, the row x[row] (or x[row, idx] when each slot has its own) adds its squares
        to its expert's sums and 1 to its count."""
        if not self.wants(name):
            return
        n_in = x.shape[-1]
        e = self.entries.get(name)
        if e is None:
            e = self.entries[name] = ImatrixEntry(np.zeros(n_expert * n_in, dtype=np.float32), np.zeros(n_expert, dtype=np.int64))
        elif e.n_mat == 1 and n_expert > 1:  # broadcast, when loading an old imatrix
            e.counts = np.full(n_expert, e.counts[0], dtype=np.int64)
        if e.sums.shape[0] != n_expert * n_in:
            raise ImatrixError(f"inconsistent size for {name} ({e.sums.shape[0]} vs {n_expert * n_in})")
        if e.n_mat != n_expert:
            raise ImatrixError(f"inconsistent expert count for {name} ({e.n_mat} vs {n_expert})")
        t, k = selected.shape
        per_slot = x.ndim == 3
        # (slot, token) pairs in llama.cpp's loop order, then grouped by expert keeping that order
        flat = np.ascontiguousarray(selected.T).reshape(-1)  # pair p = idx * T + row
        rows = np.tile(np.arange(t), k)
        slots = np.repeat(np.arange(k), t)
        order = np.argsort(flat, kind="stable")
        sums = e.sums.reshape(n_expert, n_in)
        x32 = np.asarray(x, dtype=np.float32)
        experts, starts = np.unique(flat[order], return_index=True)
        ends = np.append(starts[1:], flat.shape[0])
        for ex, a, b in zip(experts.tolist(), starts.tolist(), ends.tolist()):
            p = order[a:b]
            xr = x32[rows[p], slots[p]] if per_slot else x32[rows[p]]
            # acc[j] += x[j]^2 row after row in float32 (a row-wise reduction adds in that order)
            sums[ex] = np.add.reduce(np.concatenate([sums[ex][None, :], xr * xr]), axis=0)
            if not np.all(np.isfinite(sums[ex])):
                raise ImatrixError(f"non-finite values detected in {name}")
            e.counts[ex] += b - a
        e.sums = sums.reshape(-1)
        for c in e.counts:
            self._chunk_reached(int(c) // self.chunk_size)

    def _chunk_reached(self, n_chunk: int) -> None:
        """Save as llama.cpp does when a count crosses into a new chunk."""
        if n_chunk <= self.last_chunk:
            return
        step = n_chunk - self.last_chunk
        self.last_chunk = n_chunk
        if (self.last_chunk % self.output.out_freq) // step == 0:
            self.save()
        if self.output.save_freq > 0 and (self.last_chunk % self.output.save_freq) // step == 0:
            self.save(self.last_chunk)

    def load(self, path: str) -> None:
        """Add a file's statistics (--in-file): a legacy file's averages become sums again."""
        im = read_imatrix(path)
        for name, src in im.entries.items():
            e = self.entries.get(name)
            if im.is_legacy:
                if e is None:
                    e = self.entries[name] = ImatrixEntry(np.zeros_like(src.sums), np.zeros(1, dtype=np.int64))
                e.sums = e.sums + src.sums * np.float32(self.chunk_size)
                e.counts = e.counts + int(src.counts[0]) * self.chunk_size
                continue
            if e is None:
                e = self.entries[name] = ImatrixEntry(np.zeros_like(src.sums), np.zeros(src.n_mat, dtype=np.int64))
            elif e.sums.shape != src.sums.shape:
                raise ImatrixError(f"{path}: mismatched sums size for {name}: {src.sums.shape[0]} != {e.sums.shape[0]}")
            elif e.n_mat == 1 and src.n_mat > 1:
                e.counts = np.full(src.n_mat, e.counts[0], dtype=np.int64)
            elif e.n_mat != src.n_mat:
                raise ImatrixError(f"{path}: mismatched counts size for {name}: {src.n_mat} != {e.n_mat}")
            e.sums = e.sums + src.sums
            e.counts = e.counts + src.counts
        self.datasets += im.datasets
        self.last_chunk = chunk_count_of(self.entries, self.chunk_size)

    def save(self, n_chunk: int = -1) -> str:
        """Write the file (or, with n_chunk > 0, the copy `path.at_N`); returns its path."""
        o = self.output
        path = o.path + (f".at_{n_chunk}" if n_chunk > 0 else "")
        if o.fmt == "dat":
            dataset = o.dataset or (self.datasets[-1] if self.datasets else "")
            for w in write_imatrix_dat(path, self.entries, self.chunk_size, self.last_chunk, dataset):
                self.warn(w)
            return path
        if o.fmt == "" and not o.path.endswith(".gguf"):
            self.warn("saving imatrix using GGUF format with a different suffix than .gguf")
            self.warn("if you want the previous imatrix format, use --output-format dat")
        for w in partial_warnings(self.entries):
            self.warn(w)
        datasets = self.datasets + ([o.dataset] if o.dataset else [])
        write_imatrix_gguf(path, self.entries, datasets, self.last_chunk, self.chunk_size)
        return path


def collect(model: DecoderModel, tokens: np.ndarray, plan: ChunkPlan, bos: int | None, collector: ImatrixCollector,
            compute_ppl: bool = True, progress: Progress | None = None) -> PerplexityResult:
    """Run the chunks with the collector observing every matmul; the perplexity of the
    second halves along the way (compute_ppl), as llama-imatrix's compute_imatrix."""
    progress = progress or Progress()
    progress.on_start(plan)
    res = PerplexityResult(int(tokens.shape[0]), plan)
    # every position is an output when the output matmul is observed (llama.cpp: all logits);
    # without logits, the last position alone marks a chunk's end
    want_logits = compute_ppl or collector.process_output
    lo = 0 if collector.process_output else plan.first if compute_ppl else plan.n_ctx - 1
    hi = plan.n_ctx if collector.process_output else plan.n_ctx - 1 if compute_ppl else plan.n_ctx
    runner = ChunkRunner(model, plan, lo, hi)
    pr = model.precision
    t0 = time.perf_counter()

    def on_piece(piece: Piece) -> tuple[int, PerplexityResult] | None:
        start = piece.chunk * plan.n_ctx
        for sl, logits in runner.logits(piece.hidden) if want_logits else ():
            pos = piece.positions[sl]
            keep = (pos >= plan.first) & (pos < plan.n_ctx - 1)
            if compute_ppl and keep.any():
                res.add(target_stats(logits[keep], tokens[start + pos[keep] + 1]).nll)
        if int(piece.positions[-1]) != hi - 1:
            return None
        if compute_ppl:
            res.chunk_ppl.append(res.ppl)
        return piece.chunk + 1, dataclasses.replace(res)

    pr.observer, pr.expert_observer = collector.observe, collector.observe_experts
    try:
        run_groups(runner, tokens, bos, progress, on_piece, lambda e: progress.on_chunk(*e))
    finally:
        pr.observer = pr.expert_observer = None
    res.seconds = time.perf_counter() - t0
    return res
