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
import re
import time
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as QT

from llamacli.core.errors import LlamaError, ModelLoadError
from llamacli.core.model.weights.gguf_file import GGUFFile, split_path
from llamacli.core.model.kernels.dequant import SUPPORTED_TYPES, dequantize_into
from llamacli.core.model.kernels.ggml_types import Q2_0

from .convert import ENCODERS, reencode, row_nbytes
from .ftypes import FileType
from .gguf_out import (
    DEFAULT_ALIGNMENT,
    AtomicOutput,
    TensorRecord,
    build_header,
    gguf_header,
    pad,
    raw_kv_pairs,
    split_kvs,
    u32_kv,
)
from .iq import NEEDS_WEIGHTS
from .importance import KEY_DATASET, KEY_FILE, KEY_N_CHUNKS, KEY_N_ENTRIES, Importance
from .overrides import KVOverride, LayerRemap
from .rules import ModelInfo, TypeChooser, is_quantized, tensor_order
from .validate import has_invalid_values
from .weighted import WEIGHTED_TYPES, encode_weighted

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
    tensor_types: tuple[tuple[str, QT], ...] = ()  # --tensor-type REGEX=TYPE, first match wins
    importance: Importance | None = None  # --imatrix (already filtered by --include/--exclude-weights)
    kv_overrides: tuple[KVOverride, ...] = ()
    prune_layers: tuple[int, ...] = ()
    dry_run: bool = False
    keep_split: bool = False  # one output part per input part: OUTPUT is then the parts' prefix

    @property
    def only_copy(self) -> bool:
        """COPY: every tensor keeps its type; the file keeps its file type."""
        return self.file_type.name == "COPY"


@dataclass(frozen=True)
class TensorPlan:
    """One tensor's conversion: name (in the output; src_name in the input, which differs when
    layers are pruned), numpy-order shape, types, byte sizes before and after."""

    name: str
    shape: tuple[int, ...]
    src_type: QT
    dst_type: QT
    src_nbytes: int
    dst_nbytes: int
    fallback: bool  # the row length forced a different type than the mixture asked for
    src_name: str = ""
    weighted: bool = False  # quantized with its importance-matrix weights
    needs_imatrix: bool = False  # llama.cpp refuses this type without an importance matrix
    part: int = 0  # the output part (--keep-split: the input's part)

    @property
    def input_name(self) -> str:
        return self.src_name or self.name

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
    wrote: bool = True  # False for a dry run

    @property
    def n_fallback(self) -> int:
        return sum(t.fallback for t in self.tensors)


ProgressFn = Callable[[int, int, TensorPlan], None]


_BLK = re.compile(r"blk\.(\d+)\.")


def _c_str127(s: str) -> str:
    """strncpy into llama_model_kv_override's 128-byte val_str: at most 127 bytes."""
    return s.encode("utf-8")[:127].decode("utf-8", errors="ignore")


def guess_file_type(types: list[QT]) -> int:
    """llama_model_loader's guess: the llama_ftype of the most common tensor type (the type
    that first reached the final count, as its running maximum does); ALL_F32 if unknown."""
    counts: dict[QT, int] = {}
    best, n_best = QT.F32, 0
    for t in types:
        counts[t] = counts.get(t, 0) + 1
        if n_best < counts[t]:
            best, n_best = t, counts[t]
    by_type = {QT.F32: 0, QT.F16: 1, QT.BF16: 32, QT.Q4_0: 2, QT.Q4_1: 3, QT.Q5_0: 8, QT.Q5_1: 9, QT.Q8_0: 7,
               QT.Q2_K: 10, QT.Q3_K: 12, QT.Q4_K: 15, QT.Q5_K: 17, QT.Q6_K: 18, QT.TQ1_0: 36, QT.TQ2_0: 37,
               QT.IQ2_XXS: 19, QT.IQ2_XS: 20, QT.IQ2_S: 28, QT.IQ3_XXS: 23, QT.IQ1_S: 24, QT.IQ1_M: 31,
               QT.IQ4_NL: 25, QT.IQ4_XS: 30, QT.IQ3_S: 26, QT.NVFP4: 39, QT.Q1_0: 40, Q2_0: 41}
    return by_type.get(best, 0)


