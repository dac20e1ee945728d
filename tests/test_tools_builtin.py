"""The built-in tools (core/tools/files.py, edit.py, search.py, shell.py, process.py), called
through a ToolBox on a temporary directory: llama-server's result shapes and texts, the sandbox
on every path, streaming, timeouts and cancels of shell commands."""

from __future__ import annotations

import base64
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from llamacli.core.tools import ToolBox, ToolParamsError, UnknownTool
from llamacli.core.tools.base import Call
from llamacli.core.tools.files import READ_MAX
from llamacli.core.tools.process import run_process


@pytest.fixture
def box(tmp_path: Path) -> ToolBox:
    (tmp_path / "a.txt").write_text("hello\nworld\nfoo bar\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("import os\n\ndef main():\n    return 42\n")
    (tmp_path / "src" / "util.py").write_text("def helper():\n    return 'x'\n")
    (tmp_path / "node_modules" / "pkg").mkdir(parents=True)
    (tmp_path / "node_modules" / "pkg" / "index.py").write_text("def main(): pass\n")
    os.symlink("/etc/hostname", tmp_path / "host_link")
    return ToolBox.build(["all"], tmp_path)


def run(box: ToolBox, name: str, call: Call | None = None, **params: Any) -> dict[str, Any]:
    tool = box.find(name)
    tool.check(params)
    return box.invoke(tool, params, call or box.call())


def test_read_file_lines_and_numbers(box: ToolBox) -> None:
    assert run(box, "read_file", path="a.txt") == {"plain_text_response": "hello\nworld\nfoo bar\n"}
    assert run(box, "read_file", path="a.txt", start_line=2, end_line=2, append_loc=True) == {
        "plain_text_response": "2\u2192world\n"}
    assert run(box, "read_file", path="missing.txt") == {"error": "cannot stat file: missing.txt"}
    assert run(box, "read_file", path="src")["error"].startswith("cannot stat file: src")
    assert "symbolic links are refused" in run(box, "read_file", path="host_link")["error"]
    assert "absolute paths are refused" in run(box, "read_file", path="/etc/hostname")["error"]


def test_read_file_size_limit_and_window(box: ToolBox) -> None:
    big = "".join(f"line {i}\n" for i in range(5000))
    (box.sandbox.root / "big.txt").write_text(big)
    r = run(box, "read_file", path="big.txt")
    assert r["error"].startswith(f"file too large ({len(big)} bytes, max {READ_MAX})")
    assert run(box, "read_file", path="big.txt", start_line=10, end_line=11) == {"plain_text_response": "line 9\nline 10\n"}
    whole = run(box, "read_file", path="big.txt", end_line=5000)["plain_text_response"]
    assert whole.endswith("[output truncated]") and len(whole.encode()) <= READ_MAX + len("[output truncated]")


def test_read_file_base64(box: ToolBox) -> None:
    data = bytes(range(256))
    (box.sandbox.root / "bin.dat").write_bytes(data)
    r = run(box, "read_file", box.call(resp_type="base64"), path="bin.dat")
    assert r == {"base64": base64.b64encode(data).decode(), "size_bytes": 256}


def test_write_file_creates_folders_and_refuses_links(box: ToolBox) -> None:
    root = box.sandbox.root
    assert run(box, "write_file", path="out/new/x.txt", content="héllo") == {
        "result": "file written successfully", "path": "out/new/x.txt", "bytes": 6}
    assert (root / "out" / "new" / "x.txt").read_text() == "héllo"
    assert "symbolic links are refused" in run(box, "write_file", path="host_link", content="x")["error"]
    assert "writing inside .git is refused" in run(box, "write_file", path=".git/hooks/post-checkout", content="x")["error"]
    assert "'..' is refused" in run(box, "write_file", path="../escape.txt", content="x")["error"]
    assert not (root.parent / "escape.txt").exists()


def test_edit_file_exact_fuzzy_and_errors(box: ToolBox) -> None:
    root = box.sandbox.root
    ok = run(box, "edit_file", path="src/main.py", edits=[{"old_text": "return 42", "new_text": "return 43"},
                                                        {"old_text": "import os", "new_text": "import sys"}])
    assert ok == {"result": "file edited successfully", "path": "src/main.py", "edits_applied": 2}
    assert (root / "src" / "main.py").read_text() == "import sys\n\ndef main():\n    return 43\n"
    # fuzzy: smart quotes and trailing blanks in the file; the untouched lines stay as they were
    (root / "q.txt").write_text("keep  \nsay \u201chi\u201d   \nkeep\u00a0too\n")
    assert run(box, "edit_file", path="q.txt", edits=[{"old_text": 'say "hi"', "new_text": 'say "bye"'}])["result"]
    assert (root / "q.txt").read_text() == 'keep  \nsay "bye"\nkeep\u00a0too\n'
    errors = [
        ([{"old_text": "nothere", "new_text": "x"}], "could not find edits[0].old_text in src/main.py"),
        ([], "\"edits\" must be a non-empty array"),
        ([{"old_text": "", "new_text": "x"}], "edits[0].old_text must not be empty"),
        ([{"old_text": "import sys", "new_text": "import sys"}], "no changes made"),
        ([{"old_text": "def main", "new_text": "a"}, {"old_text": "main():", "new_text": "b"}], "edits[0] and edits[1] overlap"),
    ]
    for edits, msg in errors:
        r = run(box, "edit_file", path="src/main.py", edits=edits)
        assert msg in r["error"], (edits, r)
    (root / "dup.txt").write_text("x = 1\nx = 1\n")
    assert "found 2 occurrences of edits[0].old_text" in run(box, "edit_file", path="dup.txt",
                                                            edits=[{"old_text": "x = 1", "new_text": "y"}])["error"]


def test_params_are_checked_against_the_definition(box: ToolBox) -> None:
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("read_file", {}, "read_file: params.path is required"),
        ("read_file", {"path": 3}, "read_file: params.path must be a string"),
        ("read_file", {"path": "a", "end_line": True}, "params.end_line must be an integer"),
        ("edit_file", {"path": "a", "edits": [{"old_text": "x"}]}, "params.edits[0].new_text is required"),
        ("edit_file", {"path": "a", "edits": "x"}, "params.edits must be an array"),
    ]
    for name, params, msg in cases:
        with pytest.raises(ToolParamsError, match=__import__("re").escape(msg)):
            box.find(name).check(params)
    box.find("read_file").check({"path": "a", "start_line": None, "other": [1]})  # null = not given; extras pass
    with pytest.raises(UnknownTool, match='unknown tool "nope"'):
        box.find("nope")
    with pytest.raises(UnknownTool, match='tool "read_file" does not support stream = true'):
        box.find("read_file", stream=True)


