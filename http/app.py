"""`create_app`: the Quart app serving llama-server's API over one engine.

Cross-cutting concerns live here and only here: 503 while the model loads, API-key auth,
CORS (preflight and response headers), error responses, the request log. Endpoints are in
routes_admin (health, models, props, slots, metrics), ui (the chat page and /static/), routes_native (/completion,
/tokenize, /infill, /embedding, ...), routes_oai (/v1/...) and routes_anthropic (/v1/messages).
"""

from __future__ import annotations

import hmac
import os
import sys
import time
import traceback
from typing import Any

from quart import Quart, Response, g, request
from werkzeug.exceptions import HTTPException

from llamacli.http.context import ModelInfo, ServerConfig, ServerState
from llamacli.http.errors import INVALID_API_KEY, LOADING, ApiError, to_api_error
from llamacli.http.sse import dumps, json_response
from llamacli.http.ui import STATIC_PREFIX

# Reachable without an API key (llama-server's public endpoints) and while loading for /health.
PUBLIC_PATHS = frozenset({"/health", "/v1/health", "/models", "/v1/models", "/", "/index.html"})
HEALTH_PATHS = frozenset({"/health", "/v1/health"})
CORS_METHODS = "GET, POST, DELETE, OPTIONS"


def create_app(
    engine: Any = None,
    config: ServerConfig | None = None,
    model: ModelInfo | None = None,
    state: ServerState | None = None,
) -> Quart:
    """The app over `engine` (serving `model`). With engine=None the app starts in the loading
    state (every endpoint 503) until `app.extensions["llama"].set_ready(engine, model)`."""
    from llamacli.http import routes_admin, routes_anthropic, routes_native, routes_oai, ui

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
        MAX_CONTENT_LENGTH=64 * 1024 * 1024,
        PROVIDE_AUTOMATIC_OPTIONS=False,
        JSON_SORT_KEYS=False,
    )
    app.extensions["llama"] = st
    for mod in (routes_admin, routes_native, routes_oai, routes_anthropic, ui):
        app.register_blueprint(mod.bp)

    @app.before_request
    async def _gate() -> Response | None:
        g.t0 = time.perf_counter()
        if request.method == "OPTIONS":
            return _preflight(st.config)
        path = request.path
        if not st.ready and path not in HEALTH_PATHS and not _is_ui(path):
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

    @app.errorhandler(ApiError)
    async def _api_error(e: ApiError) -> Response:
        return json_response(e.body(), e.status)

    @app.errorhandler(HTTPException)
    async def _http_error(e: HTTPException) -> Response:
        code = e.code or 500
        message = {404: "File Not Found", 405: "Method Not Allowed"}.get(code, e.description or e.name)
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
    """Bearer token or x-api-key header, compared in constant time against every key."""
    given = ""
    auth = request.headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        given = auth[7:].strip()
    elif "X-Api-Key" in request.headers:
        given = request.headers.get("X-Api-Key", "").strip()
    if not given:
        return False
    ok = False
    g_bytes = given.encode("utf-8")
    for k in keys:
        ok |= hmac.compare_digest(g_bytes, k.encode("utf-8"))
    return ok


def _allowed_origin(cfg: ServerConfig, origin: str) -> str | None:
    if not origin:
        return None
    spec = cfg.cors_origins.strip()
    if spec == "*":
        return origin
    if spec == "localhost":
        host = origin.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
        return origin if host in ("localhost", "127.0.0.1", "::1") else None
    allowed = {o.strip().rstrip("/") for o in spec.split(",") if o.strip()}
    return origin if origin.rstrip("/") in allowed else None


def _cors_headers(resp: Response, cfg: ServerConfig) -> None:
    origin = _allowed_origin(cfg, request.headers.get("Origin", ""))
    if origin is None:
        return
    resp.headers["Access-Control-Allow-Origin"] = origin
    resp.headers["Access-Control-Allow-Credentials"] = "true"
    resp.headers.add("Vary", "Origin")


def _preflight(cfg: ServerConfig) -> Response:
    resp = Response("", status=200)
    resp.headers["Access-Control-Allow-Methods"] = CORS_METHODS
    resp.headers["Access-Control-Allow-Headers"] = request.headers.get("Access-Control-Request-Headers", "*") or "*"
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
