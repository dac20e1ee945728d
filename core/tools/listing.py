"""The entries under a directory, for the search tools: files from `git ls-files` when the
directory is in a git work tree (so .gitignore applies), else (and for directories) a walk that
reports but never enters the usual huge folders (.git, node_modules, build, ...), as
llama-server lists them. Links are neither listed nor followed (the sandbox refuses them).

Entries are '/'-separated paths relative to the base, sorted. A listing has a time budget; one
that ran out (or met an unreadable folder) says so with `truncated`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from llamacli.core.tools.process import run_process

BUDGET_S = 15.0  # one listing, git and walk together
GIT_MAX_OUTPUT = 8 * 1024 * 1024
JUNK_DIRS = frozenset({
    ".git", ".svn", ".hg", "node_modules", "__pycache__", ".venv", "venv", "dist", "build", "target", ".cache",
    ".idea", ".vscode",
})
# git reads hooks and helpers from the repository's own config: none of them may run here
_GIT_SAFE = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.untrackedCache=false")
KINDS = ("file", "dir", "all")


@dataclass(frozen=True)
class Entry:
    rel: str
    is_dir: bool = False


@dataclass
class Listing:
    entries: list[Entry] = field(default_factory=list)
    truncated: bool = False


def depth(rel: str) -> int:
    """'a/b/c' is 3 deep."""
    return rel.count("/") + 1


def list_entries(base: Path, max_depth: int = 0, kind: str = "file") -> Listing:
    """What is under `base` (an existing directory): files, directories ("dir") or both ("all");
    max_depth 0 is unlimited, 1 the direct children only."""
    deadline = time.monotonic() + BUDGET_S
    if kind == "file":
        files = _git_files(base, max_depth)
        if files is not None:
            return Listing(files)
    return _walk(base, max_depth, kind, deadline)


def _git_files(base: Path, max_depth: int) -> list[Entry] | None:
    """Tracked and untracked-but-not-ignored files, or None outside a work tree (or no git)."""
    res = run_process(
        ["git", *_GIT_SAFE, "-C", str(base), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=base, timeout=BUDGET_S, max_output=GIT_MAX_OUTPUT, merge_stderr=False,
    )
    if res.exit_code != 0 or res.timed_out:
        return None
    out = []
    for rel in res.output.split("\0"):
        if not rel or (max_depth > 0 and depth(rel) > max_depth):
            continue
        p = base / rel
        if p.is_file() and not _through_link(base, rel):
            out.append(Entry(rel))
    return sorted(set(out), key=lambda e: e.rel)


def _through_link(base: Path, rel: str) -> bool:
    cur = base
    for part in rel.split("/"):
        cur = cur / part
        if cur.is_symlink():
            return True
    return False


def _walk(base: Path, max_depth: int, kind: str, deadline: float) -> Listing:
    out = Listing()
    stack: list[tuple[Path, str, int]] = [(base, "", 0)]
    while stack:
        folder, rel_dir, level = stack.pop()
        try:
            with os.scandir(folder) as it:
                items = list(it)
        except OSError:
            out.truncated = True
            continue
        for item in items:
            if time.monotonic() >= deadline:
                out.truncated = True
                out.entries.sort(key=lambda e: e.rel)
                return out
            rel = f"{rel_dir}{item.name}"
            try:
                if item.is_symlink():
                    continue
                if item.is_dir(follow_symlinks=False):
                    if kind in ("dir", "all"):
                        out.entries.append(Entry(rel, True))
                    if item.name.lower() not in JUNK_DIRS and (max_depth == 0 or level + 1 < max_depth):
                        stack.append((Path(item.path), rel + "/", level + 1))
                elif item.is_file(follow_symlinks=False) and kind in ("file", "all"):
                    out.entries.append(Entry(rel))
            except OSError:
                continue
    out.entries.sort(key=lambda e: e.rel)
    return out
