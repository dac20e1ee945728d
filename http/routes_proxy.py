"""GET/POST /cors-proxy?url=...: llama-server's experimental CORS proxy for the web UI's MCP
client (`--ui-mcp-proxy`). Only headers the caller names as `x-llama-server-proxy-header-NAME`
are forwarded (as NAME): the caller's own Authorization, cookies and API key never leave.
Without the flag both routes answer 403, as llama-server does."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlsplit

from quart import Blueprint, Response, request

from llamacli.http.context import current_state
from llamacli.http.errors import ApiError, bad_request

bp = Blueprint("proxy", __name__)

PROXY_HEADER_PREFIX = "x-llama-server-proxy-header-"
TIMEOUT_S = 600.0
_HOP_BY_HOP = frozenset(("connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
                         "proxy-authenticate", "proxy-authorization", "content-length", "content-encoding"))


@dataclass
class Upstream:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


def forwarded_headers(headers: list[tuple[str, str]]) -> dict[str, str]:
    """The headers to send upstream: only the explicitly prefixed ones, prefix removed."""
    out = {}
    for key, value in headers:
        if key.lower().startswith(PROXY_HEADER_PREFIX) and len(key) > len(PROXY_HEADER_PREFIX):
            out[key[len(PROXY_HEADER_PREFIX):]] = value
    return out


def check_target(url: str) -> str:
    """The target URL, or a 400 for what llama-server refuses (no host, credentials, scheme)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise bad_request(f"unsupported URL scheme in target URL: {parts.scheme}")
    if not parts.hostname:
        raise bad_request("invalid target URL: missing host")
    if parts.password:
        raise bad_request("authentication in target URL is not supported")
    return url


def fetch(method: str, url: str, headers: dict[str, str], body: bytes | None) -> Upstream:
    """One upstream request (blocking; run off the event loop). HTTP errors are passed on."""
    req = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:  # noqa: S310 (http/https only)
            return Upstream(r.status, list(r.headers.items()), r.read())
    except urllib.error.HTTPError as e:
        return Upstream(e.code, list(e.headers.items()), e.read())
    except (urllib.error.URLError, OSError) as e:
        raise ApiError(502, f"proxy request failed: {e}", "server_error") from None


@bp.route("/cors-proxy", methods=["GET", "POST"])
async def cors_proxy() -> Response:
    st = current_state()
    if not st.config.ui_mcp_proxy:
        raise ApiError(403, "this feature is disabled", "feature_disabled")
    url = check_target(request.args.get("url", ""))
    headers = forwarded_headers(list(request.headers.items()))
    body = await request.get_data(cache=True, as_text=False, parse_form_data=False) if request.method == "POST" else None
    method = request.method
    up = await st.blocking(lambda: fetch(method, url, headers, body))
    resp = Response(up.body, status=up.status)
    for k, v in up.headers:
        if k.lower() not in _HOP_BY_HOP:
            resp.headers[k] = v
    return resp
