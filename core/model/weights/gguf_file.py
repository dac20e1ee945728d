"""GGUF files: header, metadata and tensor directory, with the tensor data memory-mapped.

The layout follows the GGUF spec (v2 and v3; gguf-py's constants name the value and tensor
types). We parse the header ourselves instead of with `gguf.GGUFReader`: the reader builds a
Python object per array element, which costs ~10 s on a 262k-token vocabulary, while a
direct parse of the same bytes takes a fraction of a second.

A model split in parts (`NAME-00001-of-00003.gguf`, as llama-gguf-split and the hub write big
models) is opened from its first part, as llama.cpp does: the other parts are found beside it by
name, each is mapped, and `tensors` spans all of them (`TensorInfo.split` says which part holds
a tensor). `metadata` is the first part's.

Every problem with the file raises `ModelLoadError(path, what is wrong)`.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.kernels import ggml_types  # noqa: F401  (tensor type 42, Q2_0)
from llamacli.core.string_array import StringArray, utf8_string_array

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
KEY_SPLIT_NO = "split.no"
KEY_SPLIT_COUNT = "split.count"
KEY_SPLIT_TENSORS = "split.tensors.count"
STRING_ARRAY_MIN = 1024  # string arrays this long are read as a StringArray (vocabularies, merges)
_SPLIT_NAME = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


def split_path(prefix: str, index: int, n_split: int) -> str:
    """llama_split_path: PREFIX-00001-of-00003.gguf for part index 0 of 3."""
    return f"{prefix}-{index + 1:05d}-of-{n_split:05d}.gguf"

# GGUF scalar value types -> (struct format, numpy dtype)
_SCALARS: dict[int, tuple[str, str]] = {
    GGUFValueType.UINT8: ("B", "u1"),
    GGUFValueType.INT8: ("b", "i1"),
    GGUFValueType.UINT16: ("H", "u2"),
    GGUFValueType.INT16: ("h", "i2"),
    GGUFValueType.UINT32: ("I", "u4"),
    GGUFValueType.INT32: ("i", "i4"),
    GGUFValueType.FLOAT32: ("f", "f4"),
    GGUFValueType.BOOL: ("?", "u1"),
    GGUFValueType.UINT64: ("Q", "u8"),
    GGUFValueType.INT64: ("q", "i8"),
    GGUFValueType.FLOAT64: ("d", "f8"),
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's directory entry.

    `shape` is in NumPy order (row-major, last axis contiguous): GGUF stores ggml's `ne`
    (fastest axis first), so a weight with ne = (n_in, n_out) has shape (n_out, n_in).
    """

    name: str
    shape: tuple[int, ...]
    qtype: GGMLQuantizationType
    offset: int  # absolute byte offset in the file (in its part, for a split model)
    nbytes: int
    split: int = 0  # the part of a split model that holds the tensor

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class _Cursor:
    """Bounds-checked little/big-endian reader over the mapped header bytes."""

    def __init__(self, buf: memoryview, path: str, endian: Literal["<", ">"]) -> None:
        self.buf = buf
        self.pos = 0
        self.path = path
        self.endian = endian

    def _need(self, n: int) -> None:
        if self.pos + n > len(self.buf):
            raise ModelLoadError(
                self.path, f"truncated file: header needs {self.pos + n} bytes, file has {len(self.buf)}"
            )

    def scalar(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        self._need(size)
        (v,) = struct.unpack_from(self.endian + fmt, self.buf, self.pos)
        self.pos += size
        return v

    def string(self) -> str:
        n = self.scalar("Q")
        self._need(n)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def string_array(self, count: int) -> list[str] | StringArray:
        """A short array as a list; a long one (a vocabulary, merges) as one UTF-8 buffer
        (core/string_array.py: no Python object per string). Both decode with "replace"."""
        # Each element: uint64 length + bytes. A tight loop over unpack_from is the fast path.
        data = bytearray()
        start = np.zeros(count + 1, np.int64)
        buf, pos, end = self.buf, self.pos, len(self.buf)
        unpack = struct.Struct(self.endian + "Q").unpack_from
        for i in range(count):
            if pos + 8 > end:
                raise ModelLoadError(self.path, "truncated file inside a string array")
            (n,) = unpack(buf, pos)
            pos += 8
            if pos + n > end:
                raise ModelLoadError(self.path, "truncated file inside a string array")
            data += buf[pos : pos + n]
            start[i + 1] = len(data)
            pos += n
        self.pos = pos
        strings = utf8_string_array(np.frombuffer(data, np.uint8), start)
        return strings if count >= STRING_ARRAY_MIN else list(strings)

    def numeric_array(self, vtype: int, count: int) -> np.ndarray:
        dt = np.dtype(_SCALARS[vtype][1]).newbyteorder(self.endian)
        size = dt.itemsize * count
        self._need(size)
        arr = np.frombuffer(self.buf, dtype=dt, count=count, offset=self.pos).copy()
        self.pos += size
        if vtype == GGUFValueType.BOOL:
            return arr.astype(bool)
        return arr.astype(dt.newbyteorder("="))

    def value(self, vtype: int) -> Any:
        if vtype == GGUFValueType.STRING:
            return self.string()
        if vtype == GGUFValueType.ARRAY:
            sub = self.scalar("I")
            count = self.scalar("Q")
            if sub == GGUFValueType.STRING:
                return self.string_array(count)
            if sub == GGUFValueType.ARRAY:
                return [self.value(GGUFValueType.ARRAY) for _ in range(count)]
            if sub not in _SCALARS:
                raise ModelLoadError(self.path, f"unknown GGUF array element type {sub}")
            return self.numeric_array(sub, count)
        if vtype not in _SCALARS:
            raise ModelLoadError(self.path, f"unknown GGUF value type {vtype}")
        v = self.scalar(_SCALARS[vtype][0])
        return bool(v) if vtype == GGUFValueType.BOOL else v


class GGUFFile:
    """A parsed GGUF file: `metadata`, `tensors` (name -> TensorInfo) and mapped data."""

    def __init__(self, path: str | os.PathLike[str], open_parts: bool = True) -> None:
        """Parse and map `path`; of a split model's first part, also the other parts (unless
        open_parts is False: then only this part)."""
        self.path = str(path)
        if not os.path.exists(self.path):
            raise ModelLoadError(self.path, "no such file")
        if os.path.isdir(self.path):
            raise ModelLoadError(self.path, "is a directory, not a GGUF file")
        if os.path.getsize(self.path) < 24:
            raise ModelLoadError(self.path, f"not a GGUF file (only {os.path.getsize(self.path)} bytes)")
        try:
            self.data = np.memmap(self.path, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as e:
            raise ModelLoadError(self.path, f"cannot map file: {e}") from None
        self.file_size = int(self.data.shape[0])
        if self.file_size < 24 or bytes(self.data[:4]) != GGUF_MAGIC:
            raise ModelLoadError(self.path, "not a GGUF file (bad magic)")
        self.metadata: dict[str, Any] = {}
        self.tensors: dict[str, TensorInfo] = {}
        self._parse()
        release_pages(self.data, 0, self.data_offset)  # the header is parsed (and copied) by now
        self.maps: list[np.memmap] = [self.data]  # the mapping of each part
        self.paths: list[str] = [self.path]
        n_split = int(self.metadata.get(KEY_SPLIT_COUNT, 0) or 0)
        if n_split > 1 and open_parts:
            self._open_parts(n_split)

    def _parse(self) -> None:
        buf = self.data.data  # the mapping as a memoryview (no copy)
        (version,) = struct.unpack_from("<I", buf, 4)
        endian: Literal["<", ">"] = "<"
        if version & 0xFFFF == 0 and version != 0:  # a big-endian file read little-endian
            endian = ">"
            (version,) = struct.unpack_from(">I", buf, 4)
        if version == 1:
            raise ModelLoadError(self.path, "GGUF v1 is not supported (convert it to v3)")
        if version not in (2, 3):
            raise ModelLoadError(self.path, f"unsupported GGUF version {version}")
        self.version = version
        cur = _Cursor(buf, self.path, endian)
        cur.pos = 8
        n_tensors = cur.scalar("Q")
        n_kv = cur.scalar("Q")
        if n_tensors > 1 << 24 or n_kv > 1 << 24:
            raise ModelLoadError(self.path, f"implausible header counts ({n_tensors} tensors, {n_kv} keys)")
        for _ in range(n_kv):
            key = cur.string()
            vtype = cur.scalar("I")
            self.metadata[key] = cur.value(vtype)
        infos: list[tuple[str, tuple[int, ...], int, int]] = []
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.scalar("I")
            if n_dims > 4:
                raise ModelLoadError(self.path, f"tensor {name!r} has {n_dims} dimensions (max 4)")
            ne = tuple(cur.scalar("Q") for _ in range(n_dims))
            raw_type = cur.scalar("I")
            offset = cur.scalar("Q")
            infos.append((name, ne, raw_type, offset))
        align = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        if align <= 0 or align & (align - 1):
            raise ModelLoadError(self.path, f"general.alignment {align} is not a power of two")
        data_start = (cur.pos + align - 1) // align * align
        self.data_offset = data_start
        for name, ne, raw_type, offset in infos:
            self.tensors[name] = self._tensor_info(name, ne, raw_type, offset, data_start, align)

    def _tensor_info(
        self, name: str, ne: tuple[int, ...], raw_type: int, offset: int, data_start: int, align: int
    ) -> TensorInfo:
        try:
            qtype = GGMLQuantizationType(raw_type)
        except ValueError:
            raise ModelLoadError(self.path, f"tensor {name!r} has unknown ggml type {raw_type}") from None
        block, type_size = GGML_QUANT_SIZES[qtype]
        if any(d <= 0 for d in ne):
            raise ModelLoadError(self.path, f"tensor {name!r} has a non-positive dimension {ne}")
        if ne and ne[0] % block:
            raise ModelLoadError(
                self.path, f"tensor {name!r}: row length {ne[0]} is not a multiple of {qtype.name}'s block {block}"
            )
        n = 1
        for d in ne:
            n *= d
        nbytes = n // block * type_size
        if offset % align:
            raise ModelLoadError(self.path, f"tensor {name!r}: offset {offset} is not aligned to {align}")
        start = data_start + offset
        if start + nbytes > self.file_size:
            raise ModelLoadError(
                self.path,
                f"truncated file: tensor {name!r} needs bytes up to {start + nbytes}, file has {self.file_size}",
            )
        return TensorInfo(name, tuple(reversed(ne)), qtype, start, nbytes)

    def _open_parts(self, n_split: int) -> None:
        """Map parts 2..n of a split model (llama_model_loader's checks and messages)."""
        idx = int(self.metadata.get(KEY_SPLIT_NO, 0))
        if idx != 0:
            raise ModelLoadError(
                self.path, f"illegal split file idx: {idx}, model must be loaded with the first split ({split_path('PREFIX', 0, n_split)})"
            )
        m = _SPLIT_NAME.search(self.path)
        if m is None or int(m.group(1)) != 1 or int(m.group(2)) != n_split:
            raise ModelLoadError(self.path, f"invalid split file name: a split model's first part ends with -00001-of-{n_split:05d}.gguf")
        prefix = self.path[: m.start()]
        for i in range(1, n_split):
            path = split_path(prefix, i, n_split)
            try:
                part = GGUFFile(path, open_parts=False)
            except ModelLoadError as e:
                raise ModelLoadError(self.path, f"failed to load GGUF split from {path}: {e}") from None
            got = part.metadata.get(KEY_SPLIT_NO)
            if got is None:
                raise ModelLoadError(self.path, f"missing key {KEY_SPLIT_NO} in GGUF split {path}")
            if int(got) != i:
                raise ModelLoadError(self.path, f"invalid split file idx: {int(got)} (file: {path}), expected {i}")
            for name, t in part.tensors.items():
                if name in self.tensors:
                    raise ModelLoadError(self.path, f"invalid model: tensor {name!r} is duplicated")
                self.tensors[name] = TensorInfo(t.name, t.shape, t.qtype, t.offset, t.nbytes, split=i)
            self.maps.append(part.data)
            self.paths.append(path)
            self.file_size += part.file_size
        want = int(self.metadata.get(KEY_SPLIT_TENSORS, len(self.tensors)))
        if want != len(self.tensors):
            raise ModelLoadError(self.path, f"corrupted model: {want} tensors expected but {len(self.tensors)} found")

    def mapping(self, name: str) -> np.memmap:
        """The memory map of the part that holds tensor `name` (its offset is into this map)."""
        return self.maps[self.tensor(name).split]

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes as a uint8 view into the mapping (no copy)."""
        t = self.tensor(name)
        return self.maps[t.split][t.offset : t.offset + t.nbytes]

    def tensor(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelLoadError(self.path, f"missing tensor {name!r}") from None

    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise ModelLoadError(self.path, "no general.architecture key")
        return arch


def release_pages(m: np.memmap, start: int, end: int) -> None:
    """Drop the pages of mapping `m` that lie wholly inside bytes [start, end) from this process
    (madvise DONTNEED: a file's pages come back from the page cache when read again)."""
    mm = getattr(m, "_mmap", None)  # np.memmap's mmap.mmap (the whole part)
    page = mmap.PAGESIZE
    a, b = -(-start // page) * page, end // page * page
    if mm is not None and hasattr(mm, "madvise") and b > a:
        try:
            mm.madvise(mmap.MADV_DONTNEED, a, b - a)
        except (OSError, ValueError):
            pass  # only memory the kernel would have reclaimed anyway


def read_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Only the metadata (key -> value) of a GGUF file; tensor data is not touched."""
    return GGUFFile(path).metadata
