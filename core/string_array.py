"""Many strings in one UTF-8 buffer: a GGUF string array (a vocabulary's 262144 tokens) as two
NumPy arrays rather than one Python object per string (Gemma 3's token list: 21.6 MiB of `str`
objects, 3.1 MiB here). A read-only `Sequence[str]`: item i is decoded when it is read.

    a = StringArray.of(["a", "bc"])       # or StringArray(data, start) over existing arrays
    a[1] == "bc"; a.encoded(1) == b"bc"; list(a) == ["a", "bc"]; a == ["a", "bc"]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import numpy as np


class StringArray(Sequence[str]):
    """Strings i = data[start[i]:start[i + 1]] decoded as UTF-8 (every one valid UTF-8)."""

    __slots__ = ("data", "start", "_view")
    __hash__ = None  # type: ignore[assignment]  # a sequence compared by value, as a list

    def __init__(self, data: np.ndarray, start: np.ndarray) -> None:
        self.data = data.view()  # uint8 [total bytes]: the strings' UTF-8, one after another
        self.data.flags.writeable = False  # as bytes are (numba types the kernels' tables so)
        self.start = start  # int64 [n + 1]: where each string starts, then the end
        self._view = self.data.data

    @classmethod
    def of(cls, strings: Iterable[str]) -> StringArray:
        encoded = [s.encode("utf-8") for s in strings]
        start = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum([len(b) for b in encoded], out=start[1:])
        return cls(np.frombuffer(b"".join(encoded), np.uint8), start)

    def __len__(self) -> int:
        return len(self.start) - 1

    def encoded(self, i: int) -> bytes:
        """String i's UTF-8."""
        s, e = self._span(i)
        return bytes(self._view[s:e])

    def _span(self, i: int) -> tuple[int, int]:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("string index out of range")
        return int(self.start[i]), int(self.start[i + 1])

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        s, e = self._span(i)
        return str(self._view[s:e], "utf-8")

    def __iter__(self) -> Iterator[str]:
        view, bounds = self._view, self.start.tolist()
        for s, e in zip(bounds, bounds[1:]):
            yield str(view[s:e], "utf-8")

    def lengths(self) -> np.ndarray:
        """Each string's length in bytes."""
        return np.diff(self.start)

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, StringArray):
            return len(self) == len(other) and np.array_equal(self.lengths(), other.lengths()) and np.array_equal(self.data, other.data)
        if isinstance(other, (list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        head = ", ".join(repr(s) for s in self[:3])
        return f"StringArray([{head}{', ...' if len(self) > 3 else ''}], {len(self)} strings)"


def utf8_string_array(data: np.ndarray, start: np.ndarray) -> StringArray:
    """The strings data[start[i]:start[i + 1]] as they decode with errors="replace": the same
    arrays when every one is valid UTF-8 (the buffer decodes and no string starts inside a
    character, so each is whole characters), else the strings decoded one by one."""
    text_starts = start[:-1][np.diff(start) > 0]
    try:
        str(data.data, "utf-8")
        whole = not np.any((data[text_starts] & 0xC0) == 0x80)
    except UnicodeDecodeError:
        whole = False
    if whole:
        return StringArray(data, start)
    view, bounds = data.data, start.tolist()
    return StringArray.of(str(view[s:e], "utf-8", "replace") for s, e in zip(bounds, bounds[1:]))
