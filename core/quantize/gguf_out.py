"""Writing the quantized GGUF: the header llama-quantize writes, and an output file that appears
only when complete.

Header (GGUF v3, little-endian), as llama.cpp's gguf_set_kv + gguf_set_val_u32 produce it: the
input's key/value pairs copied byte for byte in their order, minus `split.*` keys, then
`general.quantization_version` = 2 and `general.file_type` = the llama_ftype (each removed from
its old place and appended, as gguf_set_val_* does); then one tensor-info record per tensor
(name, n_dims, ne, type, offset) and zero padding to the alignment. Each tensor's data is padded
with zeros to the alignment, the last one included.
"""

from __future__ import annotations

import os
import struct
import tempfile
from dataclasses import dataclass
from types import TracebackType
from typing import BinaryIO

import numpy as np
from gguf import GGUFValueType

from llamacli.core.errors import ModelLoadError

GGML_QNT_VERSION = 2
DEFAULT_ALIGNMENT = 32
_DROP_KEYS = ("split.no", "split.count", "split.tensors.count")
_SCALAR_SIZE: dict[int, int] = {
    GGUFValueType.UINT8: 1, GGUFValueType.INT8: 1, GGUFValueType.BOOL: 1,
    GGUFValueType.UINT16: 2, GGUFValueType.INT16: 2,
    GGUFValueType.UINT32: 4, GGUFValueType.INT32: 4, GGUFValueType.FLOAT32: 4,
    GGUFValueType.UINT64: 8, GGUFValueType.INT64: 8, GGUFValueType.FLOAT64: 8,
}


def raw_kv_pairs(data: np.ndarray, path: str) -> list[tuple[str, bytes]]:
    """(key, the entry's bytes: key string + type + value) of every metadata pair of a GGUF
    file, in file order. `data` is the file's bytes (a memmap). Only little-endian files."""
    buf = data.data  # the file bytes as a memoryview (no copy)
    (version,) = struct.unpack_from("<I", buf, 4)
    if version & 0xFFFF == 0:
        raise ModelLoadError(path, "big-endian GGUF files cannot be quantized")
    (n_kv,) = struct.unpack_from("<Q", buf, 16)
    pos = 24
    out: list[tuple[str, bytes]] = []

    def string_end(p: int) -> int:
        (n,) = struct.unpack_from("<Q", buf, p)
        return p + 8 + n

    def value_end(p: int, vtype: int) -> int:
        if vtype in _SCALAR_SIZE:
            return p + _SCALAR_SIZE[vtype]
        if vtype == GGUFValueType.STRING:
            return string_end(p)
        if vtype == GGUFValueType.ARRAY:
            sub, count = struct.unpack_from("<IQ", buf, p)
            p += 12
            if sub in _SCALAR_SIZE:
                return p + count * _SCALAR_SIZE[sub]
            for _ in range(count):
                p = value_end(p, sub)
            return p
        raise ModelLoadError(path, f"unknown GGUF value type {vtype}")

    for _ in range(n_kv):
        start = pos
        key_end = string_end(pos)
        key = bytes(buf[pos + 8 : key_end]).decode("utf-8", errors="replace")
        (vtype,) = struct.unpack_from("<I", buf, key_end)
        pos = value_end(key_end + 4, vtype)
        out.append((key, bytes(buf[start:pos])))
    return out


def _gguf_string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def u32_kv(key: str, value: int) -> bytes:
    """A metadata entry: key, type UINT32, value."""
    return _gguf_string(key) + struct.pack("<II", GGUFValueType.UINT32, value)


def str_kv(key: str, value: str) -> bytes:
    """A metadata entry: key, type STRING, value."""
    return _gguf_string(key) + struct.pack("<I", GGUFValueType.STRING) + _gguf_string(value)


def str_array_kv(key: str, values: list[str]) -> bytes:
    """A metadata entry: key, type ARRAY of STRING, the values."""
    head = _gguf_string(key) + struct.pack("<IIQ", GGUFValueType.ARRAY, GGUFValueType.STRING, len(values))
    return head + b"".join(_gguf_string(v) for v in values)


@dataclass(frozen=True)
class TensorRecord:
    """One tensor as it will be written: numpy-order shape, ggml type id, data size in bytes."""

    name: str
    shape: tuple[int, ...]
    qtype: int
    nbytes: int


def pad(n: int, align: int) -> int:
    return (n + align - 1) // align * align


def build_header(
    kv: list[tuple[str, bytes]], file_type: int, tensors: list[TensorRecord], align: int,
    extra: list[tuple[str, bytes]] | None = None,
) -> bytes:
    """The complete metadata block (padded to `align`) for the given tensors, in order. `extra`
    entries are set after the file type, each removing its key from where it was before."""
    pairs = [(k, raw) for k, raw in kv if k not in _DROP_KEYS]
    for key, raw in [
        ("general.quantization_version", u32_kv("general.quantization_version", GGML_QNT_VERSION)),
        ("general.file_type", u32_kv("general.file_type", file_type)),
        *(extra or []),
    ]:
        pairs = [(k, r) for k, r in pairs if k != key] + [(key, raw)]
    return gguf_header([raw for _, raw in pairs], tensors, align)


def gguf_header(entries: list[bytes], tensors: list[TensorRecord], align: int = DEFAULT_ALIGNMENT) -> bytes:
    """GGUF v3 header as ggml's gguf_write_to_file writes it: magic, counts, the metadata
    entries (encoded, in order), the tensor records (data offsets from 0, each tensor padded
    to `align`), zeros up to `align`."""
    parts = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(entries)), *entries]
    offset = 0
    for t in tensors:
        ne = list(reversed(t.shape))
        while len(ne) > 1 and ne[-1] == 1:  # ggml_n_dims: trailing 1s are not written
            ne.pop()
        parts.append(_gguf_string(t.name))
        parts.append(struct.pack(f"<I{len(ne)}QIQ", len(ne), *ne, t.qtype, offset))
        offset += pad(t.nbytes, align)
    head = b"".join(parts)
    return head + bytes(pad(len(head), align) - len(head))


class AtomicOutput:
    """A file written under a temporary name in the destination's directory and renamed over
    the destination only when the `with` block completes; on any error (or interrupt) the
    temporary file is removed and the destination is left as it was."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.tmp_path = ""
        self.file: BinaryIO | None = None

    def __enter__(self) -> AtomicOutput:  # noqa: PYI034 (final class)
        directory = os.path.dirname(self.path)
        fd, self.tmp_path = tempfile.mkstemp(prefix=f".{os.path.basename(self.path)}.", suffix=".part", dir=directory)
        self.file = os.fdopen(fd, "wb")
        return self

    def write(self, data: bytes | memoryview | np.ndarray) -> None:
        assert self.file is not None
        self.file.write(data.data if isinstance(data, np.ndarray) else data)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        assert self.file is not None
        try:
            if exc_type is None:
                self.file.flush()
                os.fsync(self.file.fileno())
            self.file.close()
        except BaseException:
            self._discard()
            raise
        if exc_type is not None:
            self._discard()
            return
        mode = 0o666 & ~_umask()
        os.chmod(self.tmp_path, mode)  # mkstemp makes 0600; give the file ordinary permissions
        try:
            os.replace(self.tmp_path, self.path)
        except BaseException:
            self._discard()
            raise

    def _discard(self) -> None:
        try:
            if self.file is not None and not self.file.closed:
                self.file.close()
        except OSError:
            pass
        try:
            os.unlink(self.tmp_path)
        except FileNotFoundError:
            pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
