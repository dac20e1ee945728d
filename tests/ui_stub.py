"""A tiny OpenAI-compatible stub server for the web UI's browser tests.

It serves the real page (http/static and the web-app files, with the same headers as
`llama serve`) and answers /v1/models, /props, /slots, /tools and /v1/chat/completions with
canned data and SSE, so that the rendering, injection, stop, branch, progress and tool-loop
tests never depend on what a model generates. With `router=True` it is a router as llama-server
has it (/props role router, /models with statuses, /models/load, /props?model=). Every chat
request body is kept in `requests`, every POST /tools body in `tool_calls`, every load in
`loads`. Standard library only; runs in a thread on 127.0.0.1, port 0.

    with StubServer() as stub:
        stub.replies.append(Reply(["Hello", " **world**"]))
        page.goto(stub.url)
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from llamacli.http import ui, ui_assets

ASSISTANT = ".msg.assistant"  # the answers on the page


@dataclass
class Reply:
    """One streamed answer: content pieces (one SSE chunk each), optional reasoning and tool
    calls sent first, `delay` seconds between chunks, or an HTTP error status instead.
    `wait` seconds pass after the opening chunk (the prompt being processed), during which
    the `progress` chunks (prompt_progress objects) are sent, evenly spread."""

    pieces: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    delay: float = 0.02
    status: int = 200
    error: str = ""
    wait: float = 0.0
    progress: list[dict[str, int]] = field(default_factory=list)


@dataclass
class StubModel:
    """A router's model: its status, modalities and how long a load takes (`fail`: the load
    fails, with this as the child's last log line)."""

    id: str
    status: str = "unloaded"
    vision: bool = False
    audio: bool = False
    load_time: float = 0.3
    fail: str = ""


