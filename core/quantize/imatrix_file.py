"""Importance-matrix files, as llama-imatrix writes them and llama-quantize reads them
(common/imatrix-loader.cpp, tools/imatrix/imatrix.cpp).

GGUF (the default): `general.type` = "imatrix", `imatrix.datasets` (the texts' file names),
`imatrix.chunk_count`, `imatrix.chunk_size`; per weight W (names sorted) two F32 tensors,
`W.in_sum2` (n_in, n_mat): the sums of the squared inputs per column (per expert for MoE),
and `W.counts` (1, n_mat): the rows summed. Written as ggml's gguf_write_to_file does.

Legacy `.dat`: int32 n_entries; per entry int32 name length, the name, int32 ncall, int32
nval, nval float32 values = (sum / count) * ncall with ncall = ceil(max count / chunk size);
then int32 chunk count, int32 length and the dataset's file name.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np
from gguf import GGMLQuantizationType

from llamacli.core.errors import InvalidRequest, ModelLoadError
from llamacli.core.model.weights.gguf_file import GGUF_MAGIC, GGUFFile
from llamacli.core.quantize.gguf_out import (
    DEFAULT_ALIGNMENT,
    AtomicOutput,
    TensorRecord,
    gguf_header,
    pad,
    str_array_kv,
    str_kv,
    u32_kv,
)

KEY_DATASETS = "imatrix.datasets"
KEY_CHUNK_COUNT = "imatrix.chunk_count"
KEY_CHUNK_SIZE = "imatrix.chunk_size"
SUM_SUFFIX = ".in_sum2"
COUNT_SUFFIX = ".counts"


class ImatrixFileError(InvalidRequest):
    """An importance-matrix file that cannot be read."""


@dataclass
class ImatrixEntry:
    """One weight's statistics: sums (n_mat * n_in,) float32, counts (n_mat,) int64."""

    sums: np.ndarray
    counts: np.ndarray

    @property
    def n_mat(self) -> int:
        return int(self.counts.shape[0])


@dataclass
class Imatrix:
    """A file's contents (common_imatrix)."""

    entries: dict[str, ImatrixEntry] = field(default_factory=dict)
    datasets: list[str] = field(default_factory=list)
    chunk_count: int = 0
    chunk_size: int = 0
    is_legacy: bool = False
    has_metadata: bool = False  # a GGUF file with datasets, chunk count and chunk size


def read_imatrix(path: str) -> Imatrix:
    """Read a GGUF or legacy imatrix file; ImatrixFileError names the file and the problem."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ImatrixFileError(f"failed to open {path}: {e.strerror or e}") from None
    if magic == GGUF_MAGIC:
        return _read_gguf(path)
    return _read_legacy(path)


def _read_gguf(path: str) -> Imatrix:
    try:
        g = GGUFFile(path)
    except ModelLoadError as e:
        raise ImatrixFileError(str(e)) from None
    md = g.metadata
    out = Imatrix()
    ds = md.get(KEY_DATASETS)
    if isinstance(ds, list):
        out.datasets = [str(d) for d in ds]
    out.chunk_count = int(md.get(KEY_CHUNK_COUNT, 0))
    out.chunk_size = int(md.get(KEY_CHUNK_SIZE, 0))
    out.has_metadata = all(k in md for k in (KEY_DATASETS, KEY_CHUNK_COUNT, KEY_CHUNK_SIZE))
    pairs: dict[str, dict[str, str]] = {}
    for name in g.tensors:
        for suffix in (SUM_SUFFIX, COUNT_SUFFIX):
            if name.endswith(suffix) and len(name) > len(suffix):
                pairs.setdefault(name[: -len(suffix)], {})[suffix] = name
    if not g.tensors:
        raise ImatrixFileError(f"no data in file {path}")
    for w in sorted(pairs):
        p = pairs[w]
        if len(p) != 2:
            raise ImatrixFileError(f"{path}: mismatched sums and counts for {w}")
        ts, tc = g.tensor(p[SUM_SUFFIX]), g.tensor(p[COUNT_SUFFIX])
        if ts.qtype != GGMLQuantizationType.F32 or tc.qtype != GGMLQuantizationType.F32:
            raise ImatrixFileError(f"{path}: sums and counts for {w} must be F32")
        sums = np.frombuffer(g.raw(ts.name), dtype="<f4").astype(np.float32)
        counts = np.frombuffer(g.raw(tc.name), dtype="<f4")
        if counts.size == 0 or sums.size % counts.size:
            raise ImatrixFileError(f"{path}: {w} has {sums.size} sums for {counts.size} counts")
        # std::lround: halves away from zero
        out.entries[w] = ImatrixEntry(sums, np.trunc(counts.astype(np.float64) + np.copysign(0.5, counts)).astype(np.int64))
    return out


class _Reader:
    def __init__(self, data: bytes, path: str) -> None:
        self.data, self.pos, self.path = data, 0, path

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ImatrixFileError(f"{self.path}: failed reading {what}")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def i32(self, what: str) -> int:
        return int(struct.unpack("<i", self.take(4, what))[0])


def _read_legacy(path: str) -> Imatrix:
    with open(path, "rb") as f:
        r = _Reader(f.read(), path)
    if len(r.data) < 4:
        raise ImatrixFileError(f"no data in file {path}")
    n_entries = r.i32("the entry count")
    if n_entries < 1:
        raise ImatrixFileError(f"no data in file {path}")
    out = Imatrix(is_legacy=True)
    for i in range(n_entries):
        name = r.take(r.i32(f"the name of entry {i + 1}"), f"the name of entry {i + 1}").decode("utf-8", "replace")
        ncall = r.i32(f"entry {i + 1}")
        nval = r.i32(f"entry {i + 1}")
        if nval < 1:
            raise ImatrixFileError(f"{path}: failed reading number of values for entry {i}")
        sums = np.frombuffer(r.take(4 * nval, f"data for entry {i}"), dtype="<f4").astype(np.float32)
        out.entries[name] = ImatrixEntry(sums, np.array([ncall], dtype=np.int64))
    if r.pos + 4 <= len(r.data):  # the optional trailer: chunk count, dataset name
        out.chunk_count = r.i32("the chunk count")
        if r.pos + 4 <= len(r.data):
            n = r.i32("the dataset name")
            if n > 0 and r.pos + n <= len(r.data):
                out.datasets.append(r.take(n, "the dataset name").decode("utf-8", "replace"))
    return out


def partial_warnings(entries: dict[str, ImatrixEntry]) -> list[str]:
    """llama.cpp's warnings about entries some of whose matrices (experts) saw no data."""
    out = []
    for name, e in entries.items():
        n_zero = int((e.counts == 0).sum())
        if 0 < n_zero:
            out.append(f"entry '{name:>40}' has partial data ({100.0 * (e.n_mat - n_zero) / e.n_mat:.2f}%)")
    return out


