"""Running the app: bind the sockets, serve with Hypercorn, load the model in the background
(the API answers 503 meanwhile), shut down gracefully on SIGINT/SIGTERM.

Shutdown: the first signal stops accepting connections; in-flight tasks get `grace` seconds
to finish, then they are cancelled (their streams end cleanly); a second signal cancels at
once. The engine is stopped after the server, and the process exits 0. A forward pass cannot be
interrupted and may take many seconds (a long prompt on a busy CPU): the engine gets
`ENGINE_STOP_WAIT` seconds to finish its step, then the process exits without waiting for it.

The port opens first: this module imports neither the app nor Hypercorn (nor any engine code)
until `run_server` has bound its sockets, so connections queue from the first second and get
llama-server's 503 "Loading model" while the app is imported, the model loaded and the kernels
compiled.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from llamacli.core.model.loaded import ModelInfo
from llamacli.http.header_case import ASGIApp, CanonicalHeaders
from llamacli.http.keep_alive import DrainBody
from llamacli.http.state import ServerState, ServingEngine

if TYPE_CHECKING:
    from hypercorn.config import Config as HypercornConfig
    from hypercorn.typing import ASGIFramework

ENGINE_STOP_WAIT = 0.5  # seconds the engine's current step may take at shutdown before we leave it


@dataclass
class Listen:
    host: str = "127.0.0.1"  # comma-separated addresses, or UNIX socket paths ending in .sock
    port: int = 8080  # 0: a free port chosen by the system (printed at startup)
    ssl_key_file: str | None = None
    ssl_cert_file: str | None = None
    timeout: float = 3600.0  # read timeout of a connection, seconds
    grace: float = 1.0  # seconds in-flight tasks may run on after a shutdown signal


def bind_sockets(host: str, port: int, backlog: int = 100) -> list[socket.socket]:
    """Listening sockets (connections queue until Hypercorn serves them); port 0 picks one
    free port shared by every host."""
    socks: list[socket.socket] = []
    h = host
    try:
        for h in [x.strip() for x in host.split(",") if x.strip()]:
            if h.endswith(".sock"):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.bind(h)
                s.listen(backlog)
                socks.append(s)
                continue
            family, type_, proto, _, addr = socket.getaddrinfo(
                h.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]
            s = socket.socket(family, type_, proto)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind(addr)
            s.listen(backlog)
            socks.append(s)
            port = s.getsockname()[1]
    except OSError as e:
        for s in socks:
            s.close()
        where = h if h.endswith(".sock") else f"{h}:{port}"
        raise OSError(e.errno, f"cannot listen on {where}: {e.strerror or e}") from None
    return socks


def socket_url(s: socket.socket, tls: bool) -> str:
    if s.family == socket.AF_UNIX:
        return f"unix:{s.getsockname()}"
    host, port = s.getsockname()[:2]
    if s.family == socket.AF_INET6:
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{port}"


def hypercorn_config(socks: list[socket.socket], listen: Listen) -> HypercornConfig:
    """Hypercorn serving the bound sockets (they are handed over: detached here)."""
    from hypercorn.config import Config as HypercornConfig

    cfg = HypercornConfig()
    cfg.bind = [f"fd://{s.detach()}" for s in socks]
    if listen.ssl_key_file and listen.ssl_cert_file:
        cfg.keyfile = listen.ssl_key_file
        cfg.certfile = listen.ssl_cert_file
    cfg.graceful_timeout = listen.grace + 1.0  # responses end at `grace` (cancel_all)
    cfg.read_timeout = int(listen.timeout) if listen.timeout > 0 else None
    cfg.accesslog = None
    cfg.loglevel = "WARNING"
    return cfg


async def serve_asgi(
    app: ASGIApp, socks: list[socket.socket], listen: Listen, shutdown_trigger: Callable[[], Awaitable[None]]
) -> None:
    """Hypercorn serving `app` (response header names capitalised; an answer sent before the
    request body was read keeps the connection usable: http/keep_alive.py) on the bound sockets
    until `shutdown_trigger` returns."""
    # CanonicalHeaders is an ASGI 3 application; Hypercorn's own typing spells the scope and
    # messages as TypedDicts where ours are mappings, hence the cast.
    from hypercorn.asyncio import serve as hypercorn_serve

    asgi = cast("ASGIFramework", CanonicalHeaders(DrainBody(app)))
    await hypercorn_serve(asgi, hypercorn_config(socks, listen), shutdown_trigger=shutdown_trigger, mode="asgi")


def run_server(
    state: ServerState,
    listen: Listen,
    load: Callable[[], tuple[ServingEngine, ModelInfo]],
    log: Callable[[str], None],
    describe: str = "",
) -> None:
    """Serve until a signal; `load()` runs in a thread and returns (started engine, ModelInfo).
    Raises what `load` raised (after the server stopped) and OSError when binding fails."""
    tls = bool(listen.ssl_key_file and listen.ssl_cert_file)
    socks = bind_sockets(listen.host, listen.port)
    urls = [socket_url(s, tls) for s in socks]
    log(f"listening on {', '.join(urls)}" + (f" ({describe})" if describe else ""))
    from llamacli.http.app import create_app

    app = create_app(state=state)
    errors: list[BaseException] = []
    stopped: list[bool] = []  # whether the engine's thread ended (set by _serve)
    try:
        asyncio.run(_serve(app, state, socks, listen, load, log, errors, urls, stopped))
    finally:
        if not stopped and state.engine is not None:
            stopped.append(stop_engine(state.engine, ENGINE_STOP_WAIT))
        state.executor.shutdown(wait=False, cancel_futures=True)
        if state.tools is not None:
            state.tools.close()  # MCP servers stopped (running shell commands ended with their calls)
    if errors:
        raise errors[0]
    if stopped and not stopped[0]:
        # the engine thread is inside a forward pass; a normal interpreter exit would wait for it
        # (and for request threads waiting on it): leave now, every response has been sent
        log("engine still in its step: exiting without waiting for it")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def stop_engine(engine: Any, wait: float) -> bool:
    """Cancel every task and stop the engine's loop; True when its thread ended within `wait`
    seconds (else it ends by itself after its current step)."""
    t = threading.Thread(target=engine.stop, kwargs={"cancel": True}, name="llama-stop", daemon=True)
    t.start()
    t.join(wait)
    return not t.is_alive()


async def _serve(
    app: Any,
    state: ServerState,
    socks: list[socket.socket],
    listen: Listen,
    load: Callable[[], tuple[ServingEngine, ModelInfo]],
    log: Callable[[str], None],
    errors: list[BaseException],
    urls: list[str],
    stopped: list[bool],
) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal() -> None:
        if stop.is_set():
            state.cancel_all()
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)

    def loader() -> None:
        try:
            if state.tools is not None:  # MCP servers list their tools before the model loads
                state.tools.start()
            engine, info = load()
        except BaseException as e:  # noqa: BLE001 - reported by run_server
            errors.append(e)
            _call_soon(loop, stop.set)
            return
        if not _call_soon(loop, lambda: _ready(state, engine, info, log, urls)):
            engine.stop(cancel=True)

    threading.Thread(target=loader, name="llama-load", daemon=True).start()
    watcher = _watch_idle(state, load, log)

    async def shutdown_trigger() -> None:
        await stop.wait()
        log(f"shutting down: no new connections; cancelling what is still running in {listen.grace:.0f} s")
        loop.call_later(listen.grace, state.cancel_all)

    await serve_asgi(app, socks, listen, shutdown_trigger)
    if watcher is not None:
        watcher.cancel()
    engine = state.engine
    if engine is not None:  # stop it while this loop still runs: its results wake this loop
        stopped.append(stop_engine(engine, ENGINE_STOP_WAIT))


def _watch_idle(
    state: ServerState, load: Callable[[], tuple[ServingEngine, ModelInfo]], log: Callable[[str], None]
) -> asyncio.Task[None] | None:
    """With --sleep-idle-seconds: the idle timer (http/sleep.py) for the server's lifetime."""
    if state.config.sleep_idle_seconds <= 0:
        return None
    from llamacli.http.router_child import notify_router
    from llamacli.http.sleep import IdleSleep

    state.sleep = IdleSleep(state, state.config.sleep_idle_seconds, load, log, on_change=notify_router)
    return asyncio.ensure_future(state.sleep.watch())


def _ready(state: ServerState, engine: ServingEngine, info: ModelInfo, log: Callable[[str], None], urls: list[str]) -> None:
    state.set_ready(engine, info)
    log(f"model loaded: {info.file_name} ({engine.config.n_parallel} slots, n_ctx {engine.config.n_ctx}); "
        f"ready at {urls[0]}")


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[[], Any]) -> bool:
    try:
        loop.call_soon_threadsafe(fn)
        return True
    except RuntimeError:  # the loop has closed: the server stopped while loading
        return False
