"""A stand-in for a router's child `llama serve` (tests/test_router_app.py): it speaks the part
of the child's protocol the router uses, starts in a blink and misbehaves on request.

    python -m tests.fake_router_child [--stop-delay S] [--die-mid-stream] ... --alias NAME

It prints `listening on http://127.0.0.1:PORT`, answers GET /health and /v1/models, and answers
any POST with `{"model": NAME, "content": "ok", "pid": PID}`, or with an SSE stream of three
chunks (`"stream": true`), after which it exits at once with --die-mid-stream (a crash: the
chunked body is never ended) or ends the stream with [DONE]. On SIGTERM it stops accepting
connections at once and exits --stop-delay seconds later (a real child finishing its work); on
SIGUSR1 the same, with exit code 1 (a child going away unasked, not yet seen to exit).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _arg(argv: list[str], name: str, default: str = "") -> str:
    return argv[argv.index(name) + 1] if name in argv else default


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    alias = ""
    die_mid_stream = False

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _json(self, obj: Any) -> None:
        raw = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.send_header("Connection", "close")  # each request on its own connection: a closed socket is seen
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        if self.path.startswith("/health"):
            self._json({"status": "ok"})
        else:
            self._json({"data": [{"id": self.alias, "meta": {"n_vocab": 7}}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if not body.get("stream"):
            self._json({"model": self.alias, "content": "ok", "pid": os.getpid()})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        for i in range(3):
            self._chunk(b'data: {"content": "piece %d"}\n\n' % i)
            time.sleep(0.05)
        if self.die_mid_stream:
            self._chunk(b'data: {"content": "half a mes')  # a message cut in two, then the crash
            os._exit(1)
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")

    def _chunk(self, b: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
        self.wfile.flush()


def main(argv: list[str]) -> None:
    Handler.alias = _arg(argv, "--alias", "fake")
    Handler.die_mid_stream = "--die-mid-stream" in argv
    stop_delay = float(_arg(argv, "--stop-delay", "0"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True

    def stop(code: int) -> None:
        server.shutdown()
        server.server_close()  # no new connections from here on
        time.sleep(stop_delay)
        os._exit(code)

    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=stop, args=(0,), daemon=True).start())
    signal.signal(signal.SIGUSR1, lambda *_: threading.Thread(target=stop, args=(1,), daemon=True).start())
    print(f"llama serve: listening on http://127.0.0.1:{server.server_address[1]} (fake)", flush=True)
    server.serve_forever()
    threading.Event().wait()  # stop() exits the process


if __name__ == "__main__":
    main(sys.argv[1:])
