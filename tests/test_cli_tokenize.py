"""`llama tokenize` as a user runs it (a real subprocess), against what llama.cpp's
llama-tokenize gives: tests/fixtures/tokenizer/cli_tokenize.json (make_cli_fixture.py)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from llamacli.commands.tokenize import escape_piece, process_escapes

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = json.loads((ROOT / "tests/fixtures/tokenizer/cli_tokenize.json").read_text(encoding="utf-8"))
CASES = {c["name"]: c for c in FIXTURE["cases"]}


def llama(*args: str, stdin: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    """Run `python -m llamacli ARGS`; stdin is DEVNULL unless given (bytes in, bytes out)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "llamacli", *args], input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True, timeout=timeout, env=env, cwd=ROOT, check=False,
    )


def run_case(case: dict, model: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[bytes]:
    """Pass the case's text the way the case says (-p, -f, --stdin or a plain pipe)."""
    text = bytes.fromhex(case["text_hex"])
    args = ["tokenize", "-m", model, *extra]
    if case["no_bos"]:
        args.append("--no-bos")
    if case["no_parse_special"]:
        args.append("--no-parse-special")
    if case["mode"] == "prompt":
        return llama(*args, "-p", text.decode("utf-8"))
    if case["mode"] == "file":
        path = tmp_path / f"{case['name']}.txt"
        path.write_bytes(text)
        return llama(*args, "-f", str(path))
    if case["mode"] == "stdin":
        return llama(*args, "--stdin", stdin=text)
    return llama(*args, stdin=text)


def ok(r: subprocess.CompletedProcess[bytes]) -> bytes:
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert r.stderr == b""
    return r.stdout


@pytest.mark.parametrize("name", sorted(CASES))
def test_default_format_and_show_count_match_llama_tokenize(name: str, demo_model: str, tmp_path: Path) -> None:
    case = CASES[name]
    out = ok(run_case(case, demo_model, tmp_path, "--show-count"))
    total = b"Total number of tokens: %d\n" % len(case["ids"])
    assert out == bytes.fromhex(case["stdout_default_hex"]) + total


@pytest.mark.parametrize("name", sorted(CASES))
def test_json_is_one_array_of_llama_cpp_ids(name: str, demo_model: str, tmp_path: Path) -> None:
    case = CASES[name]
    out = ok(run_case(case, demo_model, tmp_path, "--json"))
    assert json.loads(out) == case["ids"]
    assert out.count(b"\n") == 1 and out.endswith(b"\n")


@pytest.mark.parametrize("name", ["chat_special", "file_invalid_utf8", "empty_stdin"])
def test_ids_format(name: str, demo_model: str, tmp_path: Path) -> None:
    case = CASES[name]
    out = ok(run_case(case, demo_model, tmp_path, "--ids"))
    assert out == ("[" + ", ".join(map(str, case["ids"])) + "]\n").encode()


@pytest.mark.parametrize("name", ["chat_special", "file_invalid_utf8", "stdin_multiline"])
def test_pieces_format_one_line_per_token(name: str, demo_model: str, tmp_path: Path) -> None:
    case = CASES[name]
    lines = ok(run_case(case, demo_model, tmp_path, "--pieces")).decode("utf-8").splitlines()
    assert len(lines) == len(case["ids"])
    for line, tid, piece_hex in zip(lines, case["ids"], case["pieces_hex"]):
        sid, shown = line.split("\t")
        assert int(sid) == tid
        assert process_escapes(shown.encode()) == bytes.fromhex(piece_hex)  # -p reads it back


def test_pieces_literal_lines(demo_model: str) -> None:
    out = ok(llama("tokenize", "-m", demo_model, "-p", "Hi<end_of_turn>\n"))
    assert out == b"     2 -> '<bos>'\n 10979 -> 'Hi'\n   106 -> '<end_of_turn>'\n   107 -> '\n'\n"
    out = ok(llama("tokenize", "-m", demo_model, "--pieces", "-p", "Hi<end_of_turn>\n"))
    assert out == b"2\t<bos>\n10979\tHi\n106\t<end_of_turn>\n107\t\\n\n"


def test_escape_piece() -> None:
    assert escape_piece(b"a\\b\n\t\r\x00\x7f") == "a\\\\b\\n\\t\\r\\x00\\x7f"
    assert escape_piece("é🚀".encode()) == "é🚀"
    assert escape_piece(b"\xe2\x82") == "\\xe2\\x82"
    assert escape_piece(b"x\xff\xc3\xa9") == "x\\xffé"


def test_count(demo_model: str, tmp_path: Path) -> None:
    case = CASES["file_invalid_utf8"]
    assert ok(run_case(case, demo_model, tmp_path, "--count")) == b"%d\n" % len(case["ids"])


def test_json_with_show_count_keeps_stdout_pure(demo_model: str) -> None:
    r = llama("tokenize", "-m", demo_model, "--json", "--show-count", "-p", "Hello world")
    assert r.returncode == 0 and json.loads(r.stdout) == CASES["hello"]["ids"]
    assert r.stderr == b"Total number of tokens: 3\n"


def test_file_is_read_byte_exact(demo_model: str, tmp_path: Path) -> None:
    """No trailing newline is added or removed: the final "\\n\\n" is one token (108)."""
    case = CASES["file_trailing_newlines"]
    assert case["ids"][-1] == 108
    assert json.loads(ok(run_case(case, demo_model, tmp_path, "--json"))) == case["ids"]
    path = tmp_path / "plain.txt"
    path.write_bytes(b"line one\nline two")
    assert json.loads(ok(llama("tokenize", "-m", demo_model, "--json", "-f", str(path))))[-1] == 1156


def test_precedence_stdin_then_file_then_prompt(demo_model: str, tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"Hello world")
    want = CASES["hello"]["ids"]
    r = llama("tokenize", "-m", demo_model, "--json", "-p", "other text", "-f", str(path))
    assert json.loads(ok(r)) == want
    r = llama("tokenize", "-m", demo_model, "--json", "--stdin", "-f", "/nonexistent", "-p", "x", stdin=b"Hello world")
    assert json.loads(ok(r)) == want
    # with -p, piped stdin is not read (llama-tokenize ignores it too)
    r = llama("tokenize", "-m", demo_model, "--json", "-p", "Hello world", stdin=b"ignored")
    assert json.loads(ok(r)) == want


def test_escapes_processed_like_llama_cpp(demo_model: str, tmp_path: Path) -> None:
    want = CASES["chat_special"]["ids"]
    escaped = "<start_of_turn>user\\nHello<end_of_turn>\\n<start_of_turn>model\\n"
    assert json.loads(ok(llama("tokenize", "-m", demo_model, "--json", "-p", escaped))) == want
    path = tmp_path / "esc.txt"
    path.write_bytes(escaped.encode())
    assert json.loads(ok(llama("tokenize", "-m", demo_model, "--json", "-f", str(path)))) == want
    literal = json.loads(ok(llama("tokenize", "-m", demo_model, "--json", "--no-escape", "-f", str(path))))
    assert literal != want and 107 not in literal


def test_process_escapes_matches_string_process_escapes() -> None:
    """Cases of common.cpp's string_process_escapes (also checked against the compiled C++
    function on 3,000 random strings while writing this)."""
    assert process_escapes(b"a\\nb\\tc\\rd\\\\e\\'f\\\"g") == b"a\nb\tc\rd\\e'f\"g"
    assert process_escapes(b"\\x41\\x4a\\xzz\\q") == b"AJ\\xzz\\q"
    assert process_escapes(b"\\x41") == b"A" and process_escapes(b"\\x4") == b"\\x4"
    assert process_escapes(b"\\x 5.\\x-1.") == b"\x05.\xff."  # strtol takes a space or sign
    assert process_escapes(b"end\\") == b"end\\"
    assert process_escapes(b"\xff\\n") == b"\xff\n"


def test_no_text_is_exit_1(demo_model: str) -> None:
    r = llama("tokenize", "-m", demo_model)
    assert r.returncode == 1 and r.stdout == b""
    assert r.stderr.decode().startswith("error: no text") and r.stderr.count(b"\n") == 1


def test_missing_model_is_one_line_exit_2(tmp_path: Path) -> None:
    r = llama("tokenize", "-m", str(tmp_path / "nope.gguf"), "-p", "hi")
    assert r.returncode == 2 and r.stdout == b""
    assert r.stderr.count(b"\n") == 1 and b"no such file" in r.stderr and b"Traceback" not in r.stderr


def test_not_a_gguf_is_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"plain text, not a model" * 10)
    r = llama("tokenize", "-m", str(bad), "-p", "hi")
    assert r.returncode == 2 and r.stderr.count(b"\n") == 1 and b"not a GGUF file" in r.stderr


