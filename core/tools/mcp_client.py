"""MCP servers over stdio, through the official `mcp` SDK (ClientSession over stdio_client).

As llama-server runs them: each server is spawned once at start to list its tools, then
stopped; the first call of one of its tools spawns it again, and it stays up for the calls
after (a ping checks it is still there before each reuse). A server that cannot be spawned is
left alone for COOLDOWN_S. Each call has the server's timeout (`timeout_ms`, default 30 s); a
call that times out also stops its server (the next call starts a fresh one), so a hung server
costs one timeout, never a stuck server.

The SDK is asyncio code: the manager runs its own event loop on its own thread, and callers on
any thread (the HTTP server's request threads, the chat REPL) wait for their call there, polling
their cancel event. Nothing an MCP server does (crash, hang, garbage on stdout) reaches the
caller as more than an `{"error": ...}` result.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TextIO, TypeVar

from llamacli.core.tools.base import AgentTool, Call, Result
from llamacli.core.tools.errors import ToolParamsError
from llamacli.core.tools.mcp_config import McpServerConfig

WARMUP_S = 10.0  # listing one server's tools at start
COOLDOWN_S = 5.0  # after a failed spawn
PING_S = 5.0  # a reused server must answer a ping within this
CLOSE_S = 10.0  # stopping every server at shutdown
T = TypeVar("T")


@dataclass(frozen=True)
class McpToolDef:
    server: str
    name: str  # the server's own name for it
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)
    read_only: bool = False  # the server says the tool changes nothing (annotations.readOnlyHint)


class McpFailure(Exception):
    """A server that could not be reached; the message is for the model and the log."""


def describe(e: BaseException) -> str:
    """One line for an exception, through anyio's exception groups."""
    while getattr(e, "exceptions", None):
        e = e.exceptions[0]  # type: ignore[attr-defined]
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


class _Connection:
    """One running server: a task holds the SDK's context managers open until `close`."""

    def __init__(self, cfg: McpServerConfig, errlog: TextIO) -> None:
        self.cfg = cfg
        self.errlog = errlog
        self.session: Any = None
        self.error = ""
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def open(self, timeout: float) -> None:
        ready = asyncio.Event()
        self._task = asyncio.ensure_future(self._hold(ready))
        try:
            await asyncio.wait_for(ready.wait(), timeout)
        except asyncio.TimeoutError:
            self.error = f"no answer to initialize within {timeout:g} s"
        except BaseException:  # cancelled while starting: the child must not outlive us
            await self.close()
            raise
        if self.session is None:
            await self.close()
            raise McpFailure(f"MCP server {self.cfg.name!r} did not start: {self.error or 'it exited'}")

    async def _hold(self, ready: asyncio.Event) -> None:
        from mcp import ClientSession, StdioServerParameters, stdio_client
        from mcp.types import Implementation

        params = StdioServerParameters(command=self.cfg.command, args=list(self.cfg.args),
                                       env={**os.environ, **self.cfg.env}, cwd=self.cfg.cwd)
        try:
            async with stdio_client(params, errlog=self.errlog) as (read, write):
                async with ClientSession(read, write, client_info=Implementation(name="llamacli", version="0.1.0")) as s:
                    await s.initialize()
                    self.session = s
                    ready.set()
                    await self._stop.wait()
        except Exception as e:  # noqa: BLE001 - any failure of the child is this connection's end
            self.error = describe(e)
        finally:
            self.session = None
            ready.set()

    async def close(self) -> None:
        """Stop the child (the SDK closes its stdin, then terminates, then kills it)."""
        self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        if self.session is None:  # still starting (e.g. stuck in initialize): stop waiting for it
            task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(task), CLOSE_S)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            task.cancel()


