"""Quantizing a whole GGUF model file, as llama-quantize (`llama_model_quantize`) does.

    job = QuantizeJob(src, dst, options)   # checks, opens, decides each tensor's type
    report = job.run(on_tensor)            # writes dst atomically (quantize_model: both)

Tensors whose type does not change are copied byte for byte; the others are decoded to float32
(exactly) and encoded with the ggml reference quantizers (bit-exact). The work runs on a thread
pool over slabs of rows (NumPy releases the GIL inside its loops); the file is written in order.
"""

from __future__ import annotations

import errno
import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT

from llamacli.core.errors import LlamaError, ModelLoadError
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.kernels.dequant import SUPPORTED_TYPES

from .convert import ENCODERS, reencode, row_nbytes
from .ftypes import FileType
from .gguf_out import (
    DEFAULT_ALIGNMENT,
    AtomicOutput,
    TensorRecord,
    build_header,
    pad,
    raw_kv_pairs,
)
from .rules import ModelInfo, TypeChooser, is_quantized, tensor_order
from .validate import has_invalid_values

# Values per work item: large enough to amortise the per-item overhead, small enough that a few
# items in flight per thread stay within tens of MiB.
_SLAB_VALUES = 1 << 21


class QuantizeError(LlamaError):
    """The quantization cannot be done or its output cannot be written (exit code 1)."""

    exit_code = 1


@dataclass(frozen=True)
class QuantizeOptions:
    """llama_model_quantize_params, for what we support."""

    file_type: FileType
    allow_requantize: bool = False
    pure: bool = False
    output_tensor_type: QT | None = None
    token_embedding_type: QT | None = None
    leave_output_tensor: bool = False
    n_threads: int = 0  # <= 0: all CPUs


