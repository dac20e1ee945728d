"""The application's ASGI app at the Serve proxy: every request goes to one replica of the
engine deployment (the router picks it: router.py), and the replica's answer comes back
message by message (a stream stays a stream).

Faults. A replica that dies (or becomes unreachable) before it sent any of the response's
body: the request is sent again, to another replica (`RETRIES` times). One that dies after a
stream started: the stream ends with llama-server's error event for its route (the frames
router mode writes: http/router_forward.cut_frames), never a hang. The response's start is
held back until its first body message, so "nothing streamed" is exact.

The aggregated endpoints (aggregate.py) go to every replica, each pinned to one, and answer
once for the whole application.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
import dataclasses
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from ray.exceptions import ActorUnavailableError, RayActorError

from llamacli.http.errors import ApiError
from llamacli.http.router_forward import cut_frames
from llamacli.scaleout.aggregate import AGGREGATED, Answer, merge
from llamacli.scaleout.asgi_call import Message
from llamacli.scaleout.request import ForwardedRequest
from llamacli.scaleout.local_routers import live_replicas
from llamacli.scaleout.routing_key import routing_key

Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
RETRIES = 3  # further replicas tried for a request that no replica started answering
FAN_OUT_WAIT = 10.0  # seconds a replica has to answer an aggregated endpoint
_GONE = (RayActorError, ActorUnavailableError)  # the replica died, or cannot be reached


class Ingress(ABC):
    """An ingress ASGI app: each HTTP request read whole, then `handle`d."""

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":  # websockets: the API has none
            return
        body = await _read_body(receive)
        await self.handle(ForwardedRequest(
            method=scope["method"], path=scope["path"], query_string=scope.get("query_string", b""),
            headers=tuple((bytes(k), bytes(v)) for k, v in scope["headers"]), body=body,
            client=(scope["client"][0], scope["client"][1]) if scope.get("client") else None,
            key=routing_key(body) if scope["method"] == "POST" else "",
        ), send)

    @abstractmethod
    async def handle(self, req: ForwardedRequest, send: Send) -> None:
        """Answer `req` through `send`."""


class Forwarder(Ingress):
    """The ingress ASGI app over a handle to one engine deployment."""

    def __init__(self, engine: Any, deployment: str) -> None:
        self.engine = engine  # a DeploymentHandle
        self.deployment = deployment

    async def handle(self, req: ForwardedRequest, send: Send) -> None:
        """`req` answered by a replica of the deployment (the aggregated endpoints: by all)."""
        if req.method == "GET" and req.path in AGGREGATED:
            await send_answer(send, await self.aggregate(req))
        else:
            await self.forward(req, send)

    async def forward(self, req: ForwardedRequest, send: Send) -> None:
        """`req` answered by one replica, sent again elsewhere while no body was sent."""
        for attempt in range(RETRIES + 1):
            start: Message | None = None
            sent = False  # whether the client got any of the response
            gen = self.engine.options(stream=True).asgi.remote(req)
            try:
                async for msg in gen:
                    if msg["type"] == "http.response.start":
                        start = msg
                        continue
                    if start is not None:
                        await send(start)
                        start = None
                    sent = True
                    await send(msg)
                return
            except _GONE as e:
                if sent:
                    await send({"type": "http.response.body", "body": _cut(req, e), "more_body": False})
                    return
                _log(f"{req.method} {req.path}: replica gone before answering ({type(e).__name__}); "
                     f"{'retrying' if attempt < RETRIES else 'giving up'}")
            finally:
                gen.cancel()  # the client went away, or the replica did: the replica's app is told
        await send_answer(send, Answer("", 503, json.dumps(
            ApiError(503, "no replica could answer: they went away", "unavailable_error").body()).encode()))

    async def aggregate(self, req: ForwardedRequest) -> Answer:
        """GET `req.path` from every replica, merged."""
        ids = live_replicas(self.deployment)
        if not ids:  # the router is made by the first call through the handle
            answers = [await self.collect(req)]
            ids = live_replicas(self.deployment)
            if not ids:
                return answers[0]
        # one after the other: calls made while serving one request share its internal request
        # id in Serve's router, and two such calls pending at once are confused there
        answers = [await self.collect(req, r) for r in ids]
        return merge(req.path, answers)

    async def collect(self, req: ForwardedRequest, replica: str | None = None) -> Answer:
        """One replica's whole answer (`replica` None: the one the router picks)."""
        pinned = dataclasses.replace(req, pin=replica)

        async def read() -> Answer:
            status, ctype, body = 503, "application/json", b""
            async for msg in self.engine.options(stream=True).asgi.remote(pinned):
                if msg["type"] == "http.response.start":
                    status = msg["status"]
                    ctype = next((v.decode() for k, v in msg.get("headers", []) if k.lower() == b"content-type"), ctype)
                elif msg["type"] == "http.response.body":
                    body += msg.get("body", b"")
            return Answer(replica or "", status, body, ctype)

        try:
            return await asyncio.wait_for(read(), FAN_OUT_WAIT)
        except (*_GONE, asyncio.TimeoutError) as e:
            err = ApiError(503, f"replica {replica} did not answer ({type(e).__name__})", "unavailable_error")
            return Answer(replica or "", 503, json.dumps(err.body()).encode())


def _cut(req: ForwardedRequest, e: BaseException) -> bytes:
    """The end of a stream whose replica died after it started."""
    err = ApiError(500, f"the replica serving this request stopped while answering ({type(e).__name__})", "server_error")
    return cut_frames(req.path, err)


async def _read_body(receive: Receive) -> bytes:
    body = b""
    while True:
        msg = await receive()
        if msg["type"] != "http.request":
            return body
        body += msg.get("body", b"")
        if not msg.get("more_body", False):
            return body


async def send_answer(send: Send, a: Answer) -> None:
    headers = [(b"content-type", a.content_type.encode()), (b"content-length", str(len(a.body)).encode())]
    await send({"type": "http.response.start", "status": a.status, "headers": headers})
    await send({"type": "http.response.body", "body": a.body, "more_body": False})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        msg = await receive()
        if msg["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif msg["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def _log(msg: str) -> None:
    print(f"llama ingress: {msg}", file=sys.stderr, flush=True)
