"""`create_app`: the Quart app serving llama-server's API over one engine.

Cross-cutting concerns live here and only here: 503 while the model loads, API-key auth,
CORS (preflight and response headers), error responses, the request log. Endpoints are in
routes_admin (health, models, props, slots, metrics), ui (the chat page and /static/), routes_native (/completion,
/tokenize, /infill, /embedding, ...), routes_oai (/v1/...), routes_responses (/v1/responses), routes_anthropic (/v1/messages) and routes_tools (/tools).
"""

from __future__ import annotations

import hmac
import os
import sys
import time
import traceback
from urllib.parse import urlsplit
from collections.abc import Sequence
from typing import Any

from quart import Blueprint, Quart, Response, g, request
from werkzeug.exceptions import HTTPException

from llamacli.core.model.loaded import ModelInfo
from llamacli.http.config import ServerConfig
from llamacli.http.state import ServerState
from llamacli.http.errors import INVALID_API_KEY, LOADING, ApiError, to_api_error
from llamacli.http.sse import dumps, json_response
from llamacli.http.ui import STATIC_PREFIX
from llamacli.http.ui_assets import UI_PATHS

HEALTH_PATHS = frozenset({"/health", "/v1/health"})
# Reachable without an API key: llama-server's public endpoints (server-http.cpp) are the
# health checks and the web UI's files; everything else, /v1/models included, needs the key.
PUBLIC_PATHS = HEALTH_PATHS | UI_PATHS


def create_app(
    engine: Any = None,
    config: ServerConfig | None = None,
    model: ModelInfo | None = None,
    state: ServerState | None = None,
    blueprints: Sequence[Blueprint] | None = None,
) -> Quart:
    """The app over `engine` (serving `model`). With engine=None the app starts in the loading
    state (every endpoint 503) until `app.extensions["llama"].set_ready(engine, model)`.
    `blueprints` replaces the endpoints (router mode: http/router_routes.py)."""
    from llamacli.http import routes_admin, routes_anthropic, routes_native, routes_oai, routes_proxy, ui, ui_assets
    from llamacli.http import routes_lora, routes_rerank, routes_responses, routes_tools

    st = state or ServerState(config)
    if engine is not None:
        if model is None:
            raise ValueError("create_app: pass the ModelInfo of the engine's model")
        st.set_ready(engine, model)
    # llamacli.http is a namespace package: give Quart its folder explicitly
    app = Quart("llamacli.http", root_path=os.path.dirname(os.path.abspath(__file__)), static_folder=None)
    app.config.update(
        RESPONSE_TIMEOUT=None,  # a streamed generation may take long; disconnects still cancel
        BODY_TIMEOUT=60,
        MAX_CONTENT_LENGTH=st.config.max_body_size,
        PROVIDE_AUTOMATIC_OPTIONS=False,
        JSON_SORT_KEYS=False,
    )
    app.extensions["llama"] = st
    if blueprints is None:
        blueprints = [
            m.bp
            for m in (
                routes_admin, routes_native, routes_oai, routes_responses, routes_anthropic, routes_proxy, routes_rerank,
                routes_lora, routes_tools, ui, ui_assets,
            )
        ]
    for bp in blueprints:
        app.register_blueprint(bp)

    @app.before_request
    async def _gate() -> Response | None:
        g.t0 = time.perf_counter()
        if request.method == "OPTIONS":
            return _preflight(st.config)
        path = request.path
        # --sleep-idle-seconds: a task wakes a sleeping model; health/props/models/metrics answer asleep
        no_task = _is_ui(path) or path in UI_PATHS or request.url_rule is None
        dormant = st.sleep is not None and await st.sleep.enter(request.method, path, no_task)
        if not dormant and not st.ready and path not in HEALTH_PATHS and not _is_ui(path) and path not in UI_PATHS:
            raise LOADING
        public = path in PUBLIC_PATHS or path.startswith(STATIC_PREFIX)
        if st.config.api_keys and not public and not _authorized(st.config.api_keys):
            raise INVALID_API_KEY
        return None

    @app.after_request
    async def _finish(resp: Response) -> Response:
        _cors_headers(resp, st.config)
        _log_request(st.config, resp.status_code)
        return resp

    @app.teardown_request
    async def _left(_exc: BaseException | None) -> None:
        if st.sleep is not None:
            st.sleep.leave()

    @app.errorhandler(ApiError)
    async def _api_error(e: ApiError) -> Response:
        return json_response(e.body(), e.status)

    @app.errorhandler(HTTPException)
    async def _http_error(e: HTTPException) -> Response:
        code = e.code or 500
        message = {404: "File Not Found", 405: "Method Not Allowed",
                   413: f"the request body is larger than this server's limit of {st.config.max_body_size} bytes "
                        "(--max-body-size)"}.get(code, e.description or e.name)
        return json_response(ApiError(code, message).body(), code)

    @app.errorhandler(Exception)
    async def _any_error(e: Exception) -> Response:
        err = to_api_error(e)
        if err.status >= 500:
            print(f"error: {request.method} {request.path}: {type(e).__name__}: {e}", file=sys.stderr)
            traceback.print_exception(e, file=sys.stderr)
        return json_response(err.body(), err.status)

    return app


