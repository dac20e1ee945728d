"""Running a router: bind, start the models marked load-on-startup (the log says which load now
and which on their first request), serve until a signal, then stop every child (SIGTERM,
SIGKILL after its stop timeout) before exiting."""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Callable

from quart import Quart

from llamacli.http import ui, ui_assets
from llamacli.http.app import create_app
from llamacli.http.header_case import ASGIApp
from llamacli.http.router import Supervisor
from llamacli.http.router_routes import RouterState, bp
from llamacli.http.server import Listen, bind_sockets, serve_asgi, socket_url


def run_router(state: RouterState, listen: Listen, log: Callable[[str], None]) -> None:
    """Serve the router until SIGINT/SIGTERM. Raises OSError when binding fails."""
    socks = bind_sockets(listen.host, listen.port)
    tls = bool(listen.ssl_key_file and listen.ssl_cert_file)
    sup = state.supervisor
    names = ", ".join(sup.instances) or "none"
    log(f"listening on {', '.join(socket_url(s, tls) for s in socks)} (router; models: {names})")
    app = router_app(state)
    try:
        asyncio.run(_serve(app, sup, socks, listen, log))
    finally:
        state.executor.shutdown(wait=False, cancel_futures=True)


def router_app(state: RouterState) -> Quart:
    """The router's app: its own endpoints, forwarding by model, and the chat page (whose model
    selector lists /models and loads a model on select; --no-ui: 404 as in single-model mode)."""
    return create_app(state=state, blueprints=[ui.bp, ui_assets.bp, bp])


async def _serve(app: ASGIApp, sup: Supervisor, socks: list[socket.socket], listen: Listen, log: Callable[[str], None]) -> None:
    import httpx2 as httpx

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # no pool limit: every streamed answer holds its connection to a child for its duration
    sup.http = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0), limits=httpx.Limits(max_connections=None))
    try:
        await _load_on_startup(sup, log)

        async def shutdown_trigger() -> None:
            await stop.wait()
            log("shutting down: stopping the model servers")
            sup.end_streams()

        await serve_asgi(app, socks, listen, shutdown_trigger)
    finally:
        await sup.stop_all()
        await sup.http.aclose()


async def _load_on_startup(sup: Supervisor, log: Callable[[str], None]) -> None:
    """Start the children of the models marked load-on-startup (they load while the router
    already answers), and say in the log what loads now and what waits for its first request."""
    now = [i.spec.name for i in sup.instances.values() if i.spec.load_on_startup]
    later = [name for name in sup.instances if name not in now]
    if now:
        log(f"loading at startup (load-on-startup): {', '.join(now)}")
    if later:
        names = ", ".join(later[:8]) + (f" and {len(later) - 8} more" if len(later) > 8 else "")
        log(f"loading on first request: {names} (a preset's load-on-startup = true loads a model at startup)")
    for name in now:
        await sup.load(name, "load-on-startup")
