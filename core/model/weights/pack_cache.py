"""Packed copies of a model's matrices in a file of their own, memory-mapped: file-backed pages.

A model with experts reads a small part of its file per step (the routed experts' rows), so
its resident memory should follow the pages it reads (issue 25's target: file-backed pages +
300 MB). Its other matrices (attention, shared or leading dense FFNs, the vocabulary
projection) are read whole every step, and their packed form (core/model/kernels/qmm/packed.py,
packed_k.py: the same bytes regrouped, the same results, faster) would be anonymous memory:
~0.77 GB for Qwen3-30B-A3B. Here they are packed once into a cache file beside nothing else and
mapped read-only, like the model: pages the kernel can drop and read again, shared between
every process that serves the model, and a later load maps them without packing again.

One cache file per model file and set of matrices, named by a digest of the model file's
identity (each part's real path, size, modification time, inode) and of the matrices (where each one's rows
lie in the file, their type and shape) and `VERSION` (bumped when a packed layout changes):

    MAGIC (8 bytes) | header length (u64, little-endian) | header (JSON) | zero padding
    then each packed matrix at its 4096-byte-aligned offset (`Entry.at`)

It is written under a temporary name and renamed into place (readers never see a partial
file; two processes building it at once each map a whole one). The directory is
`$LLAMA_PACK_CACHE`, else `$XDG_CACHE_HOME/llamacli/packed` (~/.cache/llamacli/packed); an
empty `LLAMA_PACK_CACHE` or `off` turns the cache off, and so does a directory that cannot be
written: the matrices then stay as stored in the model's file (the unpacked kernels, the same
results), and `attach` says why.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from llamacli.core.model.kernels.qmm import QuantMatrix
from llamacli.core.model.kernels.qmm.matrix import packed_shape, pack_into
from llamacli.core.model.weights.gguf_file import GGUFFile

VERSION = 1  # the packed layouts of packed.py / packed_k.py; bump when one changes
MAGIC = b"LLPACK\x00\x01"
ALIGN = 4096
ENV = "LLAMA_PACK_CACHE"


def cache_dir() -> Path | None:
    """Where packed copies go (module docstring); None when the cache is off."""
    v = os.environ.get(ENV)
    if v is not None:
        return None if v.strip() in ("", "off") else Path(v).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "llamacli" / "packed"


@dataclass(frozen=True)
class Entry:
    """One matrix: its rows' bytes in the model file (part `split`, byte `offset`, `n_out` rows
    of `row_bytes`, ggml type `qtype`) and its packed form's place in the cache file."""

    split: int
    offset: int
    n_out: int
    row_bytes: int
    qtype: int
    at: int = 0
    rows: int = 0  # the packed array's shape
    cols: int = 0

    @property
    def source(self) -> tuple[int, int, int, int, int]:
        return (self.split, self.offset, self.n_out, self.row_bytes, self.qtype)


@dataclass
class Attached:
    """What `attach` did: bytes of packed matrices now mapped from `path` (0 and a `reason`
    when the cache was off or could not be written)."""

    nbytes: int = 0
    path: str = ""
    built: bool = False  # packed now (False: an existing file mapped)
    reason: str = ""


def _source_entry(gguf: GGUFFile, name: str, m: QuantMatrix) -> Entry:
    """Where m's rows lie in the model file (m.data is a view of tensor `name`'s mapping)."""
    split = gguf.tensor(name).split
    base = gguf.maps[split]
    offset = m.data.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    assert 0 <= offset and offset + m.data.nbytes <= base.nbytes, "a matrix outside its file's mapping"
    return Entry(split, int(offset), m.n_out, int(m.data.shape[1]), int(m.qtype))