def _is_ui(path: str) -> bool:
    """The page and its files load while the model loads (the page shows the loading state)."""
    return path in ("/", "/index.html") or path.startswith(STATIC_PREFIX)


def _authorized(keys: list[str]) -> bool:
    return authorized(request.headers.get("Authorization", ""), request.headers.get("X-Api-Key"), keys)


def authorized(auth: str, x_api_key: str | None, keys: list[str]) -> bool:
    """Bearer token (the Authorization header `auth`) or x-api-key header, compared in
    constant time against every key."""
    given = ""
    if auth[:7].lower() == "bearer ":
        given = auth[7:].strip()
    elif x_api_key is not None:
        given = x_api_key.strip()
    if not given:
        return False
    ok = False
    g_bytes = given.encode("utf-8")
    for k in keys:
        ok |= hmac.compare_digest(g_bytes, k.encode("utf-8"))
    return ok


def _allowed_origin(cfg: ServerConfig, origin: str) -> str | None:
    """The Access-Control-Allow-Origin value, as llama-server chooses it: `*` reflects the
    request's Origin, `localhost` reflects localhost origins only (any port), an explicit origin
    is sent as it is; from a comma-separated list the matching origin is reflected."""
    spec = cfg.cors_origins.strip()
    if spec == "*":
        return origin or None
    if spec == "localhost":
        return origin if origin and _is_localhost(origin) else None
    allowed = [o.strip() for o in spec.split(",") if o.strip()]
    if origin and origin.rstrip("/") in {o.rstrip("/") for o in allowed}:
        return origin
    return allowed[0] if len(allowed) == 1 else None


def _is_localhost(origin: str) -> bool:
    try:
        host = urlsplit(origin).hostname
    except ValueError:
        return False
    return host in ("localhost", "127.0.0.1", "::1")


def _cors_headers(resp: Response, cfg: ServerConfig) -> None:
    origin = _allowed_origin(cfg, request.headers.get("Origin", ""))
    if origin is None:
        return
    resp.headers["Access-Control-Allow-Origin"] = origin
    if cfg.cors_credentials:
        resp.headers["Access-Control-Allow-Credentials"] = "true"
    resp.headers.add("Vary", "Origin")


def _preflight(cfg: ServerConfig) -> Response:
    """OPTIONS: answered before any key check (browsers send no Authorization there)."""
    resp = Response("", status=200, content_type="text/html")
    resp.headers["Access-Control-Allow-Credentials"] = "true" if cfg.cors_credentials else "false"
    resp.headers["Access-Control-Allow-Methods"] = cfg.cors_methods
    resp.headers["Access-Control-Allow-Headers"] = cfg.cors_headers
    resp.headers["Access-Control-Max-Age"] = "86400"
    return resp


def _log_request(cfg: ServerConfig, status: int) -> None:
    if request.path in HEALTH_PATHS and not cfg.verbose:
        return
    ms = (time.perf_counter() - g.get("t0", time.perf_counter())) * 1e3
    remote = request.remote_addr or ""
    if cfg.log_format == "json":
        line = dumps(
            {"ts": round(time.time(), 3), "level": "info", "msg": "request", "method": request.method,
             "path": request.path, "status": status, "remote": remote, "ms": round(ms, 2)}
        )
    else:
        line = f"request: {request.method} {request.path} {remote} {status} {ms:.1f} ms"
    print(line, file=sys.stderr, flush=True)