def write_imatrix_gguf(path: str, entries: dict[str, ImatrixEntry], datasets: list[str], chunk_count: int,
                       chunk_size: int) -> None:
    """The GGUF imatrix file, entries sorted by name, as llama-imatrix's save_imatrix."""
    kv = [str_kv("general.type", "imatrix"), str_array_kv(KEY_DATASETS, datasets),
          u32_kv(KEY_CHUNK_COUNT, chunk_count), u32_kv(KEY_CHUNK_SIZE, chunk_size)]
    records: list[TensorRecord] = []
    blobs: list[bytes] = []
    f32 = int(GGMLQuantizationType.F32)
    for name in sorted(entries):
        e = entries[name]
        n_mat, nval = e.n_mat, int(e.sums.shape[0])
        if nval == 0 or n_mat == 0:
            continue
        records.append(TensorRecord(name + SUM_SUFFIX, (n_mat, nval // n_mat), f32, 4 * nval))
        records.append(TensorRecord(name + COUNT_SUFFIX, (n_mat, 1), f32, 4 * n_mat))
        blobs.append(np.asarray(e.sums, dtype="<f4").tobytes())
        blobs.append(np.asarray(e.counts, dtype="<f4").tobytes())
    with AtomicOutput(path) as out:
        out.write(gguf_header(kv, records, DEFAULT_ALIGNMENT))
        for b in blobs:
            out.write(b + bytes(pad(len(b), DEFAULT_ALIGNMENT) - len(b)))


def write_imatrix_dat(path: str, entries: dict[str, ImatrixEntry], chunk_size: int, chunk_count: int,
                      dataset: str) -> list[str]:
    """The legacy file, as llama-imatrix's save_imatrix_legacy; returns its warnings (entries
    without data are skipped)."""
    warnings = []
    keep = []
    for name, e in entries.items():
        if e.n_mat == 0:
            continue
        if int((e.counts == 0).sum()) == e.n_mat:
            warnings.append(f"entry '{name:>40}' has no data - skipping")
            continue
        keep.append(name)
    warnings += partial_warnings({n: entries[n] for n in keep})
    if len(keep) < len(entries):
        warnings.append(f"storing only {len(keep)} out of {len(entries)} entries")
    parts = [struct.pack("<i", len(keep))]
    for name in sorted(keep):
        e = entries[name]
        ncall = (int(e.counts.max()) + chunk_size - 1) // chunk_size  # ceiling: no accidental zeros
        nval = int(e.sums.shape[0])
        count = np.repeat(e.counts.astype(np.float32), nval // e.n_mat)
        value = np.where(count == 0, np.float32(1), e.sums.astype(np.float32))
        count = np.where(count == 0, np.float32(1), count)
        vals = (value / count) * np.float32(ncall)
        raw = name.encode("utf-8")
        parts += [struct.pack("<i", len(raw)), raw, struct.pack("<ii", ncall, nval), vals.astype("<f4").tobytes()]
    ds = dataset.encode("utf-8")
    parts += [struct.pack("<ii", chunk_count, len(ds)), ds]
    with AtomicOutput(path) as out:
        out.write(b"".join(parts))
    return warnings


def chunk_count_of(entries: dict[str, ImatrixEntry], chunk_size: int) -> int:
    """The chunks the statistics cover: the largest count over the chunk size (load_imatrix)."""
    best = max((int(e.counts.max()) for e in entries.values() if e.n_mat), default=0)
    return best // chunk_size if chunk_size > 0 else 0

