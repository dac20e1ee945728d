"""numba's on-disk cache for the kernels, invalidated by a change to any file of this package.

numba stamps a cached function with a hash of its own source file only, but the kernels here
compile in each other's code (decode.py the unpackers of unpack.py and the LLVM intrinsics of
simd.py and rows.py; layer.py nearly everything, and the norm and rope loops of
core/model/kernels/ops.py): an edit there would leave stale machine code in the cache. The
locators below stamp every function defined in core/model/kernels/qmm with a hash of all of
core/model/kernels/qmm's sources and ops.py. Registered before any kernel is defined.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any

from numba.core import caching

_HERE = Path(__file__).resolve().parent


@lru_cache(maxsize=1)
def package_stamp() -> str:
    h = hashlib.sha256()
    for p in sorted(_HERE.glob("*.py")) + [_HERE.parent / "ops.py"]:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _ours(py_file: str) -> bool:
    try:
        return Path(py_file).resolve().parent == _HERE
    except OSError:
        return False


class _PackageStampMixin:
    def get_source_stamp(self) -> Any:
        return package_stamp()

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> Any:
        if not _ours(py_file):
            return None
        return super().from_function(py_func, py_file)  # type: ignore[misc]


class InTreeLocator(_PackageStampMixin, caching.InTreeCacheLocator):
    pass


class UserWideLocator(_PackageStampMixin, caching.UserWideCacheLocator):
    pass


class UserProvidedLocator(_PackageStampMixin, caching.UserProvidedCacheLocator):
    pass


def install() -> None:
    classes = caching.CacheImpl._locator_classes
    for cls in (UserWideLocator, InTreeLocator, UserProvidedLocator):  # final order: provided, in-tree, user-wide
        if cls not in classes:
            classes.insert(0, cls)


install()
