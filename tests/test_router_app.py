"""The router's app in-process (no children started): it shares the single-model app's gate
(API keys, error JSON, CORS) and answers its own endpoints in llama-server's shapes."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from llamacli.http.app import create_app
from llamacli.http.config import ServerConfig
from llamacli.http.router import ModelSpec, Supervisor
from llamacli.http.router_routes import RouterState, bp

R = TypeVar("R")


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


def test_a_router_serves_the_chat_page() -> None:
    """The page (with its files and web-app manifest) on a router too, public as in single-model
    mode; its model selector then talks to /models. --no-ui: 404, never forwarded to a model."""
    from llamacli.http.router_server import router_app

    def calls(config: ServerConfig, paths: list[str]) -> list[tuple[int, str, str]]:
        specs = [ModelSpec("m1", ["-m", "/x/m1.gguf"], "/x/m1.gguf", "models_dir")]
        app = router_app(RouterState(config, Supervisor(specs, ["llama", "serve"]), autoload=False))

        async def go() -> list[tuple[int, str, str]]:
            c = app.test_client()
            out = []
            for path in paths:
                r = await c.get(path)
                out.append((r.status_code, r.headers.get("Content-Type", ""), r.headers.get("Content-Security-Policy", "")))
            return out

        return asyncio.run(go())

    paths = ["/", "/static/js/app.js", "/static/vendor/pdfjs/pdf.min.mjs", "/manifest.webmanifest", "/models"]
    page, js, mjs, manifest, models = calls(ServerConfig(api_keys=["secret"]), paths)
    assert page[0] == 200 and page[1].startswith("text/html") and "script-src 'self'" in page[2]
    assert js[:2] == mjs[:2] == (200, "text/javascript; charset=utf-8")
    assert manifest[:2] == (200, "application/manifest+json")
    assert models[0] == 401  # the API still needs the key
    assert [c for c, _, _ in calls(ServerConfig(ui=False), paths[:4])] == [404, 404, 404, 404]


def test_a_body_nested_too_deep_is_a_400_on_every_route() -> None:
    """As the single-model server answers it (it was a 500 RecursionError)."""
    deep = ('{"model": "m1", "x": ' + "[" * 100_000 + "]" * 100_000 + "}").encode()
    specs = [ModelSpec("m1", ["-m", "/x/m1.gguf"], "/x/m1.gguf", "models_dir")]
    app = create_app(state=RouterState(ServerConfig(ui=False), Supervisor(specs, ["llama", "serve"]), autoload=False),
                     blueprints=[bp])

    async def go() -> list[tuple[int, Any]]:
        c = app.test_client()
        out = []
        for path in ("/v1/chat/completions", "/completion", "/models/load", "/models/unload"):
            r = await c.post(path, data=deep, headers={"Content-Type": "application/json"})
            out.append((r.status_code, json.loads(await r.get_data(as_text=True))))
        return out

    for status, err in asyncio.run(go()):
        assert status == 400 and err["error"]["type"] == "invalid_request_error", err
        assert "invalid JSON" in err["error"]["message"]


# ---- a router over stand-in children (tests/fake_router_child.py): races and crashes ---------------

FAKE_CHILD = [sys.executable, "-m", "tests.fake_router_child"]
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _over_fake_children(args: list[str], go: Callable[[Any, Supervisor], Awaitable[R]]) -> tuple[R, list[str]]:
    """Run `go(test_client, supervisor)` against a router of one model `m` whose child is the
    stand-in started with `args`; every child is stopped afterwards. Returns go's result and the log."""
    import httpx2

    logs: list[str] = []

    async def main() -> R:
        sup = Supervisor([ModelSpec("m", args, "/x/m.gguf", "models_dir")], FAKE_CHILD, models_max=2, log=logs.append)
        sup.http = httpx2.AsyncClient(timeout=httpx2.Timeout(30.0))
        app = create_app(state=RouterState(ServerConfig(ui=False), sup, autoload=True), blueprints=[bp])
        try:
            return await asyncio.wait_for(go(app.test_client(), sup), 60)
        finally:
            await sup.stop_all()
            await sup.http.aclose()

    return asyncio.run(main()), logs


