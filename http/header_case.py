"""Response header names in their usual capitalisation on the wire (`Content-Type`,
`Access-Control-Allow-Origin`, `Process-Start-Time-Unix`), as llama-server writes them.

HTTP/1.1 header names are case-insensitive, but clients that copy the headers into a plain
dict (`dict(requests_response.headers)`, as llama.cpp's own test suite does) look them up by
exact name. ASGI hands the server lower-cased names; this wrapper capitalises each
dash-separated word before Hypercorn writes them (h11 keeps the case it is given). HTTP/2
requires lower case, so only HTTP/1.x responses are touched.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]  # (scope, receive, send); Quart spells them as TypedDicts


def canonical(name: bytes) -> bytes:
    """b"access-control-allow-origin" -> b"Access-Control-Allow-Origin"."""
    return b"-".join(part[:1].upper() + part[1:] for part in name.split(b"-"))


class Http1Middleware(ABC):
    """An ASGI middleware that acts on HTTP/1.x exchanges (`http1`) and passes everything else
    (lifespan, websockets, HTTP/2) to the wrapped app untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def __getattr__(self, name: str) -> Any:  # the wrapped app's attributes (Quart's config, ...)
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or str(scope.get("http_version", "1.1")).startswith("2"):
            await self.app(scope, receive, send)
            return
        await self.http1(scope, receive, send)

    @abstractmethod
    async def http1(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The middleware's work on one HTTP/1.x exchange."""


class CanonicalHeaders(Http1Middleware):
    """ASGI middleware: capitalised response header names for HTTP/1.x."""

    async def http1(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_canonical(message: Message) -> None:
            if message.get("type") == "http.response.start":
                message = dict(message)
                message["headers"] = [(canonical(bytes(k)), v) for k, v in message.get("headers", [])]
            await send(message)

        await self.app(scope, receive, send_canonical)
