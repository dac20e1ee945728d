"""JSON and server-sent-events framing shared by every API family."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from quart import Response

DONE = b"data: [DONE]\n\n"
PING_COMMENT = b": ping\n\n"  # an SSE comment: keeps proxies and clients from timing out


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(dumps(obj), status=status, content_type="application/json; charset=utf-8")


def data(obj: Any) -> bytes:
    """One SSE message carrying JSON: `data: {...}` and a blank line."""
    return b"data: " + dumps(obj).encode("utf-8") + b"\n\n"


def event(name: str, obj: Any) -> bytes:
    """A named SSE event (Anthropic's stream): `event: NAME`, `data: {...}`."""
    return b"event: " + name.encode("ascii") + b"\ndata: " + dumps(obj).encode("utf-8") + b"\n\n"


def stream_response(body: AsyncIterator[bytes]) -> Response:
    """A text/event-stream response; no time limit (a long generation is not an error)."""
    resp = Response(body, content_type="text/event-stream")
    resp.headers["Cache-Control"] = "no-cache"
    resp.headers["X-Accel-Buffering"] = "no"
    resp.timeout = None
    return resp