async def _status(c: Any) -> str:
    r = await c.get("/models")
    (m,) = (await r.get_json())["data"]
    return str(m["status"]["value"])


def test_a_chat_racing_an_unload_waits_and_loads_the_model_again() -> None:
    """/models says `unloading` until the child has exited (it said `loaded`), and a chat sent
    meanwhile waits for the exit and is answered by a new child (it was a 500 "failed to load"
    or a 503)."""

    async def go(c: Any, sup: Supervisor) -> tuple[list[Any], list[str]]:
        first = await c.post("/v1/chat/completions", json=CHAT)
        assert first.status_code == 200, await first.get_data(as_text=True)
        seen = [await _status(c)]
        r = await c.post("/models/unload", json={"model": "m"})
        assert r.status_code == 200
        seen.append(await _status(c))  # the child takes 1 s to exit
        second = await c.post("/v1/chat/completions", json=CHAT)
        assert second.status_code == 200, await second.get_data(as_text=True)
        seen.append(await _status(c))
        return [(await first.get_json())["pid"], (await second.get_json())["pid"]], seen

    (pids, seen), logs = _over_fake_children(["--stop-delay", "1"], go)
    assert seen == ["loaded", "unloading", "loaded"], logs
    assert pids[0] != pids[1]  # answered by the model loaded again
    assert any("model m: unloading" in line for line in logs) and any("loading /x/m.gguf" in line for line in logs)


def test_a_child_gone_before_it_took_the_request_is_replaced() -> None:
    """The child's socket refuses the request while the router still counts it loaded (it has
    not been seen to exit): the request waits for the exit and goes to the model loaded anew
    (it was a 503 "not reachable")."""
    import os
    import signal
    import socket
    from urllib.parse import urlparse

    async def go(c: Any, sup: Supervisor) -> list[int]:
        first = await c.post("/v1/chat/completions", json=CHAT)
        pid = (await first.get_json())["pid"]
        u = urlparse(sup.instances["m"].url)
        os.kill(pid, signal.SIGUSR1)  # closes its socket now, exits 1 s later
        while True:  # until its port refuses connections
            try:
                socket.create_connection((u.hostname, u.port), timeout=1).close()
            except OSError:
                break
            await asyncio.sleep(0.02)
        assert await _status(c) == "loaded"
        second = await c.post("/v1/chat/completions", json=CHAT)
        assert second.status_code == 200, await second.get_data(as_text=True)
        return [pid, (await second.get_json())["pid"]]

    pids, logs = _over_fake_children(["--stop-delay", "1"], go)
    assert pids[0] != pids[1], logs


@pytest.mark.parametrize("path, body, end", [
    ("/v1/chat/completions", {**CHAT, "stream": True}, 'data: {"error":{"code":500,'),
    ("/completion", {"model": "m", "prompt": "hi", "stream": True}, 'data: {"error":{"code":500,'),
    ("/v1/messages", {**CHAT, "max_tokens": 8, "stream": True}, 'event: error\ndata: {"type":"error","error":{"type":"server_error"'),
])
def test_a_stream_whose_child_dies_ends_with_an_error_event(path: str, body: dict[str, Any], end: str) -> None:
    """A killed child's stream was cut off with no error event and no [DONE]: the client now gets
    its API's error event (then [DONE] on OpenAI's routes), and never half an SSE message."""

    async def go(c: Any, sup: Supervisor) -> str:
        r = await c.post(path, json=body)
        assert r.status_code == 200
        return str(await r.get_data(as_text=True))

    text, _ = _over_fake_children(["--die-mid-stream"], go)
    assert text.count("piece") == 3 and "half a mes" not in text, text
    tail = text[text.index(end):]
    assert "stopped while answering" in tail, text
    assert tail.endswith("data: [DONE]\n\n") == path.startswith("/v1/chat"), text
