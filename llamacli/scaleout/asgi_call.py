"""One HTTP request run through an ASGI app in-process, its messages yielded as the app sends
them: how a replica serves a `ForwardedRequest` with the whole Quart app (every route, the
web UI, API keys, errors), a stream chunk by chunk. No Ray here.

The app reads the body once; after that `receive` waits until the caller stops reading (the
client went away, or Ray cancelled the call), then says `http.disconnect`, as a server does,
so the app cancels its tasks. An app that does not finish `CLOSE_WAIT` seconds after that is
cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from llamacli.scaleout.request import ForwardedRequest

Message = MutableMapping[str, Any]
ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]
CLOSE_WAIT = 5.0


def http_scope(req: ForwardedRequest) -> dict[str, Any]:
    """The ASGI scope of the request as the replica's app sees it."""
    host = (req.header(b"host") or b"localhost").decode("latin-1")
    name, _, port = host.partition(":")
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
        "method": req.method, "scheme": "http", "path": req.path, "raw_path": req.path.encode(),
        "query_string": req.query_string, "root_path": "", "headers": list(req.headers),
        "client": req.client, "server": (name, int(port) if port.isdigit() else 80), "extensions": {},
    }


async def call_asgi(app: ASGIApp, req: ForwardedRequest) -> AsyncIterator[Message]:
    """The ASGI messages `app` sends in answer to `req`, until the response's last body."""
    out: asyncio.Queue[Message | None] = asyncio.Queue()
    gone = asyncio.Event()
    body_read = False

    async def receive() -> Message:
        nonlocal body_read
        if not body_read:
            body_read = True
            return {"type": "http.request", "body": req.body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(msg: Message) -> None:
        await out.put(msg)

    task = asyncio.ensure_future(app(http_scope(req), receive, send))
    task.add_done_callback(lambda _: out.put_nowait(None))
    try:
        while (msg := await out.get()) is not None:
            yield msg
            if msg["type"] == "http.response.body" and not msg.get("more_body", False):
                break
        if task.done():
            task.result()  # the app's own exception, if it raised one
    finally:
        gone.set()
        if not task.done():
            done, _ = await asyncio.wait([task], timeout=CLOSE_WAIT)
            if not done:
                task.cancel()
