"""Router mode's forwarding: the current request sent to the child serving its model, and the
child's answer passed back as it arrives (a stream stays a stream).

- The model is made ready first (Supervisor.ready: loaded, or loaded now when autoload allows).
  A child that is gone before it took the request (an unload raced it: its socket is closed)
  is waited for and the request is sent again, once, to the model loaded anew.
- A stream is passed on in whole SSE messages; when the child's connection breaks mid-stream
  (the child was killed, or crashed), the client gets the error event of its API, as
  llama-server writes it, instead of a cut: `data: {"error": ...}` (then `data: [DONE]` on
  OpenAI's routes), `event: error` on Anthropic's and the Responses API's.
- When the client goes away, the connection to the child is closed, which cancels its task.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
from quart import Response, request
from werkzeug.datastructures import Headers

from llamacli.http.errors import ApiError
from llamacli.http.router import Instance, Supervisor
from llamacli.http.sse import DONE, data, event

# Not forwarded either way: hop-by-hop headers, and what each side sets for itself (the router
# answers CORS and checks API keys; the children have neither).
_DROP_REQUEST = frozenset({"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
                           "authorization", "x-api-key"})
_DROP_RESPONSE = frozenset({"content-length", "connection", "keep-alive", "transfer-encoding", "server", "date"})
OPENAI_STREAMS = frozenset({"/v1/chat/completions", "/chat/completions", "/v1/completions"})  # they end with [DONE]
GONE_WAIT = 5.0  # seconds to wait for an unreachable child's exit to be seen before the request is retried


class _Unreachable(Exception):
    """The child's socket refused the request: it never saw it (safe to send again)."""


async def forward(sup: Supervisor, name: str, autoload: bool, body: bytes | None) -> Response:
    """The answer of model `name` to the current request (POSTs make it recently used)."""
    why = f"for {request.method} {request.path}"
    retried = False
    while True:
        inst = await sup.ready(name, autoload, why)
        if request.method in ("POST", "PUT"):
            inst.last_used = time.monotonic()  # for --models-max: the least recently used goes first
        proc = inst.proc
        try:
            return _pass_through(inst, await _send(sup.http, inst, body))
        except _Unreachable as e:
            gone = ApiError(503, f"model '{inst.spec.name}' is not reachable: {e}", "unavailable_error")
            if retried:
                raise gone from None
            retried = True
        try:  # the child is on its way out: let its exit be seen, then load the model again
            await asyncio.wait_for(sup.wait_until(inst, lambda i: i.proc is not proc), GONE_WAIT)
        except asyncio.TimeoutError:
            raise gone from None


async def _send(http: Any, inst: Instance, body: bytes | None) -> Any:
    if not inst.url:
        raise _Unreachable("its server has exited")
    headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _DROP_REQUEST]
    path = request.full_path if request.query_string else request.path
    req = http.build_request(request.method, inst.url + path, content=body, headers=headers)
    try:
        return await http.send(req, stream=True)
    except httpx2.ConnectError as e:
        raise _Unreachable(type(e).__name__) from None
    except Exception as e:  # noqa: BLE001 - it took the request and went away: not sent again
        raise _stopped(inst, f"before answering ({type(e).__name__})") from None


def _stopped(inst: Instance, when: str) -> ApiError:
    if inst.stopping:
        return ApiError(503, f"model '{inst.spec.name}' was unloaded {when}", "unavailable_error")
    return ApiError(500, f"the server of model '{inst.spec.name}' stopped {when}", "server_error")


def _pass_through(inst: Instance, upstream: Any) -> Response:
    path = request.path
    sse = upstream.headers.get("content-type", "").startswith("text/event-stream")

    async def chunks() -> AsyncIterator[bytes]:
        pending = b""  # a stream's incomplete SSE message, held until its end arrives
        try:
            async for chunk in upstream.aiter_raw():
                if not sse:
                    yield chunk
                    continue
                pending += chunk
                end = pending.rfind(b"\n\n") + 2
                if end >= 2:
                    yield pending[:end]
                    pending = pending[end:]
            if pending:
                yield pending
        except httpx2.TransportError as e:
            if sse:  # the child went away mid-stream: say so in the stream's own terms
                yield cut_frames(path, _stopped(inst, f"while answering ({type(e).__name__})"))
        finally:  # also when the client disconnected: closing the connection cancels the child's task
            await asyncio.shield(upstream.aclose())

    headers = [(k, v) for k, v in upstream.headers.multi_items()
               if k.lower() not in _DROP_RESPONSE and not k.lower().startswith("access-control-")]
    out = Response(chunks(), status=upstream.status_code, headers=Headers(headers))
    out.timeout = None
    return out


def cut_frames(path: str, err: ApiError) -> bytes:
    """The error event that ends a stream of route `path` (the frames its own route writes for
    a failure: http/stream.py's server_frame, routes_anthropic, routes_responses)."""
    if path == "/v1/messages":
        return event("error", {"type": "error", "error": {"type": err.type, "message": err.message}})
    if path in ("/v1/responses", "/responses"):
        return event("error", {"type": "error", "code": err.type, "message": err.message, "param": None})
    return data(err.body()) + (DONE if path in OPENAI_STREAMS else b"")
