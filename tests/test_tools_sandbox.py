"""core/tools/sandbox.py and glob.py: what a tool path may name, and llama-server's globs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llamacli.core.tools.glob import glob_match, path_glob_match
from llamacli.core.tools.sandbox import PathRefused, Sandbox


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "f.txt").write_text("x")
    os.symlink("/etc", tmp_path / "etc_link")
    os.symlink(tmp_path / "d", tmp_path / "d_link")
    os.symlink("f.txt", tmp_path / "d" / "inner_link")
    return Sandbox.at(tmp_path)


def test_relative_paths_inside_resolve(box: Sandbox) -> None:
    assert box.resolve("d/f.txt", box.root) == box.root / "d" / "f.txt"
    assert box.resolve("./d/./e", box.root) == box.root / "d" / "e"
    assert box.resolve("f.txt", box.root / "d") == box.root / "d" / "f.txt"
    assert box.resolve("new/dir/file", box.root) == box.root / "new" / "dir" / "file"  # may not exist yet
    assert box.shown(box.root / "d" / "e") == "d/e" and box.shown(box.root) == "."


@pytest.mark.parametrize("path, why", [
    ("/etc/passwd", "absolute paths are refused"),
    (str(Path("/tmp")), "absolute paths are refused"),
    ("~/x", "paths starting with ~ are refused"),
    ("~", "paths starting with ~ are refused"),
    ("../x", "'..' is refused"),
    ("d/../../x", "'..' is refused"),
    ("d/..", "'..' is refused"),
    ("etc_link/passwd", "symbolic links are refused (etc_link is one)"),
    ("d_link/f.txt", "symbolic links are refused (d_link is one)"),
    ("d/inner_link", "symbolic links are refused (d/inner_link is one)"),
    ("", "invalid path"),
    ("a\x00b", "invalid path"),
])
def test_refused(box: Sandbox, path: str, why: str) -> None:
    with pytest.raises(PathRefused, match=__import__("re").escape(why)):
        box.resolve(path, box.root)


def test_write_paths_never_enter_dot_git(box: Sandbox) -> None:
    assert box.resolve(".git/config", box.root) == box.root / ".git" / "config"  # reading is fine
    with pytest.raises(PathRefused, match="writing inside .git is refused"):
        box.resolve("sub/.git/hooks/pre-commit", box.root, writing=True)


def test_working_directory_header(box: Sandbox) -> None:
    assert box.directory(None) == box.root and box.directory("") == box.root
    assert box.directory("d") == box.root / "d"
    assert box.directory(str(box.root / "d" / "e")) == box.root / "d" / "e"  # absolute, inside
    for bad, why in [("/etc", "outside the working directory"), ("d_link", "symbolic links"), ("..", "'..'"),
                     ("d/f.txt", "not a directory"), ("nope", "not a directory"),
                     (str(box.root / "d" / ".." / ".."), "outside the working directory")]:
        with pytest.raises(PathRefused, match=__import__("re").escape(why)):
            box.directory(bad)


@pytest.mark.parametrize("pattern, text, ok", [
    ("*.py", "a.py", True), ("*.py", "dir/a.py", False), ("**/*.py", "dir/sub/a.py", True),
    ("**", "a/b/c", True), ("**", "", True), ("a?c", "abc", True), ("a?c", "a/c", False),
    ("[a-c]x", "bx", True), ("[a-c]x", "dx", False), ("[!a-c]x", "dx", True), ("[!a-c]x", "ax", False),
    ("[]]", "]", True), ("[-a]", "-", True), ("[abc", "[abc", True), ("[abc", "abc", False),
    ("src/**/*.c", "src/x.c", False), ("src/**/*.c", "src//x.c", True), ("src/**/x.c", "src/a/b/x.c", True),
    ("*", "", True), ("", "", True), ("", "a", False), ("a*b*c", "a/b/c", False),
])
def test_glob_match_is_llama_servers(pattern: str, text: str, ok: bool) -> None:
    assert glob_match(pattern, text) is ok


def test_glob_match_takes_no_exponential_time() -> None:
    """llama-server's recursive matcher takes exponential time on this; the state-set one is
    linear in the text (this would not finish otherwise)."""
    assert not glob_match("**a" * 30 + "b", "a" * 200)
    assert not glob_match("*a" * 30 + "b", "a" * 200)


def test_path_glob_match_anchoring() -> None:
    assert path_glob_match("*.py", "deep/in/x.py")  # no '/': the name at any depth
    assert path_glob_match("in/*.py", "deep/in/x.py")  # '/': anchored with **/
    assert not path_glob_match("/in/*.py", "deep/in/x.py")
    assert path_glob_match("**", "a/b")