def test_file_glob_search(box: ToolBox) -> None:
    r = run(box, "file_glob_search", path=".", include="*.py")
    # node_modules is never entered; the link is neither listed nor followed
    assert r["plain_text_response"] == "src/main.py\nsrc/util.py\n\n---\nTotal matches: 2\n"
    assert r["entries"] == [{"path": "src/main.py", "type": "file"}, {"path": "src/util.py", "type": "file"}]
    assert r["base"] == str(box.sandbox.root)
    dirs = run(box, "file_glob_search", path=".", type="dir")
    assert dirs["plain_text_response"].splitlines()[:2] == ["node_modules/", "src/"]
    assert run(box, "file_glob_search", path=".", limit=1)["plain_text_response"].endswith(
        "[1 results limit reached (3 total matches). Refine the glob pattern to narrow the search.]\n")
    assert run(box, "file_glob_search", path=".", max_depth=1)["plain_text_response"].startswith("a.txt\n\n---")
    assert run(box, "file_glob_search", path=".", limit=0) == {"error": "invalid limit: 0 (expected 1 or more)"}
    assert run(box, "file_glob_search", path=".", type="x")["error"].startswith("invalid type: x")
    assert run(box, "file_glob_search", path="a.txt") == {"error": "path does not exist or is not a directory: a.txt"}


def test_file_glob_search_follows_gitignore_in_a_repository(box: ToolBox) -> None:
    root = box.sandbox.root
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("util.py\n")
    r = run(box, "file_glob_search", path=".", include="*.py")
    # git's view: util.py is ignored; node_modules is not (only the walk skips it)
    assert r["plain_text_response"] == "node_modules/pkg/index.py\nsrc/main.py\n\n---\nTotal matches: 2\n"


def test_grep_search(box: ToolBox) -> None:
    r = run(box, "grep_search", path=".", pattern="def \\w+", return_line_numbers=True)
    assert r["plain_text_response"] == "src/main.py:3:def main():\nsrc/util.py:1:def helper():\n\n---\nTotal matches: 2\n"
    r = run(box, "grep_search", path="src/main.py", pattern="RETURN", ignore_case=True, context_lines=1)
    assert r["plain_text_response"] == "src/main.py-3-def main():\nsrc/main.py:4:    return 42\n--\n\n---\nTotal matches: 1\n"
    assert run(box, "grep_search", path=".", pattern="(", literal=True)["plain_text_response"].count("(") == 2
    assert run(box, "grep_search", path=".", pattern="(")["error"].startswith("invalid regex:")
    assert run(box, "grep_search", path="nope", pattern="x") == {"error": "path does not exist: nope"}
    many = "".join(f"hit {i}\n" for i in range(150))
    (box.sandbox.root / "many.txt").write_text(many)
    r = run(box, "grep_search", path="many.txt", pattern="hit")["plain_text_response"]
    assert r.endswith("Total matches: 100\n[100 matches limit reached. Narrow the path/pattern/include to see more.]\n")


