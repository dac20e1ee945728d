"""The LLVM IR numba keeps beside each function loaded from its disk cache, parsed only when
a compilation needs it.

numba loads a cached function as its machine code plus its LLVM IR as bitcode, and parses
that bitcode into an in-memory module (`_shared_module`) that it keeps for as long as the
function lives, only to link the function into a later compilation that calls it. A server
compiles nothing after loading: the demo model's kernels and tokenizer held ~13 MiB of
parsed IR (2.7 MiB of bitcode). Installed once (by the kernels' package): a cache-loaded
library keeps the bitcode bytes and parses them again when, if ever, something links it.
"""

from __future__ import annotations

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


def install() -> None:
    CPUCodeLibrary._unserialize = classmethod(_unserialize)  # type: ignore[assignment,method-assign]
    CPUCodeLibrary._get_module_for_linking = _module_for_linking  # type: ignore[method-assign]


install()
