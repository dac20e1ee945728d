"""The one directory tools may touch: the server's (or the chat's) working directory.

Every path a tool is given goes through `Sandbox.resolve`: it must be relative (no leading `/`
or `~`), must not climb with `..`, and no part of it that exists may be a symbolic link, so that
what a path names is always inside the root, whatever the links in it point to. Stricter than
llama-server, which resolves any path on the host. Write tools also refuse a `.git` component:
git runs hooks and helpers from a repository's config (`git ls-files` is how the searches list
files), so writing there would turn a write permission into an exec one.

A refused path is the call's result (`{"error": ...}`), not an HTTP error: the model reads why
and can try again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath


class PathRefused(Exception):
    """A path outside the sandbox, or one that goes through a link."""


@dataclass(frozen=True)
class Sandbox:
    root: Path  # absolute, with no links in it (os.path.realpath)

    @classmethod
    def at(cls, directory: str | os.PathLike[str]) -> Sandbox:
        return cls(Path(os.path.realpath(directory)))

    def resolve(self, path: str, cwd: Path, *, writing: bool = False) -> Path:
        """The absolute path `path` names from `cwd` (a directory inside the root), or PathRefused."""
        if not isinstance(path, str) or not path or "\x00" in path:
            raise PathRefused(f"invalid path {path!r}")
        if path.startswith("~"):
            raise PathRefused(f"{path}: paths starting with ~ are refused; give a path relative to the working directory")
        if os.path.isabs(path):
            raise PathRefused(f"{path}: absolute paths are refused; give a path relative to the working directory")
        parts = [p for p in PurePosixPath(path).parts if p != "."]
        if ".." in parts:
            raise PathRefused(f"{path}: '..' is refused; tools only see the working directory and below")
        if writing and ".git" in parts:
            raise PathRefused(f"{path}: writing inside .git is refused")
        full = cwd.joinpath(*parts)
        self.check_links(full, path)
        return full

    def check_links(self, full: Path, shown: str) -> None:
        """PathRefused when `full` is outside the root or one of its existing parts is a link."""
        try:
            rel = full.relative_to(self.root)
        except ValueError:
            raise PathRefused(f"{shown}: outside the working directory") from None
        cur = self.root
        try:
            for part in rel.parts:
                cur = cur / part
                if cur.is_symlink():
                    raise PathRefused(f"{shown}: symbolic links are refused ({cur.relative_to(self.root)} is one)")
                if not cur.exists():
                    break  # nothing below a missing part can be a link
        except OSError as e:  # a name too long, a folder we may not read
            raise PathRefused(f"{shown}: {e.strerror or e}") from None

    def directory(self, header: str | None) -> Path:
        """The working directory of one call: the root, or the `x-tool-cwd` header's directory
        (relative to the root, or absolute inside it; it must exist and contain no link)."""
        if not header:
            return self.root
        if "\x00" in header:
            raise PathRefused("x-tool-cwd: invalid path")
        p = Path(header)
        if not p.is_absolute():
            parts = [x for x in PurePosixPath(header).parts if x != "."]
            if ".." in parts:
                raise PathRefused(f"x-tool-cwd {header}: '..' is refused")
            p = self.root.joinpath(*parts)
        self.check_links(Path(os.path.normpath(p)), f"x-tool-cwd {header}")
        if not p.is_dir():
            raise PathRefused(f"x-tool-cwd {header}: not a directory")
        return Path(os.path.normpath(p))

    def shown(self, full: Path) -> str:
        """`full` as the model should write it: relative to the root ('.' for the root)."""
        rel = full.relative_to(self.root).as_posix()
        return rel or "."
