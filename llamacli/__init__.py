"""llamacli: a terminal-first LLM tool over a NumPy engine.

`llamacli.core` (the engine) and `llamacli.http` (the HTTP adapter) are the top-level folders
`core/` and `http/`, reached through the symbolic links `llamacli/core` and `llamacli/http`
(pyproject.toml says why).
"""

from __future__ import annotations

__version__ = "0.1.0"
