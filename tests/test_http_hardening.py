"""Hardening of the HTTP adapter: bad input is a 4xx in llama-server's error JSON (never a 500),
request models validate what handlers and POST /props read, per-request limits, the OpenAPI
document; and, with real `llama serve` processes, a 20 MB body is refused before it is read,
admin endpoints answer while the engine is inside a long step, and SIGTERM exits promptly
even mid-step."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from llamacli.http import request_models as rm
from llamacli.http.app import create_app
from llamacli.http.config import ServerConfig
from tests.http_server import LlamaServer
from tests.fakes import FakeEngine, FakeTokenizer, fake_model
from tests.http_app_client import Client, make
from tests.tiny_models import write_tiny_model

ASK = [{"role": "user", "content": "hi"}]


def _is_400(code: int, d: Any, *words: str) -> None:
    assert code == 400, d
    assert d["error"]["code"] == 400 and d["error"]["type"] == "invalid_request_error", d
    for w in words:
        assert w in d["error"]["message"], d


# ---- 500s that were ------------------------------------------------------------------------------


@pytest.mark.parametrize("calls", [5, [5], [{"function": 3}], [{"function": "str"}], [{"function": {"name": 7}}],
                                   [{"type": "web", "function": {"name": "f"}}],
                                   [{"function": {"name": "f", "arguments": 3}}]])
def test_malformed_tool_calls_in_history_are_400(calls: Any) -> None:
    c, eng = make()
    msgs = ASK + [{"role": "assistant", "content": None, "tool_calls": calls}, {"role": "user", "content": "and?"}]
    for path in ("/v1/chat/completions", "/v1/chat/completions/input_tokens", "/apply-template"):
        code, d, _ = c.post(path, {"messages": msgs})
        _is_400(code, d, "tool_calls")
    assert eng.submitted == []


def test_well_formed_tool_calls_still_render() -> None:
    c, _ = make()
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
    msgs = ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": "c1", "content": "2"}]
    code, d, _ = c.post("/v1/chat/completions/input_tokens", {"messages": msgs})
    assert code == 200 and d["input_tokens"] > 0


def test_polyfill_refuses_malformed_calls_with_invalid_request() -> None:
    from llamacli.core.errors import InvalidRequest
    from llamacli.core.text.tool_calls import polyfill_messages

    for calls in (5, [3], [{"function": "str"}]):
        with pytest.raises(InvalidRequest):
            polyfill_messages([{"role": "assistant", "content": "", "tool_calls": calls}])


@pytest.mark.parametrize("key", ["messages", "tools", "tool_choice", "add_generation_prompt", "self", "template"])
def test_reserved_chat_template_kwargs_are_400(key: str) -> None:
    c, eng = make()
    for path in ("/v1/chat/completions", "/apply-template", "/v1/chat/completions/input_tokens"):
        code, d, _ = c.post(path, {"messages": ASK, "chat_template_kwargs": {key: 1}})
        _is_400(code, d, "chat_template_kwargs", key)
    assert eng.submitted == []
    # other variables still reach the template
    assert c.post("/apply-template", {"messages": ASK, "chat_template_kwargs": {"date_string": "x"}})[0] == 200


def test_serve_refuses_reserved_chat_template_kwargs() -> None:
    import subprocess
    import sys

    from tests.http_server import ROOT

    r = subprocess.run([sys.executable, "-m", "llamacli", "serve", "--chat-template-kwargs", '{"messages": []}'],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "messages" in r.stderr and "Traceback" not in r.stderr


# ---- validation ----------------------------------------------------------------------------------


def test_anthropic_messages_need_max_tokens_count_tokens_does_not() -> None:
    c, eng = make()
    code, d, _ = c.post("/v1/messages", {"model": "x", "messages": ASK})
    _is_400(code, d, "max_tokens", "required")
    assert eng.submitted == []
    assert c.post("/v1/messages", {"model": "x", "messages": ASK, "max_tokens": 0})[0] == 400
    code, d, _ = c.post("/v1/messages/count_tokens", {"model": "x", "messages": ASK})
    assert code == 200 and d["input_tokens"] > 0
    assert c.post("/v1/messages", {"model": "x", "messages": ASK, "max_tokens": 2})[0] == 200


def test_post_props_validates_what_it_stores() -> None:
    c, _ = make(ServerConfig(props=True))
    _, before, _ = c.get("/props")
    for bad in ({"n_predict": 1e20}, {"default_generation_settings": 5}, {"default_generation_settings": {"x": 1}},
                {"default_generation_settings": {"params": {"temperature": "hot"}}},
                {"default_generation_settings": {"params": {"bogus": 1}}}, {"bogus": 1}, {"top_k": 2**40},
                {"temperature": True}, {"seed": -5}, {"top_p": 2.0}, {"stream": True},
                {"temperature": 0.5, "default_generation_settings": {"params": {}}}):
        code, d, _ = c.post("/props", bad)
        _is_400(code, d)
    _, after, _ = c.get("/props")
    assert after == before  # nothing stored
    assert c.post("/props", {"default_generation_settings": {"params": {"n_predict": 3, "top_k": 5}}})[0] == 200
    assert c.post("/props", {"n_keep": 2, "cache_prompt": False})[0] == 200
    params = c.get("/props")[1]["default_generation_settings"]["params"]
    assert (params["n_predict"], params["top_k"], params["n_keep"], params["cache_prompt"]) == (3, 5, 2, False)


def test_integer_fields_are_32_bit() -> None:
    c, eng = make()
    for body in ({"prompt": "a", "n_predict": 2**31}, {"prompt": "a", "top_k": -(2**31) - 1}, {"prompt": "a", "n_cmpl": 17},
                 {"prompt": "a", "seed": 2**32}):
        _is_400(*c.post("/completion", body)[:2])
    _is_400(*c.post("/v1/chat/completions", {"messages": ASK, "max_tokens": 1e20})[:2], "max_tokens")
    _is_400(*c.post("/v1/chat/completions", {"messages": ASK, "n": 17})[:2], "'n'")
    assert eng.submitted == []
    assert c.post("/completion", {"prompt": "a", "seed": 2**32 - 1, "n_predict": 1})[0] == 200


def test_multimodal_input_is_a_400() -> None:
    c, _ = make(ServerConfig(embeddings=True))
    img = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    # llama-server's words without a projector (docs/multimodal.md)
    _is_400(*c.post("/v1/chat/completions", {"messages": [{"role": "user", "content": [img]}]})[:2], "provide the mmproj")
    _is_400(*c.post("/v1/embeddings", {"input": [{"x": 1}]})[:2], "multimodal")
    # the Responses API answers its image, file and audio parts as chat answers its own (it was a
    # 501); input_image becomes an image_url part, refused with llama-server's words
    for kind, words in (("input_image", "provide the mmproj"), ("input_file", "multimodal"), ("input_audio", "multimodal")):
        part = {"type": kind, "image_url": "data:image/png;base64,AAAA"}
        _is_400(*c.post("/v1/responses", {"input": [{"role": "user", "content": [part]}]})[:2], words)


# ---- limits --------------------------------------------------------------------------------------


def test_prompt_and_input_counts_are_limited_before_any_work() -> None:
    c, eng = make(ServerConfig(embeddings=True, max_prompts=4, max_embd_inputs=3))
    _is_400(*c.post("/v1/completions", {"prompt": ["a"] * 5})[:2], "--max-prompts")
    _is_400(*c.post("/v1/completions", {"prompt": ["a"] * 2, "n": 3})[:2], "--max-prompts")
    _is_400(*c.post("/completion", {"prompt": ["a"] * 10000})[:2], "--max-prompts")
    _is_400(*c.post("/v1/embeddings", {"input": ["a"] * 4})[:2], "--max-embd-inputs")
    _is_400(*c.post("/embedding", {"content": ["a"] * 5000})[:2], "--max-embd-inputs")
    assert eng.submitted == []
    assert c.post("/v1/completions", {"prompt": ["a"] * 2, "n": 2, "max_tokens": 1})[0] == 200
    assert c.post("/v1/embeddings", {"input": ["a"] * 3})[0] == 200


def test_body_size_limit_is_a_413_in_error_json() -> None:
    tok = FakeTokenizer()
    c = Client(create_app(FakeEngine(tokenizer=tok), ServerConfig(max_body_size=1000), fake_model(tok)))
    code, d, _ = c.post("/completion", {"prompt": "a" * 2000})
    assert code == 413 and d["error"]["type"] == "invalid_request_error" and "--max-body-size" in d["error"]["message"]
    assert c.post("/completion", {"prompt": "a" * 100, "n_predict": 1})[0] == 200


# ---- the OpenAPI document ------------------------------------------------------------------------


def test_openapi_document_is_generated_from_the_request_models() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    c, _ = make()
    code, doc, _ = c.get("/openapi.json")
    assert code == 200 and doc["openapi"].startswith("3.1")
    posts = {r.rule for r in c.app.url_map.iter_rules() if "POST" in (r.methods or ())}
    documented = {p.replace("{id_slot}", "<int:id_slot>") for p, ops in doc["paths"].items() if "post" in ops}
    assert posts - documented == {"/cors-proxy"}  # every POST route but the proxy
    chat = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert chat == rm.CHAT.json_schema() and chat["properties"]["n"]["maximum"] == 16
    assert "top_k" in chat["properties"] and chat["required"] == ["messages"]
    props = doc["paths"]["/props"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert props["additionalProperties"] is False
    for ops in doc["paths"].values():
        for op in ops.values():
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body is not None:
                jsonschema.Draft202012Validator.check_schema(body)
            assert {"200", "400", "413", "503"} <= set(op["responses"]) or "400" not in op["responses"]


def test_every_route_is_described() -> None:
    """A new endpoint needs its entry in http/openapi.py (and a request model for a body), so
    that the document, and the fuzzer that reads it, cover it."""
    from llamacli.http.openapi import LEFT_OUT, OPS

    c, _ = make()
    endpoints = {r.endpoint for r in c.app.url_map.iter_rules() if not r.endpoint.startswith(LEFT_OUT)}
    assert endpoints - set(OPS) == set()
    assert all(op.body is not None for name, op in OPS.items()
               if any("POST" in (r.methods or ()) for r in c.app.url_map.iter_rules() if r.endpoint == name))


def test_the_model_and_the_handler_agree_on_a_field() -> None:
    """What the document says `n` takes is what the handler takes."""
    c, _ = make()
    hi = rm.CHAT.by_name["n"].schema["maximum"]
    assert c.post("/v1/chat/completions", {"messages": ASK, "n": hi, "max_tokens": 1})[0] == 200
    assert c.post("/v1/chat/completions", {"messages": ASK, "n": hi + 1})[0] == 400


# ---- real server processes -------------------------------------------------------------------------


@pytest.mark.slow
def test_20_mb_body_is_refused_before_it_is_read(tmp_path: Path) -> None:
    model = write_tiny_model("llama", "Q8_0", tmp_path / "tiny.gguf")
    with LlamaServer("-m", str(model), "-c", "256", "-np", "1", "--no-warmup") as srv:
        u = urlparse(srv.url)
        n = 20 * 1024 * 1024
        with socket.create_connection((u.hostname, u.port), timeout=30) as s:
            # the headers announce 20 MB; the answer comes before a byte of the body is sent
            s.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      + f"Content-Length: {n}\r\n\r\n".encode())
            t0 = time.monotonic()
            raw = b""
            while b"}}" not in raw:
                chunk = s.recv(65536)
                assert chunk, raw
                raw += chunk
        head, _, rest = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 413"), raw[:300]
        err = json.loads(rest[rest.index(b"{"):rest.rindex(b"}") + 1])["error"]
        assert err["code"] == 413 and "--max-body-size" in err["message"]
        assert time.monotonic() - t0 < 10
        assert srv.get("/health")[0] == 200


def _post_async(url: str, body: dict[str, Any], out: dict[str, Any]) -> threading.Thread:
    def run() -> None:
        req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                out["body"] = json.loads(r.read())
        except Exception as e:  # noqa: BLE001 - the test reads it
            out["error"] = e
        out["t"] = time.monotonic()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.slow
def test_admin_endpoints_answer_mid_step_and_sigterm_exits_without_waiting_for_it(demo_model: str) -> None:
    """One forward pass over a 1500-token prompt takes seconds (one -ub 2048 batch). While it runs,
    /slots, /metrics, /props and /health answer well under a second (GET /slots used to wait
    for the step); a SIGTERM then releases the client after the 1 s grace and the process exits
    soon after (it used to wait for the step: 15 s measured)."""
    srv = LlamaServer("-m", demo_model, "-c", "4096", "-np", "1", "-ub", "2048", "-b", "2048", "--metrics")
    try:
        srv.start()
        prompt = " ".join(f"w{i}" for i in range(750))  # ~1500 tokens
        out: dict[str, Any] = {}
        t = _post_async(srv.url + "/completion", {"prompt": prompt, "n_predict": 2, "cache_prompt": False}, out)
        deadline = time.monotonic() + 60
        while not srv.get("/slots")[1][0]["is_processing"]:
            assert time.monotonic() < deadline and t.is_alive(), out
            time.sleep(0.02)
        worst = 0.0
        for path in ("/slots", "/metrics", "/props", "/health") * 2:
            t0 = time.monotonic()
            code, body = srv.get(path)
            worst = max(worst, time.monotonic() - t0)
            assert code == 200, (path, body)
        assert worst < 1.0, worst
        assert t.is_alive(), "the step ended before the admin requests: they did not overlap it"

        t0 = time.monotonic()
        srv.send_signal(signal.SIGTERM)
        t.join(30)
        err = out.get("error")  # the client got its answer: a 503, cut by the shutdown
        assert getattr(err, "code", None) == 503 and b"shutting down" in err.read(), out
        released = out["t"]
        assert srv.proc is not None
        rc = srv.proc.wait(30)
        exited = time.monotonic()
        print(f"\nadmin worst {worst * 1e3:.0f} ms; released {released - t0:.2f} s after SIGTERM, "
              f"exited {exited - released:.2f} s after the release")
        assert rc == 0
        assert exited - released < 3.0, srv.log()[-2000:]
    finally:
        srv.__exit__()
