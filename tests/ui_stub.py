"""A tiny OpenAI-compatible stub server for the web UI's browser tests.

It serves the real page (http/static, with the same headers as `llama serve`) and answers
/v1/models, /props and /v1/chat/completions with canned SSE, so that the rendering, injection,
stop and branch tests never depend on what a model generates. Every chat request body is kept
in `requests`. Standard library only; runs in a thread on 127.0.0.1, port 0.

    with StubServer() as stub:
        stub.replies.append(Reply(["Hello", " **world**"]))
        page.goto(stub.url)
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from llamacli.http import ui


@dataclass
class Reply:
    """One streamed answer: content pieces (one SSE chunk each), optional reasoning and tool
    calls sent first, `delay` seconds between chunks, or an HTTP error status instead."""

    pieces: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    delay: float = 0.02
    status: int = 200
    error: str = ""


class StubServer:
    def __init__(self, model: str = "/models/cache/stub-model-Q4_K_M.gguf") -> None:
        self.model = model
        self.replies: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.default = Reply(["(no canned reply)"])
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802
                path = self.path.split("?", 1)[0]
                if path in ("/", "/index.html"):
                    self._file("index.html", "text/html; charset=utf-8")
                elif path.startswith("/static/"):
                    name = path[len("/static/"):]
                    ctype = {"js": "text/javascript", "css": "text/css", "woff2": "font/woff2"}.get(
                        name.rsplit(".", 1)[-1], "application/octet-stream")
                    self._file(name, ctype)
                elif path in ("/v1/models", "/models"):
                    self._json({"object": "list", "data": [{"id": stub.model, "object": "model"}]})
                elif path == "/props":
                    self._json({
                        "model_alias": stub.model, "model_path": stub.model, "total_slots": 2,
                        "build_info": "stub", "chat_template_caps": {"supports_tools": True},
                        "default_generation_settings": {"n_ctx": 2048, "params": {"temperature": 0.8, "top_k": 40, "n_predict": -1, "seed": 4294967295}},
                    })
                else:
                    self._json({"error": {"code": 404, "message": "File Not Found"}}, 404)

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n) or b"{}")
                if self.path != "/v1/chat/completions":
                    self._json({"error": {"code": 404, "message": "File Not Found"}}, 404)
                    return
                stub.requests.append(body)
                reply = stub.replies.popleft() if stub.replies else stub.default
                if reply.status != 200:
                    self._json({"error": {"code": reply.status, "message": reply.error}}, reply.status)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    self._stream(reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the page stopped the request
                self.close_connection = True

            def _stream(self, reply: Reply) -> None:
                def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
                    obj = {"object": "chat.completion.chunk", "model": stub.model,
                           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
                    self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
                    self.wfile.flush()
                    time.sleep(reply.delay)

                chunk({"role": "assistant", "content": None})
                for r in reply.reasoning:
                    chunk({"reasoning_content": r})
                for i, tc in enumerate(reply.tool_calls):
                    chunk({"tool_calls": [{"index": i, "id": f"call_{i}", "type": "function", "function": tc}]})
                for p in reply.pieces:
                    chunk({"content": p})
                n = len(reply.pieces)
                chunk({}, "tool_calls" if reply.tool_calls else "stop",
                      timings={"prompt_n": 7, "prompt_per_second": 70.0, "predicted_n": n, "predicted_per_second": 42.5})
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

            def _file(self, name: str, ctype: str) -> None:
                try:
                    body = ui.read_static(name)
                except Exception:  # noqa: BLE001 - not found / refused
                    self._json({"error": {"code": 404, "message": "File Not Found"}}, 404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Security-Policy", ui.CSP)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _json(self, obj: Any, status: int = 200) -> None:
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="ui-stub", daemon=True)

    def __enter__(self) -> "StubServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
