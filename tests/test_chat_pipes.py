"""`llama chat` as a filter: real subprocesses on the demo model (stdin is a pipe)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "What is the capital of France? Answer in one word."
# llama.cpp's greedy answer (llama-cpp-python 0.3.36, temperature 0, 8 tokens) to QUESTION in
# Gemma's chat format; the demo model is a base model, so it echoes the question.
LLAMA_CPP_ANSWER = "What is the capital of France? Answer"

pytestmark = pytest.mark.slow


def chat(*args: str, stdin: str = "", timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1")
    return subprocess.run(
        [sys.executable, "-m", "llamacli", "chat", *args], input=stdin, capture_output=True, text=True,
        timeout=timeout, env=env, cwd=ROOT, check=False,
    )


def test_piped_question_greedy_answer_only_on_stdout(demo_model: str) -> None:
    r = chat("-m", demo_model, "--temp", "0", "-n", "8", stdin=QUESTION + "\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == LLAMA_CPP_ANSWER + "\n"
    assert "\x1b[" not in r.stdout  # no colours, no cursor movement
    assert "8 tokens" in r.stderr and "prompt 21" in r.stderr  # the stats line goes to stderr


def test_json_shape_and_prompt_before_piped_text(demo_model: str) -> None:
    r = chat("-m", demo_model, "--temp", "0", "-n", "4", "--json", "--no-show-timings", "-p", "Tell me a joke.",
             stdin="About cats.\n")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    obj = json.loads(r.stdout)
    assert set(obj) == {"content", "finish_reason", "model", "usage", "timings"}
    assert obj["content"] == "Tell me a joke" and obj["finish_reason"] == "length"
    # "-p TEXT" + piped text = one message "TEXT\n\npiped": 18 prompt tokens as in llama.cpp
    assert obj["usage"] == {"prompt_tokens": 18, "completion_tokens": 4, "total_tokens": 22}
    assert obj["timings"]["predicted_n"] == 4 and obj["timings"]["prompt_n"] == 18
    assert obj["model"] == os.path.basename(demo_model)


def test_jsonl_three_lines_in_input_order(demo_model: str) -> None:
    lines = [QUESTION, "", "Name a colour.", "Count to three."]
    r = chat("-m", demo_model, "--temp", "0", "-n", "8", "--jsonl", stdin="\n".join(lines) + "\n")
    assert r.returncode == 0, r.stderr
    out = [json.loads(x) for x in r.stdout.splitlines()]
    assert [o["index"] for o in out] == [0, 1, 2]  # blank lines are skipped
    assert all(o["usage"]["completion_tokens"] == 8 and o["finish_reason"] == "length" for o in out)
    # run concurrently on 3 slots, each line gets its own answer, as llama.cpp's greedy one
    # (line 1 meets a near-tie after 4 tokens, where our engine picks another token alone too)
    assert out[0]["content"] == LLAMA_CPP_ANSWER
    assert out[1]["content"].startswith("Name a colour.")
    assert out[2]["content"] == "The model is a 3-dimensional"


def test_batch_errors_are_per_line(demo_model: str) -> None:
    r = chat("-m", demo_model, "--temp", "0", "-n", "2", "-c", "32", "--batch-lines",
             stdin="hi\n" + "word " * 40 + "\nok\n")
    assert r.returncode == 1
    out = r.stdout.split("\n")
    assert len(out) == 4 and out[1] == "" and out[0] and out[2]  # answers escaped onto one line each
    assert "error: line 2: the conversation has" in r.stderr and "Traceback" not in r.stderr


def test_prompt_longer_than_context_exit_1(demo_model: str) -> None:
    r = chat("-m", demo_model, "-c", "32", "-n", "1", stdin="word " * 40)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "more than the context size (32)" in r.stderr


def test_json_schema_constrains_the_answer(demo_model: str) -> None:
    schema = '{"type":"object","properties":{"capital":{"type":"string","enum":["Paris","Rome"]}},"required":["capital"],"additionalProperties":false}'
    r = chat("-m", demo_model, "--temp", "0", "-n", "30", "--json", "-j", schema, stdin=QUESTION + "\n")
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert json.loads(obj["content"])["capital"] in ("Paris", "Rome") and obj["finish_reason"] == "stop"
    r = chat("-m", demo_model, "-n", "3", "--grammar", 'root ::= ("a" | ', stdin="hi\n")
    assert r.returncode == 1 and "grammar" in r.stderr and "Traceback" not in r.stderr and r.stdout == ""


@pytest.mark.parametrize(
    "args, stdin, code, message",
    [
        (["-m", "/nonexistent/model.gguf"], "hi", 2, "no such file"),
        ([], "", 1, "no input: stdin is empty"),
        ([], "\n\n", 1, "no input"),
        (["--jsonl"], "   \n", 1, "no non-blank line"),
        (["--json", "--jsonl"], "hi", 1, "cannot be combined"),
        (["--top-p", "2"], "hi", 1, "top_p must be between"),
        (["-p", "a", "-f", "b"], "hi", 1, "not both"),
        (["-n", "many"], "hi", 1, "Invalid value"),
        (["-j", "{nope"], "hi", 1, "JSON"),
    ],
)
def test_errors_before_loading(args: list[str], stdin: str, code: int, message: str) -> None:
    r = chat(*args, stdin=stdin)
    assert r.returncode == code, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr and r.stdout == ""


def test_not_a_gguf_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model" * 100)
    r = chat("-m", str(bad), stdin="hi")
    assert r.returncode == 2 and "not a GGUF file" in r.stderr and r.stderr.count("\n") == 1


def test_simple_io_repl_reads_commands_from_a_pipe(demo_model: str, tmp_path: Path) -> None:
    saved = tmp_path / "c.json"
    script = f"/set temp 0\n/set n 4\n/system Be brief.\n{QUESTION}\n/tokens\n/save {saved}\n/exit\n"
    r = chat("-m", demo_model, "--simple-io", stdin=script)
    assert r.returncode == 0, r.stderr
    assert "temperature = 0.0" in r.stdout and "[4 tokens" in r.stdout
    assert "tokens in the conversation" in r.stdout
    data = json.loads(saved.read_text())
    assert data["system"] == "Be brief." and data["messages"][0]["content"] == QUESTION
    assert len(data["messages"]) == 2 and data["settings"]["n_predict"] == 4
