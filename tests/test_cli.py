"""The `llama` command as a user runs it: a real subprocess, stdout/stderr and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def llama(*args: str, stdin: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "llamacli", *args], input=stdin, capture_output=True, text=True,
        timeout=timeout, env=env, cwd=ROOT,
    )


def test_version_and_help() -> None:
    r = llama("--version")
    assert r.returncode == 0 and r.stdout.startswith("llama (llamacli)")
    r = llama("complete", "--help")
    assert r.returncode == 0 and "--n-predict" in r.stdout


def test_missing_model_is_one_line_exit_2(tmp_path: Path) -> None:
    r = llama("complete", "-m", str(tmp_path / "nope.gguf"), "-p", "hi")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "no such file" in r.stderr
    assert "Traceback" not in r.stderr


def test_not_a_gguf_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"this is not a model file at all, just text" * 10)
    r = llama("complete", "-m", str(bad), "-p", "hi")
    assert r.returncode == 2 and "not a GGUF file" in r.stderr and "Traceback" not in r.stderr


def test_truncated_gguf_exit_2(tmp_path: Path, demo_model: str) -> None:
    bad = tmp_path / "cut.gguf"
    with open(demo_model, "rb") as f:
        bad.write_bytes(f.read(5_000_000))
    r = llama("complete", "-m", str(bad), "-p", "hi")
    assert r.returncode == 2 and "truncated" in r.stderr and "Traceback" not in r.stderr


def test_bad_hyperparameters_are_one_line_exit_2(tmp_path: Path) -> None:
    """head_count 0 (was a ZeroDivisionError traceback) and a float context_length (was a
    context of 0): one line naming the file and the key, exit 2, in `complete` and `serve`."""
    import gguf

    from tests.tiny_models import rewrite_gguf, write_tiny_model

    src = write_tiny_model("llama", "F32", tmp_path / "tiny.gguf")
    cases = {"llama.attention.head_count": (0, gguf.GGUFValueType.UINT32),
             "llama.context_length": (0.5, gguf.GGUFValueType.FLOAT32)}
    for i, (key, value) in enumerate(cases.items()):
        bad = rewrite_gguf(src, tmp_path / f"bad{i}.gguf", set_values={key: value})
        for cmd in (["complete", "-p", "hi", "-n", "1"], ["serve", "--port", "0", "--no-warmup"]):
            r = llama(*cmd, "-m", str(bad))
            errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
            assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
            assert len(errors) == 1 and str(bad) in errors[0] and repr(key) in errors[0], r.stderr


def test_unsupported_architecture_or_type_is_one_line_exit_2(tmp_path: Path) -> None:
    """An architecture we do not run, or a weight type we cannot multiply (here in a 3-D expert
    tensor), is one line naming it, exit 2, in `complete` and `serve` (the server never starts)."""
    import gguf

    from tests.tiny_models import rewrite_gguf, write_tiny_model

    src = write_tiny_model("qwen3moe", "F32", tmp_path / "moe.gguf")
    cases = {
        "'grok'": rewrite_gguf(src, tmp_path / "arch.gguf", arch="grok"),
        "Q8_1": rewrite_gguf(src, tmp_path / "type.gguf",
                                retype=("blk.1.ffn_down_exps.weight", gguf.GGMLQuantizationType.Q8_1)),
    }
    for what, bad in cases.items():
        for cmd in (["complete", "-p", "hi", "-n", "1"], ["serve", "--port", "0", "--no-warmup"]):
            r = llama(*cmd, "-m", str(bad))
            errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
            assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
            assert len(errors) == 1 and str(bad) in errors[0] and what in errors[0], r.stderr
    assert "blk.1.ffn_down_exps.weight" in r.stderr


def test_usage_error_exit_1() -> None:
    r = llama("complete", "--n-predict", "many")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr


def test_a_file_that_cannot_be_read_is_one_line_exit_1(tmp_path: Path) -> None:
    """-f, -sysf, --chat-template-file naming no file: a usage error (was exit 2, the model/load
    code), found before any model loads (the model does not exist either)."""
    nope, model = str(tmp_path / "nope.txt"), str(tmp_path / "none.gguf")
    for args, flag in ((["complete", "-f", nope], "--file"), (["chat", "-f", nope], "--file"),
                       (["chat", "-sysf", nope, "-p", "x"], "--system-prompt-file"),
                       (["chat", "--chat-template-file", nope, "-p", "x"], "--chat-template-file"),
                       (["serve", "--chat-template-file", nope, "--port", "0"], "--chat-template-file")):
        r = llama(*args, "-m", model, stdin="")
        assert r.returncode == 1, (args, r.stderr)
        assert r.stderr == f"error: {flag} {nope}: No such file or directory\n", r.stderr


def test_complete_ends_the_prompt_echo_before_an_error(tmp_path: Path) -> None:
    """The echoed prompt and the error were one line on a terminal (`hierror: ...`)."""
    from tests.tiny_models import write_tiny_model

    model = str(write_tiny_model("llama", "F32", tmp_path / "tiny.gguf"))
    r = llama("complete", "-m", model, "-p", "hi", "-n", "2", "--grammar", "root ::= [")
    assert r.returncode == 1 and r.stdout == "hi\n", (r.stdout, r.stderr)
    assert r.stderr.startswith("error: failed to parse grammar") and r.stderr.count("\n") == 1, r.stderr


def test_prompt_longer_than_context_exit_1(demo_model: str) -> None:
    r = llama("complete", "-m", demo_model, "-p", "word " * 100, "-c", "32", "-n", "1")
    assert r.returncode == 1 and "context" in r.stderr and "Traceback" not in r.stderr


def test_complete_json_greedy(demo_model: str) -> None:
    r = llama("complete", "-m", demo_model, "-p", "The capital of France is", "-n", "8", "--temp", "0", "--json")
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert obj["prompt_tokens"][0] == 2  # BOS, as llama.cpp adds it for Gemma
    assert len(obj["tokens"]) == 8
    assert obj["content"] and obj["timings"]["predicted_n"] == 8
    # greedy is deterministic: the same command gives the same tokens
    again = json.loads(llama("complete", "-m", demo_model, "-p", "The capital of France is", "-n", "8", "--temp", "0", "--json").stdout)
    assert again["tokens"] == obj["tokens"]


def test_complete_reads_piped_prompt(demo_model: str) -> None:
    r = llama("complete", "-m", demo_model, "-n", "4", "--temp", "0", "--json", stdin="The capital of France is")
    piped = json.loads(r.stdout)
    r2 = llama("complete", "-m", demo_model, "-p", "The capital of France is", "-n", "4", "--temp", "0", "--json")
    assert piped["prompt_tokens"] == json.loads(r2.stdout)["prompt_tokens"]


def test_seeded_sampling_is_reproducible(demo_model: str) -> None:
    args = ("complete", "-m", demo_model, "-p", "Once upon a time", "-n", "12", "--temp", "1.0", "--seed", "42", "--json")
    a, b = json.loads(llama(*args).stdout), json.loads(llama(*args).stdout)
    assert a["tokens"] == b["tokens"] and a["seed"] == 42


def test_complete_json_schema_constrains_output(demo_model: str) -> None:
    schema = '{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}'
    r = llama("complete", "-m", demo_model, "-p", "Data:", "-n", "30", "--temp", "0", "-j", schema, "--json")
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    value = json.loads(obj["content"])
    assert set(value) == {"a"} and isinstance(value["a"], int)
    assert obj["stop_type"] == "eos"


def test_complete_bad_grammar_is_one_line_exit_1(demo_model: str) -> None:
    r = llama("complete", "-m", demo_model, "-p", "x", "-n", "3", "--grammar", 'root ::= ("a" | ')
    assert r.returncode == 1 and "grammar" in r.stderr and "Traceback" not in r.stderr


def test_complete_shares_the_servers_grammar_bounds(tmp_path: Path) -> None:
    """A 4,000-rule chain (it overflowed llguidance's stack) is one line and exit 1; a
    3,000-link $ref chain compiles on the large-stack threads and constrains the answer."""
    from tests.fuzz_shapes import gbnf_chain, ref_chain
    from tests.tiny_models import write_tiny_model

    model = str(write_tiny_model("llama", "Q8_0", tmp_path / "tiny.gguf"))
    (tmp_path / "chain.gbnf").write_text(gbnf_chain(4000))
    (tmp_path / "refs.json").write_text(json.dumps(ref_chain(3000)))
    r = llama("complete", "-m", model, "-p", "x", "-n", "3", "--grammar-file", str(tmp_path / "chain.gbnf"))
    assert r.returncode == 1 and "error: the grammar defines 4002 rules; at most 1000" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = llama("complete", "-m", model, "-p", "x", "-n", "3", "--json-schema-file", str(tmp_path / "refs.json"))
    assert r.returncode == 0 and r.stdout.startswith('x"'), (r.stdout, r.stderr[-2000:])
