"""The LLVM IR numba keeps beside each function loaded from its disk cache, parsed only when
a compilation needs it.

numba loads a cached function as its machine code plus its LLVM IR as bitcode, and parses
that bitcode into an in-memory module (`_shared_module`) that it keeps for as long as the
function lives, only to link the function into a later compilation that calls it. A server
compiles nothing after loading: the demo model's kernels and tokenizer held ~13 MiB of
parsed IR (2.7 MiB of bitcode). Installed once (by the kernels' package): a cache-loaded
library keeps the bitcode bytes and parses them again when, if ever, something links it.

`release_llvm_pages`: LLVM's own code (libllvmlite.so, 80 MiB of machine code and 67 MiB of
read-only data) runs when numba starts and when it compiles; its static initialisers, spread
over the whole library, leave ~65 MiB of its pages mapped into the process. A server calls it
once its kernels are loaded: the clean pages of those segments leave this process (they stay
in the page cache, shared, and come back on a fault if a compilation runs LLVM again).
"""

from __future__ import annotations

import ctypes
from typing import Any

import llvmlite.binding as ll
from numba.core.codegen import CPUCodeLibrary

_unserialize_cached = CPUCodeLibrary._unserialize.__func__  # type: ignore[attr-defined]
_module_for_linking_parsed = CPUCodeLibrary._get_module_for_linking


def _unserialize(cls: type[CPUCodeLibrary], codegen: Any, state: tuple[str, str, Any]) -> CPUCodeLibrary:
    library = _unserialize_cached(cls, codegen, state)
    _, kind, data = state
    if kind == "object":  # data: (machine code, bitcode); the symbols are loaded by now
        library._shared_bitcode = data[1]
        library._shared_module = None
    return library


def _module_for_linking(self: CPUCodeLibrary) -> Any:
    bitcode = getattr(self, "_shared_bitcode", None)
    if self._shared_module is None and bitcode is not None:
        self._shared_module = ll.parse_bitcode(bitcode)
    return _module_for_linking_parsed(self)


_MADV_DONTNEED = 4
_LLVM_LIBRARY = "libllvmlite"


def release_llvm_pages() -> int:
    """Drop the mapped pages of libllvmlite's segments that hold no private copy (its code and
    read-only data; not the relocated ones) from this process (Linux; elsewhere nothing).
    Returns how many segments were released."""
    try:
        with open("/proc/self/smaps") as f:
            lines = f.read().splitlines()
        madvise = ctypes.CDLL(None).madvise
    except (OSError, AttributeError):
        return 0
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    segments: list[list[int]] = []  # [start, end, private (copied-on-write) kB]
    current: list[int] | None = None
    for line in lines:
        parts = line.split()
        if parts and "-" in parts[0] and not parts[0].endswith(":"):  # a mapping's first line
            current = None
            if len(parts) > 5 and _LLVM_LIBRARY in parts[5] and parts[1] in ("r-xp", "r--p"):
                a, b = (int(x, 16) for x in parts[0].split("-"))
                current = [a, b, -1]
                segments.append(current)
        elif current is not None and parts and parts[0] == "Anonymous:":
            current[2] = int(parts[1])
    done = 0
    for a, b, private in segments:
        if private == 0:  # every page is the file's: dropping it loses nothing
            done += madvise(a, b - a, _MADV_DONTNEED) == 0
    return done


def install() -> None:
    CPUCodeLibrary._unserialize = classmethod(_unserialize)  # type: ignore[assignment,method-assign]
    CPUCodeLibrary._get_module_for_linking = _module_for_linking  # type: ignore[method-assign]


install()