@dataclass(frozen=True)
class TensorPlan:
    """One tensor's conversion: name, numpy-order shape, types, byte sizes before and after."""

    name: str
    shape: tuple[int, ...]
    src_type: QT
    dst_type: QT
    src_nbytes: int
    dst_nbytes: int
    fallback: bool  # the row length forced a different type than the mixture asked for

    @property
    def converts(self) -> bool:
        return self.src_type != self.dst_type

    @property
    def n_values(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class QuantizeReport:
    """What was written: the plan, sizes and the wall time."""

    path: str
    file_type: FileType
    tensors: list[TensorPlan]
    n_values: int
    src_bytes: int  # tensor data only, as llama-quantize's "model size"
    dst_bytes: int
    file_bytes: int
    seconds: float

    @property
    def n_fallback(self) -> int:
        return sum(t.fallback for t in self.tensors)


ProgressFn = Callable[[int, int, TensorPlan], None]


def plan_quantization(g: GGUFFile, opts: QuantizeOptions) -> list[TensorPlan]:
    """Each tensor's new type, in output order, with llama-quantize's rules; raises
    QuantizeError for requests it cannot do (requantizing without permission, a forced type
    whose block does not divide a row, a type we cannot decode)."""
    names = tensor_order(list(g.tensors))
    chooser = TypeChooser(
        ModelInfo.from_metadata(g.metadata, names), opts.file_type, pure=opts.pure,
        output_tensor_type=opts.output_tensor_type, token_embedding_type=opts.token_embedding_type,
        leave_output=opts.leave_output_tensor, tensor_names=names,
    )
    plans: list[TensorPlan] = []
    for name in names:
        t = g.tensors[name]
        try:
            dst, fallback = chooser.choose(name, t.shape, t.qtype)
        except ValueError as e:
            raise QuantizeError(f"{g.path}: {e}") from None
        n_rows = t.n_elements // t.shape[-1] if t.shape else 1
        n_cols = t.shape[-1] if t.shape else 1
        if n_cols % GGML_QUANT_SIZES[dst][0]:
            raise QuantizeError(
                f"tensor {name!r}: row length {n_cols} is not a multiple of {dst.name}'s block "
                f"size {GGML_QUANT_SIZES[dst][0]}; choose another type for it"
            )
        plans.append(TensorPlan(name, t.shape, t.qtype, dst, t.nbytes, n_rows * row_nbytes(dst, n_cols), fallback))
    for p in plans:
        if not p.converts:
            continue
        if is_quantized(p.src_type) and not opts.allow_requantize:
            raise QuantizeError(
                f"{g.path} is already quantized (tensor {p.name!r} is {p.src_type.name}); "
                "pass --allow-requantize to requantize it (quality suffers: quantize from F32/F16/BF16 when you can)"
            )
        if p.src_type not in SUPPORTED_TYPES:
            raise QuantizeError(f"tensor {p.name!r}: cannot convert from {p.src_type.name}")
        if p.dst_type not in ENCODERS:
            raise QuantizeError(f"tensor {p.name!r}: cannot write type {p.dst_type.name}")
    return plans


def _check_paths(src: str, dst: str) -> None:
    if os.path.exists(dst):
        if os.path.isdir(dst):
            raise QuantizeError(f"{dst}: the output path is a directory")
        try:
            same = os.path.samefile(src, dst)
        except OSError:
            same = False
        if same:
            raise QuantizeError(f"input and output are the same file: {dst}")
    directory = os.path.dirname(os.path.abspath(dst))
    if not os.path.isdir(directory):
        raise QuantizeError(f"{dst}: the output directory {directory} does not exist")


def _slabs(p: TensorPlan) -> list[tuple[int, int]]:
    """(first row, row count) work items of a tensor: whole rows, about _SLAB_VALUES values."""
    n_cols = p.shape[-1] if p.shape else 1
    n_rows = p.n_values // n_cols
    per = max(1, _SLAB_VALUES // n_cols)
    return [(r, min(per, n_rows - r)) for r in range(0, n_rows, per)]


def _convert_slab(g: GGUFFile, p: TensorPlan, first: int, count: int) -> np.ndarray:
    n_cols = p.shape[-1] if p.shape else 1
    src_row = row_nbytes(p.src_type, n_cols)
    raw = g.raw(p.name)[first * src_row : (first + count) * src_row]
    if has_invalid_values(raw, p.src_type):
        raise _invalid_data(g, p)
    out = reencode(raw, p.src_type, p.dst_type, count * n_cols, name=p.name)
    if has_invalid_values(out, p.dst_type):  # as llama.cpp: "quantized data validation failed"
        raise QuantizeError(
            f"tensor {p.name!r}: quantized data validation failed: its values overflow "
            f"{p.dst_type.name}'s fp16 scales (NaN/inf); choose a wider type for it"
        )
    return out


def _invalid_data(g: GGUFFile, p: TensorPlan) -> ModelLoadError:
    return ModelLoadError(g.path, f"tensor {p.name!r} has invalid data (NaN or infinite values)")


def _write_error(dst: str, e: OSError) -> QuantizeError:
    why = e.strerror or str(e)
    if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        why += " (is the disk full?)"
    return QuantizeError(f"cannot write {dst}: {why}; no output file was left behind")


class QuantizeJob:
    """A checked quantization: paths validated, input opened, every tensor's type decided.
    `run` writes the output."""

    def __init__(self, src: str, dst: str, opts: QuantizeOptions) -> None:
        self.t_start = time.perf_counter()
        _check_paths(src, dst)
        self.src, self.dst, self.opts = src, dst, opts
        self.gguf = GGUFFile(src)
        self.plans = plan_quantization(self.gguf, opts)
        # llama.cpp loads with check_tensors: no NaN/inf anywhere. Tensors that get converted
        # are checked slab by slab on the thread pool instead (see _convert_slab).
        for p in self.plans:
            if not p.converts and has_invalid_values(self.gguf.raw(p.name), p.src_type):
                raise _invalid_data(self.gguf, p)

    def run(self, on_tensor: ProgressFn | None = None) -> QuantizeReport:
        """Write the output (replacing dst only on success). `on_tensor(i, n, plan)` is called
        before tensor i (0-based) of n is processed, and once more with i == n at the end."""
        g, plans, opts = self.gguf, self.plans, self.opts
        align = int(g.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        header = build_header(
            raw_kv_pairs(g.data, g.path), opts.file_type.id,
            [TensorRecord(p.name, p.shape, int(p.dst_type), p.dst_nbytes) for p in plans], align,
        )
        n_threads = opts.n_threads if opts.n_threads > 0 else (os.cpu_count() or 1)
        written = len(header)
        try:
            with AtomicOutput(self.dst) as out, ThreadPoolExecutor(max_workers=n_threads) as pool:
                out.write(header)
                for i, p in enumerate(plans):
                    if on_tensor is not None:
                        on_tensor(i, len(plans), p)
                    if p.converts:
                        _write_converted(out, pool, g, p, 2 * n_threads)
                    else:
                        out.write(g.raw(p.name))
                    out.write(bytes(pad(p.dst_nbytes, align) - p.dst_nbytes))
                    written += pad(p.dst_nbytes, align)
        except OSError as e:
            raise _write_error(self.dst, e) from None
        if on_tensor is not None and plans:
            on_tensor(len(plans), len(plans), plans[-1])
        return QuantizeReport(
            path=self.dst, file_type=opts.file_type, tensors=plans, n_values=sum(p.n_values for p in plans),
            src_bytes=sum(p.src_nbytes for p in plans), dst_bytes=sum(p.dst_nbytes for p in plans),
            file_bytes=written, seconds=time.perf_counter() - self.t_start,
        )


def quantize_model(src: str, dst: str, opts: QuantizeOptions, on_tensor: ProgressFn | None = None) -> QuantizeReport:
    """Quantize the GGUF at `src` into `dst`: QuantizeJob(src, dst, opts).run(on_tensor)."""
    return QuantizeJob(src, dst, opts).run(on_tensor)


def _write_converted(out: AtomicOutput, pool: ThreadPoolExecutor, g: GGUFFile, p: TensorPlan, window: int) -> None:
    """Convert a tensor slab by slab on the pool, at most `window` slabs in flight, writing the
    results in order."""
    pending: deque[Future[np.ndarray]] = deque()
    for first, count in _slabs(p):
        pending.append(pool.submit(_convert_slab, g, p, first, count))
        if len(pending) >= window:
            out.write(pending.popleft().result())
    while pending:
        out.write(pending.popleft().result())
