"""Running a router: bind, start the models marked load-on-startup, serve until a signal, then
stop every child (SIGTERM, SIGKILL after its stop timeout) before exiting."""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Callable

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
    app = create_app(state=state, blueprints=[bp])
    try:
        asyncio.run(_serve(app, sup, socks, listen, log))
    finally:
        state.executor.shutdown(wait=False, cancel_futures=True)


async def _serve(app: ASGIApp, sup: Supervisor, socks: list[socket.socket], listen: Listen, log: Callable[[str], None]) -> None:
    import httpx2 as httpx

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # no pool limit: every streamed answer holds its connection to a child for its duration
    sup.http = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0), limits=httpx.Limits(max_connections=None))
    try:
        for inst in list(sup.instances.values()):
            if inst.spec.load_on_startup:
                await sup.load(inst.spec.name)

        async def shutdown_trigger() -> None:
            await stop.wait()
            log("shutting down: stopping the model servers")
            sup.end_streams()

        await serve_asgi(app, socks, listen, shutdown_trigger)
    finally:
        await sup.stop_all()
        await sup.http.aclose()
