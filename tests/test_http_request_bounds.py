"""Issue #30 items 1-5 against a real `llama serve` (tiny model): no single request crashes the
process or stalls it. Each test sends the request that once did (a 4,000-rule grammar chain and
a 3,000-link $ref chain killed it with SIGSEGV; 10,000 DRY breakers and a 100,000-alternative
grammar blocked it for minutes; a 9 MB /tokenize took 211 s) while /health is polled from a
thread, then checks the answer, that /health kept answering and that the process lives."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fuzz_shapes import HealthWatch, gbnf_alternation, gbnf_chain, ref_chain
from tests.http_server import ROOT, LlamaServer
from tests.tiny_models import write_tiny_model

pytestmark = pytest.mark.slow

N_CTX = 256
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    model = write_tiny_model("llama", "Q8_0", tmp_path_factory.mktemp("bounds") / "tiny.gguf")
    with LlamaServer("-m", str(model), "-c", str(N_CTX), "-np", "2", "-n", "4", "--no-warmup") as s:
        yield s


@pytest.fixture()
def watch(srv: LlamaServer) -> Iterator[HealthWatch]:
    with HealthWatch(srv.url) as w:
        yield w
    assert not w.stalls, w.stalls
    assert srv.proc is not None and srv.proc.poll() is None, srv.log()[-3000:]
    assert srv.get("/health") == (200, {"status": "ok"})


def chat(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra}


def error(answer: tuple[int, Any]) -> tuple[int, str, str]:
    status, body = answer
    assert isinstance(body, dict) and "error" in body, body
    return status, body["error"]["type"], body["error"]["message"]


def test_a_4000_rule_grammar_chain_is_a_clean_400(srv: LlamaServer, watch: HealthWatch) -> None:
    """Item 1: it killed the process (a stack overflow inside llguidance)."""
    grammar = gbnf_chain(4000)
    for path, body in (("/completion", {"prompt": "hi", "grammar": grammar}), (CHAT, chat(grammar=grammar))):
        watch.label = path
        status, kind, message = error(srv.post(path, body))
        assert (status, kind) == (400, "invalid_request_error") and "4002 rules; at most 1000" in message


def test_a_3000_link_ref_chain_compiles(srv: LlamaServer, watch: HealthWatch) -> None:
    """Item 2: any OpenAI client could kill the process with it; now it compiles on a thread
    with a large stack and constrains the answer."""
    schema = ref_chain(3000)
    rf = {"type": "json_schema", "json_schema": {"name": "chain", "schema": schema}}
    for path, body in (("/completion", {"prompt": "hi", "json_schema": schema}), (CHAT, chat(response_format=rf))):
        watch.label = path
        status, answer = srv.post(path, body)
        assert status == 200, answer
        text = answer["content"] if path == "/completion" else answer["choices"][0]["message"]["content"]
        assert text.lstrip().startswith('"')  # a JSON string: the chain's end


def test_dry_breakers_are_bounded_and_cheap(srv: LlamaServer, watch: HealthWatch) -> None:
    """Item 3: 10,000 breakers blocked the engine for every slot for minutes."""
    many = [f"b{i}" for i in range(10_000)]
    status, kind, message = error(srv.post("/completion", {"prompt": "hi", "dry_multiplier": 0.8,
                                                           "dry_sequence_breakers": many}))
    assert (status, kind) == (400, "invalid_request_error") and "at most 1000" in message
    status, answer = srv.post(CHAT, chat(dry_multiplier=0.8, dry_sequence_breakers=many[:1000]))
    assert status == 200, answer


def test_a_huge_alternation_is_refused_at_once_without_a_backtrace(srv: LlamaServer, watch: HealthWatch) -> None:
    """Item 4: 100,000 alternatives (1.3 MB) stalled /health ~30 s and ended in a 400 that
    carried llguidance's Rust panic and its <backtrace>."""
    watch.label = "100,000 alternatives"
    status, kind, message = error(srv.post("/completion", {"prompt": "hi", "grammar": gbnf_alternation(100_000)}))
    assert (status, kind) == (400, "invalid_request_error") and "at most 262144" in message
    assert "backtrace" not in message and "panic" not in message
    watch.label = "20,000 alternatives in a lexeme (compiles off the event loop)"
    status, answer = srv.post("/completion", {"prompt": "hi", "grammar": gbnf_alternation(20_000, lexeme=True),
                                              "n_predict": 2})
    assert status == 200 and answer["content"].startswith("w"), answer
    watch.label = "20,000 alternatives in the start rule"
    for stream in (False, True):  # refused before any work: a 400 even for a stream, not an error event
        status, kind, message = error(srv.post("/completion", {"prompt": "hi", "grammar": gbnf_alternation(20_000),
                                                               "stream": stream}))
        assert status == 400 and message.startswith("the grammar cannot start: the parser would hold 20001 items")
        assert "llguidance's limit of 2000 (max_items_in_row)" in message and "logit_bias" not in message
        assert "<" not in message, message  # no parser state dump


