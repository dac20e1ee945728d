"""llamacli: a terminal-first LLM tool over a NumPy engine.

`llamacli.core` (the engine) and `llamacli.http` (the HTTP adapter) live in the top-level
folders `core/` and `http/`. An installed wheel maps them with setuptools' package-dir; in a
source checkout (a pyproject.toml beside this package) the repository root is appended to this
package's search path so `llamacli.core` resolves to `<root>/core` without installing.
"""

from __future__ import annotations

import os as _os

__version__ = "0.1.0"

_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_root, "pyproject.toml")) and _os.path.isdir(
    _os.path.join(_root, "core")
):
    if _root not in __path__:
        __path__.append(_root)