class McpManager:
    def __init__(self, configs: list[McpServerConfig], log: Callable[[str], None], errlog: TextIO | None = None) -> None:
        self.configs = {c.name: c for c in configs}
        self.log = log
        self.errlog = errlog or sys.stderr
        self._conns: dict[str, _Connection] = {}
        self._dead_until: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._closing: set[asyncio.Future[None]] = set()  # connections being stopped
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    # ---- the manager's event loop -----------------------------------------------------------
    def _start_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=loop.run_forever, name="llama-mcp", daemon=True)
            self._thread.start()
            self._loop = loop
        return self._loop

    def _run(self, coro: Coroutine[Any, Any, T], cancelled: threading.Event | None = None) -> T:
        """Run coro on the manager's loop and wait for it; a set `cancelled` cancels it."""
        fut: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self._start_loop())
        while True:
            try:
                return fut.result(timeout=0.1)
            except concurrent.futures.TimeoutError:
                if cancelled is not None and cancelled.is_set():
                    fut.cancel()
                    raise McpFailure("cancelled") from None

    # ---- start: list every server's tools ---------------------------------------------------
    def list_tools(self) -> list[McpToolDef]:
        """Spawn every server, list its tools, stop it (WARMUP_S each, all at once)."""
        if not self.configs:
            return []

        async def all_servers() -> list[list[McpToolDef]]:
            return await asyncio.gather(*(self._warm_up(c) for c in self.configs.values()))

        return [t for tools in self._run(all_servers()) for t in tools]

    async def _warm_up(self, cfg: McpServerConfig) -> list[McpToolDef]:
        conn = _Connection(cfg, self.errlog)
        try:
            await conn.open(WARMUP_S)
            tools: list[McpToolDef] = []
            cursor = None
            while True:
                from mcp.types import PaginatedRequestParams

                page = await asyncio.wait_for(
                    conn.session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None), WARMUP_S)
                tools += [_tool_def(cfg.name, t) for t in page.tools]
                cursor = page.next_cursor
                if not cursor:
                    break
            self.log(f"MCP server {cfg.name!r}: {len(tools)} tools")
            return tools
        except (McpFailure, asyncio.TimeoutError, Exception) as e:  # noqa: BLE001 - one server's failure is logged
            self.log(f"MCP server {cfg.name!r}: cannot list its tools: {describe(e) or 'timed out'}")
            return []
        finally:
            await conn.close()

    # ---- calls --------------------------------------------------------------------------------
    def call(self, server: str, tool: str, arguments: dict[str, Any], cancelled: threading.Event | None = None) -> Result:
        """One tools/call, as llama-server answers it: the text parts joined, or {"error": ...}."""
        if self._closed:
            return {"error": "the server is shutting down"}
        try:
            return self._run(self._call(server, tool, arguments), cancelled)
        except McpFailure as e:
            return {"error": str(e)}

    async def _call(self, server: str, tool: str, arguments: dict[str, Any]) -> Result:
        from mcp import MCPError
        from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        cfg = self.configs[server]
        conn = await self._connection(cfg)
        try:
            result = await conn.session.call_tool(tool, arguments, read_timeout_seconds=cfg.timeout_s)
        except MCPError as e:
            if e.code in (REQUEST_TIMEOUT, CONNECTION_CLOSED):
                await self._drop(server, f"tool {tool!r}: {e.message}")
                if e.code == REQUEST_TIMEOUT:
                    return {"error": f"request timed out after {cfg.timeout_s:g} s"}
                return {"error": f"MCP server {server!r} stopped during the call"}
            return {"error": e.message}
        except Exception as e:  # noqa: BLE001 - garbage from the server: its connection is dropped
            await self._drop(server, describe(e))
            return {"error": f"MCP server {server!r}: {describe(e)}"}
        return _result(result)

    async def _connection(self, cfg: McpServerConfig) -> _Connection:
        """The server's live connection, spawned (again) when it has none or stopped answering."""
        lock = self._locks.setdefault(cfg.name, asyncio.Lock())
        async with lock:
            conn = self._conns.get(cfg.name)
            if conn is not None:
                if await self._alive(conn):
                    return conn
                await self._drop(cfg.name, "no answer to a ping")
            if time.monotonic() < self._dead_until.get(cfg.name, 0.0):
                raise McpFailure(f"MCP server unavailable: {cfg.name}")
            conn = _Connection(cfg, self.errlog)
            try:
                await conn.open(cfg.timeout_s)
            except McpFailure:
                self._dead_until[cfg.name] = time.monotonic() + COOLDOWN_S
                self.log(f"MCP server {cfg.name!r}: cannot start: {conn.error}")
                raise
            self._conns[cfg.name] = conn
            return conn

    @staticmethod
    async def _alive(conn: _Connection) -> bool:
        if conn.session is None:
            return False
        try:
            await asyncio.wait_for(conn.session.send_ping(), PING_S)
            return True
        except Exception:  # noqa: BLE001 - any failure means a new server
            return False

    async def _drop(self, name: str, why: str) -> None:
        """Forget the server's connection and stop it in the background (the call that found
        it broken answers now)."""
        conn = self._conns.pop(name, None)
        if conn is not None:
            self.log(f"MCP server {name!r} stopped ({why}); the next call starts it again")
            closing = asyncio.ensure_future(conn.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    # ---- shutdown -----------------------------------------------------------------------------
    def close(self) -> None:
        """Stop every running server and the manager's loop (idempotent)."""
        if self._closed:
            return
        self._closed = True
        loop = self._loop
        if loop is None:
            return

        async def stop_all() -> None:
            await asyncio.gather(*(c.close() for c in list(self._conns.values())), *list(self._closing))
            self._conns.clear()

        try:
            asyncio.run_coroutine_threadsafe(stop_all(), loop).result(CLOSE_S + 5)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)


def _tool_def(server: str, t: Any) -> McpToolDef:
    ann = getattr(t, "annotations", None)
    schema = t.input_schema if isinstance(t.input_schema, dict) else {}
    return McpToolDef(server, t.name, t.description or "", schema, bool(ann is not None and ann.read_only_hint))


def _result(result: Any) -> Result:
    text = "\n".join(p.text for p in result.content if getattr(p, "type", "") == "text")
    if result.is_error:
        return {"error": text or "MCP tool returned an error"}
    return {"plain_text_response": text}


class McpTool(AgentTool):
    """One MCP server's tool, listed as `<server>_<tool>` with type "mcp". It is a write tool
    unless the server marks it read-only (llama-server marks every MCP tool read-only)."""

    kind = "mcp"
    uses_cwd = False

    def __init__(self, spec: McpToolDef, manager: McpManager) -> None:
        self.spec = spec
        self.manager = manager
        self.name = f"{spec.server}_{spec.name}"
        self.display_name = self.name
        self.description = spec.description
        self.writes = not spec.read_only

    def parameters(self) -> dict[str, Any]:
        return self.spec.input_schema or {"type": "object", "properties": {}}

    def check(self, params: Any) -> None:
        if not isinstance(params, dict):  # the server checks its own schema
            raise ToolParamsError(f"{self.name}: params must be an object")

    def invoke(self, params: dict[str, Any], call: Call) -> Result:
        return self.manager.call(self.spec.server, self.spec.name, params, call.cancelled)
