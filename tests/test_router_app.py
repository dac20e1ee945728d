"""The router's app in-process (no children started): it shares the single-model app's gate
(API keys, error JSON, CORS) and answers its own endpoints in llama-server's shapes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from llamacli.http.app import create_app
from llamacli.http.config import ServerConfig
from llamacli.http.router import ModelSpec, Supervisor
from llamacli.http.router_routes import RouterState, bp


def _calls(config: ServerConfig, requests: list[tuple[str, str, Any, dict[str, str]]]) -> list[tuple[int, Any]]:
    specs = [ModelSpec("m1", ["-m", "/x/m1.gguf"], "/x/m1.gguf", "models_dir", aliases=("one",)),
             ModelSpec("m2", ["-m", "/x/m2.gguf"], "/x/m2.gguf", "preset", tags=("t",))]
    state = RouterState(config, Supervisor(specs, ["llama", "serve"], models_max=3), autoload=False)
    app = create_app(state=state, blueprints=[bp])

    async def go() -> list[tuple[int, Any]]:
        c = app.test_client()
        out = []
        for method, path, body, headers in requests:
            r = await c.open(path, method=method, headers=headers, **({"json": body} if body is not None else {}))
            text = await r.get_data(as_text=True)
            out.append((r.status_code, json.loads(text) if "json" in r.headers.get("Content-Type", "") else text))
        return out

    return asyncio.run(go())


def test_router_endpoints_and_errors() -> None:
    (s1, models), (s2, props), (s3, missing), (s4, unknown), (s5, unloaded), (s6, not_running), (s7, no_model) = _calls(
        ServerConfig(ui=False),
        [("GET", "/models", None, {}), ("GET", "/props", None, {}),
         ("POST", "/v1/chat/completions", {"messages": []}, {}),
         ("POST", "/v1/chat/completions", {"model": "zz", "messages": []}, {}),
         ("POST", "/v1/chat/completions", {"model": "one", "messages": []}, {}),  # by alias; --no-models-autoload
         ("POST", "/models/unload", {"model": "m2"}, {}), ("POST", "/models/load", {"model": "zz"}, {})],
    )
    assert s1 == 200 and models["object"] == "list"
    m1, m2 = models["data"]
    assert m1["id"] == "m1" and m1["aliases"] == ["one"] and m1["source"] == "models_dir"
    assert m1["status"] == {"value": "unloaded", "args": ["llama", "serve", "-m", "/x/m1.gguf", "--host", "127.0.0.1",
                                                          "--port", "0", "--alias", "m1"]}
    assert m2["tags"] == ["t"] and m2["owned_by"] == "llamacpp" and m2["path"] == "/x/m2.gguf"
    assert s2 == 200 and props["role"] == "router" and props["max_instances"] == 3 and props["models_autoload"] is False
    assert (s3, missing["error"]["message"]) == (400, "model name is missing from the request")
    assert (s4, unknown["error"]["message"]) == (400, "model 'zz' not found")
    assert (s5, unloaded["error"]["message"]) == (400, "model is not loaded")
    assert (s6, not_running["error"]["message"]) == (400, "model is not running")
    assert (s7, no_model["error"]["type"]) == (404, "not_found_error")


def test_router_checks_api_keys_itself() -> None:
    (s1, _), (s2, err), (s3, _) = _calls(
        ServerConfig(ui=False, api_keys=["secret"]),
        [("GET", "/health", None, {}), ("GET", "/models", None, {}),
         ("GET", "/models", None, {"Authorization": "Bearer secret"})],
    )
    assert s1 == 200  # public
    assert s2 == 401 and err["error"]["type"] == "authentication_error"
    assert s3 == 200