def test_text_to_tokenize_is_bounded(srv: LlamaServer, watch: HealthWatch) -> None:
    """Item 5: /tokenize of a 9 MB string took 211 s. A text longer than the context could
    hold at the vocabulary's longest token is a 400 before any tokenizing; token ids of
    what is accepted do not change."""
    limit = N_CTX * 6  # the tiny vocabulary's longest token: "<0x..>", 6 characters
    status, ok = srv.post("/tokenize", {"content": "a" * limit})
    assert status == 200 and ok["tokens"]
    for path, body in (("/tokenize", {"content": "a" * (limit + 1)}),
                       ("/tokenize", {"content": "a" * 9_000_000}),
                       ("/tokenize", {"content": ["x", "a" * (limit + 1)]}),
                       ("/completion", {"prompt": ["a" * limit, "b"]}),
                       (CHAT, chat(messages=[{"role": "user", "content": "a" * (limit + 1)}]))):
        watch.label = f"{path} with too much text"
        status, kind, message = error(srv.post(path, body))
        assert (status, kind) == (400, "invalid_request_error"), (path, message)
        assert f"at most {limit} per request" in message, message


def test_n_probs_is_bounded(srv: LlamaServer, watch: HealthWatch) -> None:
    """Item c: n_probs had no bound but the vocabulary (llama-server's clamp): every token then
    sorted, spelled and sent the whole vocabulary, on the engine's thread."""
    status, answer = srv.post("/completion", {"prompt": "hi", "n_probs": 1000, "n_predict": 1})
    assert status == 200 and len(answer["completion_probabilities"][0]["top_logprobs"]) <= 1000, str(answer)[:300]
    for path, body in (("/completion", {"prompt": "hi", "n_probs": 1001}),
                       ("/v1/completions", {"prompt": "hi", "n_probs": 5000})):
        watch.label = f"{path} with too many probabilities"
        status, kind, message = error(srv.post(path, body))
        assert (status, kind) == (400, "invalid_request_error"), (path, message)
        assert "at most 1000 probabilities per token (--max-n-probs)" in message, message


def test_every_bound_is_a_flag(tmp_path: Path) -> None:
    """Item b: each bound is a `llama serve --max-...` flag (defaults: the bounds above),
    lower or higher than its default, and the 400 names its value."""
    model = write_tiny_model("llama", "Q8_0", tmp_path / "tiny.gguf")
    flags = ("--max-grammar-bytes", "300", "--max-grammar-rules", "5", "--max-grammar-depth", "3",
             "--max-dry-breakers", "5", "--max-logit-bias", "2", "--max-logit-bias-chars", "3",
             "--max-n-probs", "3", "--max-stop-strings", "1500", "--max-stop-length", "5")
    refused = [
        ({"grammar": gbnf_chain(6)}, "defines 8 rules; at most 5"),
        ({"grammar": 'root ::= (((("a"))))'}, "4 levels deep; at most 3"),
        ({"grammar": 'root ::= "' + "a" * 300 + '"'}, "bytes; at most 300"),
        ({"json_schema": {"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {}}}}},
         "nested 4 levels deep; at most 3"),
        ({"dry_multiplier": 0.8, "dry_sequence_breakers": list("abcdef")}, "6 entries; at most 5"),
        ({"logit_bias": [[1, 1.0], [2, 1.0], [3, 1.0]]}, "3 entries; at most 2"),
        ({"logit_bias": {"abcd": 1.0}}, "more than 3 characters in all"),
        ({"n_probs": 4}, "at most 3 probabilities per token"),
        ({"stop": ["abcdef"]}, "6 characters; at most 5"),
        ({"stop": ["x"] * 1501}, "1501 strings; at most 1500"),
    ]
    with LlamaServer("-m", str(model), "-c", str(N_CTX), "-np", "1", "-n", "2", "--no-warmup", *flags) as s:
        for extra, needle in refused:
            status, kind, message = error(s.post("/completion", {"prompt": "hi", **extra}))
            assert (status, kind) == (400, "invalid_request_error") and needle in message, (extra.keys(), message)
        status, answer = s.post("/completion", {"prompt": "hi", "stop": ["x"] * 1500, "n_probs": 3})  # over 1000: fine
        assert status == 200 and len(answer["completion_probabilities"][0]["top_logprobs"]) == 3, str(answer)[:300]
    # a bound is positive, and the server's own defaults must pass it (4 default DRY breakers)
    for flag, value, needle in (("--max-n-probs", "0", "--max-n-probs must be positive, got 0"),
                                ("--max-dry-breakers", "3", "dry_sequence_breakers has 4 entries; at most 3")):
        run = subprocess.run([sys.executable, "-m", "llamacli", "serve", "-m", str(model), flag, value, "--port", "0"],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert run.returncode == 1 and needle in run.stderr, run.stderr


def test_no_traceback_in_the_log(srv: LlamaServer) -> None:
    """The server's log shows no traceback after all of the above."""
    assert "Traceback" not in srv.log(), srv.log()[-3000:]
