"""GET/POST /tools: llama-server's tools API (README-dev.md, "API for tools"), used by the web
page's agent loop; the tools themselves are core/tools/.

    GET /tools     every tool: {tool, display_name, type ("server" | "mcp"), permissions
                   {write}, uses_cwd, definition (the OpenAI function)}
    POST /tools    {"tool": NAME, "params": {...}, "stream": false}: the tool's result, 200
                   ({"plain_text_response": ...}, {"error": ...} or its own fields); with
                   "stream": true (exec_shell_command) SSE `data: {"chunk": ...}` frames, then
                   `data: {"done": true}`; a client that leaves kills the command.

Headers: `x-tool-cwd` (the call's working directory, inside the server's), `x-resp-type: base64`
(read_file's bytes), `x-tool-runtime` (refused: 501). Without any tool both routes answer 403
"this feature is disabled", as llama-server. An unknown tool, or "stream" for a tool that cannot,
is a 404; params that do not fit the tool's definition a 400. A call runs on its own thread, so
a long command never holds the event loop (or /health)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator
from typing import Any

from quart import Blueprint, Response, request

from llamacli.core.tools import Call, RuntimeUnsupported, ToolBox, UnknownTool, check_runtime
from llamacli.http import request_models as rm
from llamacli.http.context import current_state, request_json
from llamacli.http.errors import ApiError
from llamacli.http.sse import data, json_response, stream_response

bp = Blueprint("tools", __name__)


def _toolbox() -> ToolBox:
    box = current_state().tools
    if not box:
        raise ApiError(403, "this feature is disabled", "feature_disabled")
    return box


@bp.route("/tools", methods=["GET"])
async def list_tools() -> Response:
    return json_response(_toolbox().listing())


@bp.route("/tools", methods=["POST"])
async def call_tool() -> Response:
    box = _toolbox()
    body = rm.TOOL_INVOCATION.parse(await request_json())
    stream = body.bool("stream", False)
    params: dict[str, Any] = body.obj("params", None) or {}
    runtime = request.headers.get("x-tool-runtime", "")
    try:
        tool = box.find(body.str("tool"), stream)
        if runtime:
            check_runtime(runtime, "x-tool-runtime")
    except UnknownTool as e:
        raise ApiError(404, str(e), "invalid_request_error") from None  # llama-server's type
    except RuntimeUnsupported as e:
        raise ApiError(501, str(e), "not_supported_error") from None
    tool.check(params)
    call = box.call(request.headers.get("x-tool-cwd") or None, resp_type=request.headers.get("x-resp-type", ""))
    if not stream:
        return json_response(await _run(box, tool, params, call))
    return stream_response(_stream(box, tool, params, call))


async def _run(box: ToolBox, tool: Any, params: dict[str, Any], call: Call) -> dict[str, Any]:
    """The call on its own thread; a request that is cancelled (client gone) cancels the call."""
    try:
        return await asyncio.to_thread(box.invoke, tool, params, call)
    finally:
        call.cancelled.set()


async def _stream(box: ToolBox, tool: Any, params: dict[str, Any], call: Call) -> AsyncGenerator[bytes, None]:
    """The tool's output as it comes; the generator's close (client gone) kills the command."""
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[str | None] = asyncio.Queue()

    def pass_on(text: str) -> None:  # on the tool's thread
        loop.call_soon_threadsafe(chunks.put_nowait, text)

    call.on_chunk = pass_on
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome.update(box.invoke(tool, params, call))
        finally:
            loop.call_soon_threadsafe(chunks.put_nowait, None)

    worker = threading.Thread(target=work, name=f"llama-tool-{tool.name}", daemon=True)
    worker.start()
    try:
        while (text := await chunks.get()) is not None:
            if text:
                yield data({"chunk": text})
        done: dict[str, Any] = {"done": True}
        if "error" in outcome:
            done["error"] = outcome["error"]
        yield data(done)
    finally:
        call.cancelled.set()
