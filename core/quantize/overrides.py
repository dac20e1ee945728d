"""llama-quantize's command-line overrides: `--override-kv KEY=TYPE:VALUE` (common's
string_parse_kv_override), `--tensor-type NAME=TYPE` (its parse_tensor_type), `--prune-layers
L0,L1,...` (parse_layer_prune), and the renaming of layers that pruning implies (llama-quant.cpp
remap_layer / remap_imatrix).

An override is written as llama_model_quantize writes it: `int` as UINT32 of the absolute value
(llama.cpp's choice, see its PR 14182), `float` as FLOAT32, `bool`, `str` (at most 127 bytes);
gguf_set_val_* removes the key from its old place and appends it.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType

from llamacli.core.errors import InvalidRequest

_BLK = re.compile(r"blk\.(\d+)\.")


@dataclass(frozen=True)
class KVOverride:
    """One metadata override: key, kind ("int", "float", "bool", "str") and value."""

    key: str
    kind: str
    value: int | float | bool | str

    def entry(self) -> bytes:
        """The GGUF metadata entry llama_model_quantize writes for it."""
        key = self.key.encode("utf-8")
        head = struct.pack("<Q", len(key)) + key
        if self.kind == "int":
            return head + struct.pack("<II", GGUFValueType.UINT32, abs(int(self.value)) & 0xFFFFFFFF)
        if self.kind == "float":
            return head + struct.pack("<If", GGUFValueType.FLOAT32, float(self.value))
        if self.kind == "bool":
            return head + struct.pack("<IB", GGUFValueType.BOOL, 1 if self.value else 0)
        data = str(self.value).encode("utf-8")
        return head + struct.pack("<IQ", GGUFValueType.STRING, len(data)) + data

    @property
    def metadata_value(self) -> int | float | bool | str:
        """The value as the model loader then reads it (an int as its stored UINT32)."""
        return abs(int(self.value)) & 0xFFFFFFFF if self.kind == "int" else self.value


def _c_atol(s: str) -> int:
    """std::atol: leading whitespace, optional sign, digits; 0 when there are none."""
    m = re.match(r"\s*([+-]?\d+)", s)
    return int(m.group(1)) if m else 0


def _c_atof(s: str) -> float:
    """std::atof on the forms people write (decimal, exponent, inf/nan); 0.0 otherwise."""
    m = re.match(r"\s*([+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan))", s, re.IGNORECASE)
    return float(m.group(1)) if m else 0.0


def parse_kv_override(text: str) -> KVOverride:
    """KEY=int:N, KEY=float:X, KEY=bool:true|false or KEY=str:TEXT, as llama.cpp parses them."""
    key, sep, rest = text.partition("=")
    if not sep or len(key.encode("utf-8")) >= 128:
        raise InvalidRequest(f"--override-kv: malformed KV override {text!r} (KEY=TYPE:VALUE, TYPE int, float, bool or str)")
    if rest.startswith("int:"):
        return KVOverride(key, "int", _c_atol(rest[4:]))
    if rest.startswith("float:"):
        return KVOverride(key, "float", _c_atof(rest[6:]))
    if rest.startswith("bool:"):
        if rest[5:] not in ("true", "false"):
            raise InvalidRequest(f"--override-kv: invalid boolean value for KV override {text!r} (true or false)")
        return KVOverride(key, "bool", rest[5:] == "true")
    if rest.startswith("str:"):
        if len(rest[4:].encode("utf-8")) > 127:
            raise InvalidRequest(f"--override-kv: malformed KV override {text!r}, value cannot exceed 127 chars")
        return KVOverride(key, "str", rest[4:])
    raise InvalidRequest(f"--override-kv: invalid type for KV override {text!r} (int, float, bool or str)")


def parse_tensor_type_override(text: str, option: str = "--tensor-type") -> tuple[str, QT]:
    """NAME=TYPE: NAME a regular expression searched in tensor names (lower-cased, as llama.cpp
    does), TYPE any ggml type name (any case)."""
    name, sep, type_name = text.partition("=")
    if not sep:
        raise InvalidRequest(f"{option}: malformed tensor type {text!r} (NAME=TYPE, e.g. attn_q=q8_0)")
    if not name:
        raise InvalidRequest(f"{option}: missing tensor name in {text!r}")
    if not type_name:
        raise InvalidRequest(f"{option}: missing quantization type in {text!r}")
    qtype = next((t for t in QT if t.name.lower() == type_name.lower()), None)
    if qtype is None:
        raise InvalidRequest(f"{option}: invalid quantization type {type_name!r}")
    try:
        re.compile(name.lower())
    except re.error as e:
        raise InvalidRequest(f"{option}: invalid regular expression {name!r}: {e}") from None
    return name.lower(), qtype


def read_tensor_type_file(path: str) -> list[tuple[str, QT]]:
    """--tensor-type-file: NAME=TYPE entries separated by spaces or newlines."""
    try:
        with open(path, encoding="utf-8") as f:
            words = f.read().split()
    except OSError as e:
        raise InvalidRequest(f"--tensor-type-file: failed to open file {path!r}: {e.strerror or e}") from None
    return [parse_tensor_type_override(w, "--tensor-type-file") for w in words]


def parse_prune_layers(text: str) -> tuple[int, ...]:
    """L0,L1,...: non-negative layer numbers, sorted and without duplicates."""
    ids: list[int] = []
    for part in text.split(","):
        m = re.match(r"\s*([+-]?\d+)", part)
        n = int(m.group(1)) if m else -1
        if n < 0:
            raise InvalidRequest(f"--prune-layers: invalid layer id {part!r} (comma-separated layer numbers)")
        ids.append(n)
    return tuple(sorted(set(ids)))


class LayerRemap:
    """remap_layer: with layers pruned, every other `blk.N.` is renumbered to close the gaps,
    decided in the order tensors are met (llama-quantize's weight order)."""

    def __init__(self, prune: tuple[int, ...]) -> None:
        self.prune = prune
        self.mapped: dict[int, str] = {}
        self.next_id = 0

    def rename(self, name: str) -> str:
        """The tensor's new name, or "" if its layer is pruned."""
        if not self.prune:
            return name
        m = _BLK.search(name)
        if m is None:
            return name
        blk = int(m.group(1))
        if blk not in self.mapped:
            if blk in self.prune:
                self.mapped[blk] = ""
            elif blk < self.prune[0]:
                self.mapped[blk] = str(blk)
                self.next_id = blk + 1
            else:
                self.mapped[blk] = str(self.next_id)
                self.next_id += 1
        new = self.mapped[blk]
        return new and name[: m.start(1)] + new + name[m.end(1) :]