def _layout(entries: list[Entry], mats: list[QuantMatrix], header_room: int) -> list[Entry]:
    """The entries with their packed shapes and aligned offsets, data after `header_room`."""
    out, at = [], -(-header_room // ALIGN) * ALIGN
    for e, m in zip(entries, mats):
        rows, cols = packed_shape(m)
        out.append(Entry(*e.source, at=at, rows=rows, cols=cols))
        at += -(-(rows * cols) // ALIGN) * ALIGN
    return out


def _identity(gguf: GGUFFile, sources: list[tuple[int, int, int, int, int]]) -> dict[str, object]:
    """What the cache file is a function of: each part of the model file (real path, size,
    modification time, inode), the matrices' places in them, the packed layouts' version."""
    parts = []
    for p in gguf.paths:
        st = os.stat(p)
        parts.append([os.path.realpath(p), st.st_size, st.st_mtime_ns, st.st_ino])
    return {"version": VERSION, "parts": parts, "sources": [list(s) for s in sources]}


def _read_header(path: Path) -> dict[str, object] | None:
    try:
        with open(path, "rb") as f:
            head = f.read(16)
            if len(head) < 16 or head[:8] != MAGIC:
                return None
            (n,) = struct.unpack("<Q", head[8:])
            header = json.loads(f.read(min(n, 1 << 24)))
            return header if isinstance(header, dict) else None
    except (OSError, ValueError):
        return None


def _header(ident: dict[str, object], entries: list[Entry]) -> bytes:
    return json.dumps({**ident, "entries": [asdict(e) for e in entries]}).encode()


def _write(path: Path, blob: bytes, entries: list[Entry], mats: list[QuantMatrix]) -> None:
    """Pack every matrix into a new cache file at `path` (temporary name, then renamed). Each is
    packed into one reused buffer and written with write(): a full disk is an OSError here,
    where pages of a mapped sparse file would fault (SIGBUS) on their first store."""
    assert 16 + len(blob) <= min(e.at for e in entries), "the header outgrew its room"
    buf = np.empty(max(e.rows * e.cols for e in entries), dtype=np.uint8)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(MAGIC + struct.pack("<Q", len(blob)) + blob)
            for e, m in zip(entries, mats):
                packed = pack_into(m, buf[: e.rows * e.cols].reshape(e.rows, e.cols))
                f.seek(e.at)
                f.write(packed.reshape(-1).data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _entries(path: Path, ident: dict[str, object]) -> list[Entry] | None:
    """The entries of the cache file at `path` if it is whole and for this identity."""
    header = _read_header(path)
    if header is None or {k: header.get(k) for k in ident} != ident:
        return None
    try:
        entries = [Entry(**e) for e in header["entries"]]  # type: ignore[attr-defined]
        size = path.stat().st_size
    except (OSError, TypeError, KeyError):
        return None
    ok = len(entries) == len(ident["sources"]) and all(e.at + e.rows * e.cols <= size for e in entries)  # type: ignore[arg-type]
    return entries if ok else None


def attach(gguf: GGUFFile, named: list[tuple[str, QuantMatrix]]) -> Attached:
    """Give each matrix (tensor name, a view of its rows) its packed form from the cache file,
    building the file first when it is missing, stale or damaged; matrices stay unpacked when
    the cache is off or cannot be written (`Attached.reason`)."""
    if not named:
        return Attached()
    d = cache_dir()
    if d is None:
        return Attached(reason=f"packed-weight cache off ({ENV})")
    mats = [m for _, m in named]
    sources = [_source_entry(gguf, name, m) for name, m in named]
    ident = _identity(gguf, [e.source for e in sources])
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32]
    path = d / f"{Path(gguf.path).stem[:64]}-{digest}.pack"
    entries = _entries(path, ident)
    built = entries is None
    if entries is None:
        # the header (identity and entries) goes before the first matrix: grow its room until it fits
        room, entries = ALIGN, _layout(sources, mats, ALIGN)
        while 16 + len(_header(ident, entries)) > room:
            room += ALIGN
            entries = _layout(sources, mats, room)
        try:
            d.mkdir(parents=True, exist_ok=True)
            _write(path, _header(ident, entries), entries, mats)
        except OSError as err:
            return Attached(reason=f"packed-weight cache not written ({path}: {err.strerror or err})")
    try:
        mapped = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as err:
        return Attached(reason=f"packed-weight cache not mapped ({path}: {err})")
    total = 0
    for e, m in zip(entries, mats):
        m.packed = mapped[e.at : e.at + e.rows * e.cols].reshape(e.rows, e.cols).view(np.ndarray)
        total += m.packed.nbytes
    return Attached(total, str(path), built)