_IMATRIX_TYPES = (QT.IQ3_XXS, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ1_M, QT.IQ1_S)


def _requires_imatrix(name: str, dst: QT, ftype: FileType) -> bool:
    """tensor_requires_imatrix: the 1-3 bit IQ types, and Q2_K in a Q2_K_S file (not for the
    token embeddings or the output)."""
    if name in ("token_embd.weight", "per_layer_token_embd.weight", "output.weight"):
        return False
    return dst in _IMATRIX_TYPES or (dst == QT.Q2_K and ftype.name == "Q2_K_S")


def _n_mat(shape: tuple[int, ...]) -> int:
    """ne[2]: the number of matrices (experts) of a tensor, numpy-order shape."""
    return shape[-3] if len(shape) >= 3 else 1


def plan_quantization(g: GGUFFile, opts: QuantizeOptions) -> list[TensorPlan]:
    """Each tensor's new type, in output order, with llama-quantize's rules; raises
    QuantizeError for requests it cannot do (requantizing without permission, a forced type
    whose block does not divide a row, a type we cannot decode, a very low-bit type without an
    importance matrix)."""
    imx = opts.importance if opts.importance is not None and opts.importance.weights else None
    remap = LayerRemap(opts.prune_layers)
    renamed = [(n, remap.rename(n)) for n in tensor_order(list(g.tensors))]
    renamed = [(src, dst) for src, dst in renamed if dst]  # pruned layers are dropped
    if opts.keep_split:  # in the parts' order, as the parts will be written
        renamed.sort(key=lambda sd: (g.tensors[sd[0]].split, g.tensors[sd[0]].offset))
    names = [dst for _, dst in renamed]
    metadata = dict(g.metadata)
    metadata.update({o.key: o.metadata_value for o in opts.kv_overrides})  # the loader sees them
    chooser = TypeChooser(
        ModelInfo.from_metadata(metadata, names), opts.file_type, pure=opts.pure,
        output_tensor_type=opts.output_tensor_type, token_embedding_type=opts.token_embedding_type,
        leave_output=opts.leave_output_tensor, tensor_names=names, tensor_types=opts.tensor_types,
        has_imatrix=imx is not None, only_copy=opts.only_copy,
    )
    plans: list[TensorPlan] = []
    for src_name, name in renamed:
        t = g.tensors[src_name]
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
        needs = chooser.allows(name, t.shape) and _requires_imatrix(name, dst, opts.file_type)
        if needs and imx is None and not opts.dry_run:
            raise QuantizeError(
                f"this quantization requires an importance matrix (--imatrix): tensor {name!r} "
                f"would be {dst.name}"
            )
        weighted = False
        if imx is not None and t.qtype != dst:
            try:
                w = imx.for_tensor(src_name, n_cols, _n_mat(t.shape))  # the input's name
            except LlamaError as e:
                raise QuantizeError(str(e)) from None
            weighted = w is not None
            if w is None and needs:
                raise QuantizeError(
                    f"missing importance matrix for tensor {name!r} in a very low-bit quantization "
                    f"({dst.name}): the result would be garbage"
                )
        plans.append(TensorPlan(
            name, t.shape, t.qtype, dst, t.nbytes, n_rows * row_nbytes(dst, n_cols), fallback,
            src_name=src_name if src_name != name else "", weighted=weighted, needs_imatrix=needs,
            part=t.split if opts.keep_split else 0,
        ))
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
        if p.dst_type in NEEDS_WEIGHTS and not p.weighted and not opts.dry_run:
            # (llama.cpp aborts in ggml_quantize_chunk here)
            raise QuantizeError(
                f"tensor {p.name!r}: {p.dst_type.name} needs importance weights and the importance "
                "matrix has none for it (pass --imatrix with an entry for it, or choose another type)"
            )
        if p.dst_type not in ENCODERS and p.dst_type not in NEEDS_WEIGHTS:
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
    """(first row, row count) work items of a tensor: whole rows, about _SLAB_VALUES values,
    never across two experts' matrices (each has its own importance weights)."""
    n_cols = p.shape[-1] if p.shape else 1
    n_rows = p.n_values // n_cols
    per_mat = n_rows // _n_mat(p.shape)
    per = max(1, _SLAB_VALUES // n_cols)
    return [(m + r, min(per, per_mat - r)) for m in range(0, n_rows, per_mat) for r in range(0, per_mat, per)]


def _convert_slab(g: GGUFFile, p: TensorPlan, first: int, count: int, qw: np.ndarray | None) -> np.ndarray:
    """Rows [first, first + count) re-encoded; qw: the importance weights of their matrix."""
    n_cols = p.shape[-1] if p.shape else 1
    src_row = row_nbytes(p.src_type, n_cols)
    raw = g.raw(p.input_name)[first * src_row : (first + count) * src_row]
    if has_invalid_values(raw, p.src_type):
        raise _invalid_data(g, p)
    if qw is not None and p.dst_type in WEIGHTED_TYPES:
        x = np.empty(count * n_cols, dtype=np.float32)
        dequantize_into(x, raw, p.src_type, name=p.name)
        out = encode_weighted(x.reshape(count, n_cols), qw, p.dst_type)
    else:  # no weights, or a type whose ggml quantizer ignores them (Q8_0, F16, ...)
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
        self.src, self.dst, self.opts = src, dst, opts
        self.gguf = GGUFFile(src)
        self.plans = plan_quantization(self.gguf, opts)
        self.n_parts = max(p.part for p in self.plans) + 1 if self.plans else 1
        for path in self.part_paths():
            _check_paths(src, path)
        # llama.cpp loads with check_tensors: no NaN/inf anywhere. Tensors that get converted
        # are checked slab by slab on the thread pool instead (see _convert_slab).
        for p in self.plans:
            if not p.converts and has_invalid_values(self.gguf.raw(p.input_name), p.src_type):
                raise _invalid_data(self.gguf, p)

    def _weights(self, p: TensorPlan) -> np.ndarray | None:
        """The tensor's importance weights (n_mat, n_in), when it is quantized with them."""
        imx = self.opts.importance
        if not p.weighted or imx is None:
            return None
        n_cols = p.shape[-1] if p.shape else 1
        return imx.for_tensor(p.input_name, n_cols, _n_mat(p.shape))

    def file_type_id(self) -> int:
        """general.file_type of the output: the chosen type's id; under COPY the input's (its
        general.file_type, else llama.cpp's guess from the most common tensor type, marked
        guessed with 1024)."""
        if not self.opts.only_copy:
            return self.opts.file_type.id
        if "general.file_type" in self.gguf.metadata:
            return int(self.gguf.metadata["general.file_type"])
        return guess_file_type([self.gguf.tensors[p.input_name].qtype for p in self.plans]) | 1024

    def extra_metadata(self) -> list[tuple[str, bytes]]:
        """Entries set after the input's (each replaces the key where it was): the
        --override-kv ones, the importance matrix's, and the block count when layers are pruned."""
        out = [(o.key, o.entry()) for o in self.opts.kv_overrides]
        imx = self.opts.importance
        if imx is not None and imx.weights:
            out.append((KEY_FILE, KVOverride(KEY_FILE, "str", _c_str127(imx.path)).entry()))
            if imx.datasets:
                out.append((KEY_DATASET, KVOverride(KEY_DATASET, "str", _c_str127(imx.datasets[0])).entry()))
            out.append((KEY_N_ENTRIES, u32_kv(KEY_N_ENTRIES, len(imx.weights))))
            if imx.chunk_count > 0:
                out.append((KEY_N_CHUNKS, u32_kv(KEY_N_CHUNKS, imx.chunk_count)))
        if self.opts.prune_layers:
            arch = str(self.gguf.metadata.get("general.architecture", ""))
            layers = {int(m.group(1)) for p in self.plans if (m := _BLK.match(p.name))}
            out.append((f"{arch}.block_count", u32_kv(f"{arch}.block_count", len(layers))))
        return out

    def part_paths(self) -> list[str]:
        """The output files: dst, or with --keep-split dst-00001-of-0000N.gguf, ... (llama.cpp's
        split names; dst is the prefix)."""
        if not self.opts.keep_split:
            return [self.dst]
        return [split_path(self.dst, i, self.n_parts) for i in range(self.n_parts)]

    def _headers(self) -> list[tuple[bytes, int]]:
        """Each part's header and alignment: the first part has the input's metadata (and the
        split keys when there are parts), the others only their split keys, as
        llama_model_quantize writes them."""
        g, plans = self.gguf, self.plans
        align = int(g.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        out = []
        for i in range(self.n_parts):
            records = [TensorRecord(p.name, p.shape, int(p.dst_type), p.dst_nbytes) for p in plans if p.part == i]
            splits = split_kvs(i, self.n_parts, len(plans)) if self.n_parts > 1 else []
            if i == 0:
                head = build_header(raw_kv_pairs(g.data, g.path), self.file_type_id(), records, align,
                                    extra=self.extra_metadata() + splits)
                out.append((head, align))
            else:
                out.append((gguf_header([raw for _, raw in splits], records, DEFAULT_ALIGNMENT), DEFAULT_ALIGNMENT))
        return out

    def run(self, on_tensor: ProgressFn | None = None) -> QuantizeReport:
        """Write the output (replacing the files only on success). `on_tensor(i, n, plan)` is
        called before tensor i (0-based) of n is processed, and once more with i == n at the end."""
        g, plans, opts = self.gguf, self.plans, self.opts
        headers = self._headers()
        sizes = [len(h) + sum(pad(p.dst_nbytes, a) for p in plans if p.part == i) for i, (h, a) in enumerate(headers)]
        if opts.dry_run:
            return self._report(sum(sizes), wrote=False)
        n_threads = opts.n_threads if opts.n_threads > 0 else (os.cpu_count() or 1)
        try:
            with ExitStack() as stack:
                pool = stack.enter_context(ThreadPoolExecutor(max_workers=n_threads))
                outs = [stack.enter_context(AtomicOutput(path)) for path in self.part_paths()]
                for out, (header, _) in zip(outs, headers):
                    out.write(header)
                for i, p in enumerate(plans):
                    if on_tensor is not None:
                        on_tensor(i, len(plans), p)
                    out, align = outs[p.part], headers[p.part][1]
                    if p.converts:
                        _write_converted(out, pool, g, p, 2 * n_threads, self._weights(p))
                    else:
                        out.write(g.raw(p.input_name))
                    out.write(bytes(pad(p.dst_nbytes, align) - p.dst_nbytes))
        except OSError as e:
            raise _write_error(self.dst, e) from None
        written = sum(sizes)
        if on_tensor is not None and plans:
            on_tensor(len(plans), len(plans), plans[-1])
        return self._report(written, wrote=True)

    def _report(self, file_bytes: int, wrote: bool) -> QuantizeReport:
        plans = self.plans
        return QuantizeReport(
            path=self.dst, file_type=self.opts.file_type, tensors=plans, n_values=sum(p.n_values for p in plans),
            src_bytes=sum(p.src_nbytes for p in plans), dst_bytes=sum(p.dst_nbytes for p in plans),
            file_bytes=file_bytes, seconds=time.perf_counter() - self.t_start, wrote=wrote,
        )


def quantize_model(src: str, dst: str, opts: QuantizeOptions, on_tensor: ProgressFn | None = None) -> QuantizeReport:
    """Quantize the GGUF at `src` into `dst`: QuantizeJob(src, dst, opts).run(on_tensor)."""
    return QuantizeJob(src, dst, opts).run(on_tensor)


def _write_converted(
    out: AtomicOutput, pool: ThreadPoolExecutor, g: GGUFFile, p: TensorPlan, window: int, qw: np.ndarray | None
) -> None:
    """Convert a tensor slab by slab on the pool, at most `window` slabs in flight, writing the
    results in order. qw: the importance weights (n_mat, n_in) or None."""
    pending: deque[Future[np.ndarray]] = deque()
    per_mat = p.n_values // (p.shape[-1] if p.shape else 1) // _n_mat(p.shape)
    for first, count in _slabs(p):
        w = None if qw is None else qw[first // per_mat]
        pending.append(pool.submit(_convert_slab, g, p, first, count, w))
        if len(pending) >= window:
            out.write(pending.popleft().result())
    while pending:
        out.write(pending.popleft().result())
