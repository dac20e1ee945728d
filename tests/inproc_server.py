"""An app served by Hypercorn in a thread of the test process, on 127.0.0.1 (http/server.py's
serve_asgi, so with every ASGI wrapper a real `llama serve` has): for tests of what only a real
connection shows (keep-alive, early answers) without starting a process or loading a model.

    with serve_in_thread(app) as url:
        httpx2.get(url + "/health")

`clients` (the remote ports, one per request) tells which requests shared a connection.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from llamacli.http.server import Listen, bind_sockets, serve_asgi, socket_url


class RecordClients:
    """ASGI wrapper: the client port of each request, in order."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.ports: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            self.ports.append(int((scope.get("client") or ("", 0))[1]))
        await self.app(scope, receive, send)


@contextmanager
def serve_in_thread(app: Any, clients: RecordClients | None = None) -> Iterator[str]:
    """Serve `app` (through `clients` when given: pass RecordClients(app)) until the block ends."""
    socks = bind_sockets("127.0.0.1", 0)
    url = socket_url(socks[0], tls=False)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    started = threading.Event()

    async def main() -> None:
        started.set()
        await serve_asgi(clients or app, socks, Listen(grace=0.0), stop.wait)

    t = threading.Thread(target=loop.run_until_complete, args=(main(),), name="test-hypercorn", daemon=True)
    t.start()
    started.wait(10)
    try:
        yield url
    finally:
        loop.call_soon_threadsafe(stop.set)
        t.join(10)
        loop.close()