def test_grep_search_a_runaway_pattern_is_stopped(box: ToolBox, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backtracking pattern runs in its own process, ended by the time limit: the caller (and
    its process, whose GIL Python's `re` would hold) is free again at the limit."""
    from llamacli.core.tools import search

    monkeypatch.setattr(search, "GREP_TIMEOUT_S", 1.0)
    (box.sandbox.root / "evil.txt").write_text("a" * 40 + "c\n")
    r = run(box, "grep_search", path="evil.txt", pattern="(a+)+b")
    assert r == {"error": "the search took more than 1 s and was stopped: narrow the path, or simplify the pattern"}


def test_exec_shell_command(box: ToolBox) -> None:
    r = run(box, "exec_shell_command", command="echo out; echo err >&2; pwd; exit 3")
    assert r == {"plain_text_response": f"out\nerr\n{box.sandbox.root}\n\n[exit code: 3]"}
    r = run(box, "exec_shell_command", command="printf 'x%.0s' $(seq 100)", max_output_size=10)
    assert r == {"plain_text_response": "xxxxxxxxxx\n[output truncated]\n[exit code: 0]"}


def test_exec_shell_command_timeout_kills_what_it_started(box: ToolBox, tmp_path: Path) -> None:
    marker = tmp_path / "late"
    r = run(box, "exec_shell_command", command=f"(sleep 2; touch {marker}) & echo started; sleep 30", timeout=1)
    assert r == {"plain_text_response": "started\n\n[exit code: -1] [exit due to timed out]"}
    time.sleep(2.5)
    assert not marker.exists()  # the background job died with the command


def test_exec_shell_command_streams_and_cancels(box: ToolBox, tmp_path: Path) -> None:
    chunks: list[str] = []
    cancel = threading.Event()

    def sink(text: str) -> None:
        chunks.append(text)
        if "two" in "".join(chunks):
            cancel.set()

    marker = tmp_path / "never"
    call = box.call(on_chunk=sink, cancelled=cancel)
    r = run(box, "exec_shell_command", call, command=f"echo one; sleep 0.3; echo two; sleep 5; touch {marker}", timeout=30)
    assert r == {"error": "cancelled"} and "".join(chunks) == "one\ntwo\n"
    assert not marker.exists()
    chunks.clear()
    r = run(box, "exec_shell_command", box.call(on_chunk=chunks.append), command="echo a; sleep 0.2; echo b")
    assert "".join(chunks) == "a\nb\n\n[exit code: 0]" == r["plain_text_response"] and len(chunks) >= 2


def test_run_process_waits_for_the_exit_status_and_splits_no_character(tmp_path: Path) -> None:
    r = run_process(["sh", "-c", "exec 1>&-; sleep 0.3; exit 4"], cwd=tmp_path, timeout=5, max_output=100)
    assert (r.output, r.exit_code, r.timed_out) == ("", 4, False)
    pieces: list[str] = []
    r = run_process(["sh", "-c", "printf '\\303'; sleep 0.2; printf '\\251\\n'"], cwd=tmp_path, timeout=5,
                    max_output=100, on_chunk=pieces.append)
    assert r.output == "é\n" and "".join(pieces) == "é\n" and "\ufffd" not in "".join(pieces)
    assert run_process(["/nonexistent"], cwd=tmp_path, timeout=1, max_output=10).output.startswith("failed to spawn")


def test_get_info(box: ToolBox) -> None:
    r = run(box, "get_info")
    assert r["cwd"] == str(box.sandbox.root) and r["os"] == os.popen("uname -a").read().strip()
    assert run(box, "get_info", box.call(cwd="src"))["cwd"] == str(box.sandbox.root / "src")


def test_listing_shapes_match_llama_server(box: ToolBox) -> None:
    rows = box.listing()
    assert [r["tool"] for r in rows] == ["read_file", "file_glob_search", "grep_search", "exec_shell_command",
                                         "write_file", "edit_file", "get_info"]
    writes = {r["tool"] for r in rows if r["permissions"]["write"]}
    assert writes == {"exec_shell_command", "write_file", "edit_file"}
    for r in rows:
        assert set(r) == {"display_name", "tool", "type", "permissions", "uses_cwd", "definition"} and r["type"] == "server"
        assert r["definition"]["type"] == "function" and r["definition"]["function"]["name"] == r["tool"]
    assert ToolBox.build(["read_file", "get_info"], box.sandbox.root).listing()[1]["tool"] == "get_info"
    with pytest.raises(ToolParamsError, match='unknown tool "cat". available tools: read_file, file_glob_search'):
        ToolBox.build(["cat"])
