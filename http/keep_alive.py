"""Keep-alive for answers sent before the request body was read (a 401, a 413, `POST
/slots/N?action=erase`, an invalid action): the connection stays usable, or says it closes.

Hypercorn closes an HTTP/1.1 connection whose request body has not been fully received when
the response ends, without a `Connection: close` header: a keep-alive client's next request on
that connection fails ("Server disconnected without sending a response"), and a client still
uploading its body gets a broken pipe instead of the answer. Quart reads (and past
MAX_CONTENT_LENGTH discards) the body while the handler runs; this ASGI middleware makes the
response wait for the rest of it, bounded:

- the status line, headers and body go out at once (a 413 is sent before its body arrives);
  only the message that ends the response waits until the request body is complete, at most
  `DRAIN_BYTES` more bytes and `DRAIN_SECONDS`;
- when the rest of the body is unknown (chunked) or larger than `DRAIN_BYTES`, the response
  carries `Connection: close` (and a chunked body is still drained within the bounds, so that
  its sender reads the answer rather than a reset).
"""

from __future__ import annotations

import asyncio

from llamacli.http.header_case import ASGIApp, Http1Middleware, Message, Receive, Scope, Send

DRAIN_BYTES = 64 << 20  # request body read and discarded after an early answer, at most
DRAIN_SECONDS = 10.0  # time the end of an early answer waits for the rest of the body, at most


class DrainBody(Http1Middleware):
    """ASGI middleware: an early answer keeps the connection usable, or announces its close."""

    def __init__(self, app: ASGIApp, drain_bytes: int = DRAIN_BYTES, drain_seconds: float = DRAIN_SECONDS) -> None:
        super().__init__(app)
        self.drain_bytes = drain_bytes
        self.drain_seconds = drain_seconds

    async def http1(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _Exchange(scope, self.drain_bytes, self.drain_seconds).run(self.app, receive, send)


class _Exchange:
    """One request and its response: how much of the body arrived, and when it is complete."""

    def __init__(self, scope: Scope, drain_bytes: int, drain_seconds: float) -> None:
        self.scope = scope
        self.length = _content_length(scope)  # None: chunked (or no valid Content-Length)
        self.drain_bytes = drain_bytes
        self.drain_seconds = drain_seconds
        self.received = 0
        self.complete = False  # the body's last message (or the client's disconnect) came
        self.enough = asyncio.Event()  # complete, or drain_bytes more arrived after the answer began
        self.limit: int | None = None  # `received` past which the answer stops waiting
        self.drain = False  # the answer's end waits for the rest of the body

    async def run(self, app: ASGIApp, receive: Receive, send: Send) -> None:
        await app(self.scope, self._receive(receive), self._send(send))

    def _receive(self, receive: Receive) -> Receive:
        async def counting_receive() -> Message:
            message = await receive()
            if message.get("type") == "http.request":
                self.received += len(message.get("body", b""))
                self.complete = self.complete or not message.get("more_body", False)
            elif message.get("type") == "http.disconnect":
                self.complete = True
            if self.complete or (self.limit is not None and self.received > self.limit):
                self.enough.set()
            return message

        return counting_receive

    def _send(self, send: Send) -> Send:
        async def draining_send(message: Message) -> None:
            kind = message.get("type")
            if kind == "http.response.start" and not self.complete:
                left = None if self.length is None else self.length - self.received
                self.drain = left is None or left <= self.drain_bytes
                self.limit = self.received + self.drain_bytes
                if left is None or left > self.drain_bytes:  # it may not all be read: say the connection ends
                    message = dict(message)
                    message["headers"] = [*message.get("headers", []), (b"connection", b"close")]
            elif kind == "http.response.body" and not message.get("more_body", False) and self.drain and not self.complete:
                # the answer's last message: Quart still reads the body while the handler runs
                try:
                    await asyncio.wait_for(self.enough.wait(), self.drain_seconds)
                except asyncio.TimeoutError:
                    pass
            await send(message)

        return draining_send


def _content_length(scope: Scope) -> int | None:
    """The request's Content-Length (0 without a body), None when chunked or unreadable."""
    length: int | None = 0
    for name, value in scope.get("headers", []):
        key = bytes(name).lower()
        if key == b"transfer-encoding":
            return None
        if key == b"content-length":
            try:
                length = int(bytes(value))
            except ValueError:
                return None
    return length