def test_missing_text_file_and_format_conflict_are_exit_1(demo_model: str, tmp_path: Path) -> None:
    r = llama("tokenize", "-m", demo_model, "-f", str(tmp_path / "none.txt"))
    assert r.returncode == 1 and r.stderr.count(b"\n") == 1 and b"could not open file" in r.stderr
    r = llama("tokenize", "-m", demo_model, "--ids", "--json", "-p", "x")
    assert r.returncode == 1 and r.stderr.count(b"\n") == 1 and b"one output format" in r.stderr


def test_loads_no_weights_and_starts_fast(demo_model: str) -> None:
    """Only the vocabulary is read: no model/weights module is imported, and a short text
    takes well under the ~1 s budget on the demo model's 262k vocabulary."""
    code = (
        "import sys; sys.argv = ['llama', 'tokenize', '-m', sys.argv[1], '--ids', '-p', 'Hello world']\n"
        "from llamacli.cli import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "heavy = [m for m in ('llamacli.core.model.load', 'llamacli.core.model.weights.tensors', 'llamacli.core.model.kernels.dequant') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code, demo_model], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "[2, 9259, 1902]\n[]\n"
    # the command's CPU time (not wall time, which other processes stretch): ~0.8 s
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    ok(llama("tokenize", "-m", demo_model, "--ids", "-p", "Hello world"))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime) < 5
