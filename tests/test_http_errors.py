"""http/errors.py: llama-server's error JSON for every failure: mapping, 501 for disabled
endpoints, 4xx (never 500) for bad requests."""

from __future__ import annotations

from llamacli.core.errors import SlotBusy
from llamacli.http.config import ServerConfig
from llamacli.http.errors import to_api_error
from tests.http_app_client import Client, client, make  # noqa: F401 (a fixture)


def test_error_mapping() -> None:
    from llamacli.core.errors import ContextOverflow, InvalidRequest, ModelLoadError

    e = to_api_error(ContextOverflow(600, 512))
    assert e.status == 400 and e.body()["error"] == {
        "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 600, "n_ctx": 512,
        "message": "request (600 tokens) exceeds the available context size (512 tokens), try increasing it",
    }
    assert to_api_error(InvalidRequest("top_p must be between 0 and 1")).status == 400
    assert to_api_error(SlotBusy("busy")).status == 409
    assert to_api_error(ModelLoadError("x", "bad")).status == 500
    e = to_api_error(KeyError("secret internals"))
    assert e.status == 500 and "secret" not in e.message and e.type == "server_error"


def test_disabled_endpoints_are_501_in_llama_server_shape() -> None:
    c, _ = make(ServerConfig(slots=False))
    for method, path, body in (("POST", "/v1/embeddings", {"input": "a"}), ("POST", "/embedding", {"content": "a"}),
                               ("GET", "/metrics", None), ("GET", "/slots", None), ("POST", "/props", {}),
                               ("POST", "/slots/0?action=erase", {}), ("POST", "/infill", {"input_prefix": "a"})):
        code, d, _ = c.request(method, path, body)
        assert code == 501 and d["error"]["type"] == "not_supported_error", (path, d)


def test_bad_requests_are_4xx_never_500(client: Client) -> None:
    cases = [
        ("/completion", None, b"{not json"),
        ("/completion", None, b""),
        ("/completion", None, b"[]"),
        ("/completion", {"n_predict": 3}, None),
        ("/completion", {"prompt": "a", "n_predict": -5}, None),
        ("/completion", {"prompt": "a", "n_predict": "x"}, None),
        ("/completion", {"prompt": "a", "top_p": 3}, None),
        ("/completion", {"prompt": "a", "mirostat": 7}, None),
        ("/completion", {"prompt": "a", "stop": [1]}, None),
        ("/completion", {"prompt": "a", "id_slot": 5}, None),
        ("/completion", {"prompt": "a", "samplers": ["nope"]}, None),
        ("/v1/chat/completions", {"messages": "hi"}, None),
        ("/v1/chat/completions", {"messages": []}, None),
        ("/v1/chat/completions", {"messages": [{"content": "hi"}]}, None),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, None),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 0}, None),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}, None),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "yaml"}}, None),
        ("/completion", {"prompt": "a", "grammar": 5}, None),
        ("/v1/messages", {"max_tokens": 4, "messages": [{"role": "system", "content": "x"}]}, None),
        ("/tokenize", {}, None),
    ]
    for path, body, raw in cases:
        code, d, _ = client.post(path, body, data=raw)
        assert 400 <= code < 500 and d["error"]["type"] == "invalid_request_error", (path, body, raw, d)
        assert isinstance(d["error"]["message"], str) and d["error"]["code"] == code
    # any model name is served (llama-server in single-model mode), aliases or not
    code, d, _ = client.post("/v1/chat/completions", {"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]})
    assert code == 200 and d["model"] == "fake"
    code, d, _ = client.post("/completion", {"prompt": "x" * 500})
    assert code == 400 and d["error"]["type"] == "exceed_context_size_error" and d["error"]["n_ctx"] == 128
    code, d, _ = client.get("/no/such/path")
    assert code == 404 and d["error"]["type"] == "not_found_error"
    code, d, _ = client.get("/completion")
    assert code == 405 and d["error"]["code"] == 405