STUB_TOOLS = [
    {"tool": "read_file", "display_name": "Read file", "type": "server", "permissions": {"write": False}, "uses_cwd": True,
     "definition": {"type": "function", "function": {"name": "read_file", "description": "Read a file",
                                                     "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                                                    "required": ["path"]}}}},
    {"tool": "write_file", "display_name": "Write file", "type": "server", "permissions": {"write": True}, "uses_cwd": True,
     "definition": {"type": "function", "function": {"name": "write_file", "description": "Write a file",
                                                     "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                                                                     "content": {"type": "string"}}}}}},
    {"tool": "exec_shell_command", "display_name": "Run a command", "type": "server", "permissions": {"write": True},
     "uses_cwd": True,
     "definition": {"type": "function", "function": {"name": "exec_shell_command", "description": "Run a shell command",
                                                     "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}},
]


class StubServer:
    def __init__(self, model: str = "/models/cache/stub-model-Q4_K_M.gguf", router: bool = False,
                 models: list[StubModel] | None = None) -> None:
        self.model = model
        self.router = router
        self.models = {m.id: m for m in (models or [])}
        self.replies: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.default = Reply(["(no canned reply)"])
        self.slots: list[dict[str, Any]] | None = []  # GET /slots; None: 501 as with --no-slots
        # GET /tools: none by default (an empty list, so that the browser logs no failed request);
        # None: 403 as from a server without --tools
        self.tools: list[dict[str, Any]] | None = []
        self.tool_results: dict[str, Any] = {}  # tool name -> its POST /tools answer (list: streamed chunks)
        self.tool_calls: list[dict[str, Any]] = []
        self.loads: list[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802
                url = urlsplit(self.path)
                path, query = url.path, parse_qs(url.query)
                if path in ("/", "/index.html"):
                    self._file("index.html")
                elif path.startswith("/static/"):
                    self._file(path[len("/static/"):])
                elif path in ui_assets.ASSETS:
                    self._send(200, ui_assets.ASSETS[path][0], ui_assets.asset_bytes(path))
                elif path in ("/v1/models", "/models"):
                    self._json({"object": "list", "data": stub.model_list()})
                elif path == "/props":
                    self._json(stub.props(query.get("model", [""])[0]))
                elif path == "/slots":
                    if stub.slots is None:
                        self._json({"error": {"code": 501, "message": "This server does not support slots endpoint."}}, 501)
                    else:
                        self._json(stub.slots)
                elif path == "/tools":
                    if stub.tools is None:
                        self._json({"error": {"code": 403, "message": "this feature is disabled"}}, 403)
                    else:
                        self._json(stub.tools)
                else:
                    self._json({"error": {"code": 404, "message": "File Not Found"}}, 404)

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n) or b"{}")
                if self.path == "/models/load":
                    self._json(*stub.load(body.get("model", "")))
                elif self.path == "/tools":
                    stub.tool_calls.append(body)
                    result = stub.tool_results.get(body.get("tool"), {"plain_text_response": "ok"})
                    if isinstance(result, list):
                        self._sse([{"chunk": c} for c in result] + [{"done": True}], 0.05)
                    else:
                        self._json(result)
                elif self.path == "/v1/chat/completions":
                    stub.requests.append(body)
                    reply = stub.replies.popleft() if stub.replies else stub.default
                    if reply.status != 200:
                        self._json({"error": {"code": reply.status, "message": reply.error}}, reply.status)
                    else:
                        self._answer(reply)
                else:
                    self._json({"error": {"code": 404, "message": "File Not Found"}}, 404)

            def _answer(self, reply: Reply) -> None:
                def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
                    return {"object": "chat.completion.chunk", "model": stub.model,
                            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}

                head = {"role": "assistant", "content": None}
                frames: list[tuple[dict[str, Any], float]] = [(chunk(head), 0.0)]
                gap = reply.wait / (len(reply.progress) + 1)
                frames += [(chunk(head, prompt_progress=p), gap) for p in reply.progress]
                body = [chunk({"reasoning_content": r}) for r in reply.reasoning]
                body += [chunk({"tool_calls": [{"index": i, "id": f"call_{i}", "type": "function", "function": tc}]})
                         for i, tc in enumerate(reply.tool_calls)]
                body += [chunk({"content": p}) for p in reply.pieces]
                body.append(chunk({}, "tool_calls" if reply.tool_calls else "stop",
                                  timings={"prompt_n": 7, "prompt_per_second": 70.0, "predicted_n": len(reply.pieces),
                                           "predicted_per_second": 42.5}))
                frames += [(c, gap if i == 0 and reply.wait else reply.delay) for i, c in enumerate(body)]
                self._frames(frames)

            def _sse(self, events: list[Any], delay: float) -> None:
                self._frames([(e, delay) for e in events])

            def _frames(self, frames: list[tuple[Any, float]]) -> None:
                """SSE `data:` frames, each after its pause, then [DONE]; a client that leaves ends it."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    for obj, pause in frames:
                        time.sleep(pause)
                        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
                        self.wfile.flush()
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the page stopped the request
                self.close_connection = True

            def _file(self, name: str) -> None:
                try:
                    body = ui.read_static(name)
                except Exception:  # noqa: BLE001 - not found / refused
                    self._json({"error": {"code": 404, "message": "File Not Found"}}, 404)
                    return
                self._send(200, ui.content_type(name), body, {"Content-Security-Policy": ui.CSP})

            def _json(self, obj: Any, status: int = 200) -> None:
                self._send(status, "application/json", json.dumps(obj).encode())

            def _send(self, status: int, ctype: str, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="ui-stub", daemon=True)

    # ---- what the handler answers --------------------------------------------------------------
    def model_list(self) -> list[dict[str, Any]]:
        if not self.router:
            return [{"id": self.model, "object": "model"}]
        out = []
        for m in self.models.values():
            status: dict[str, Any] = {"value": m.status}
            if m.fail and m.status == "unloaded" and m.id in self.loads:
                status.update(failed=True, exit_code=1, log=["loading...", m.fail])
            inputs = ["text"] + (["image"] if m.vision else []) + (["audio"] if m.audio else [])
            out.append({"id": m.id, "object": "model", "status": status, "architecture": {"input_modalities": inputs}})
        return out

    def props(self, model: str) -> dict[str, Any]:
        if self.router and not model:
            return {"role": "router", "max_instances": 4, "models_autoload": True, "model_alias": "llama-server",
                    "model_path": "none", "default_generation_settings": {"params": {}, "n_ctx": 0}, "build_info": "stub"}
        m = self.models.get(model)
        return {
            "model_alias": model or self.model, "model_path": model or self.model, "total_slots": 2,
            "build_info": "stub", "chat_template_caps": {"supports_tools": True},
            "modalities": {"vision": bool(m and m.vision), "audio": bool(m and m.audio)},
            "default_generation_settings": {"n_ctx": 2048, "params": {"temperature": 0.8, "top_k": 40, "n_predict": -1, "seed": 4294967295}},
        }

    def load(self, name: str) -> tuple[dict[str, Any], int]:
        m = self.models.get(name)
        if m is None:
            return {"error": {"code": 404, "message": "model is not found"}}, 404
        if m.status != "unloaded":
            return {"error": {"code": 400, "message": "model is already running"}}, 400
        self.loads.append(name)
        m.status = "loading"

        def loaded() -> None:
            m.status = "unloaded" if m.fail else "loaded"

        threading.Timer(m.load_time, loaded).start()
        return {"success": True}, 200

    def __enter__(self) -> "StubServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# ---- what the browser tests share (import the fixture: `from tests.ui_stub import stub`) ----------


@pytest.fixture()
def stub() -> Iterator[StubServer]:
    with StubServer() as s:
        yield s


def open_page(page: Any, stub: StubServer) -> Any:
    """The page, once it has read the server's /props."""
    page.goto(stub.url)
    page.wait_for_selector("#model-meta:has-text('slots')")
    return page


def send(page: Any, text: str) -> None:
    page.fill("#input", text)
    page.press("#input", "Enter")


def wait_idle(page: Any, timeout: float = 20_000) -> None:
    """Until the answer (and its tool calls) are over: Send is back."""
    page.wait_for_selector("#send:not([hidden])", state="visible", timeout=timeout)
