"""The web UI: the chat page at / and its files under /static/ (http/static in the package).

No build step: the page is plain HTML, CSS and JavaScript modules, plus third-party libraries
vendored from npm by scripts/vendor_js.py. Model output is untrusted; besides the page's own
sanitising (DOMPurify), every UI response carries a Content-Security-Policy that allows only
this server's own scripts, so no inline script or event handler can ever run.
"""

from __future__ import annotations

import mimetypes
import os

from quart import Blueprint, Response

from llamacli.http.context import current_state
from llamacli.http.errors import ApiError

bp = Blueprint("ui", __name__)

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
STATIC_PREFIX = "/static/"

# Scripts, styles and fonts from this server only; images only inline (data:) or from this
# server, so that a Markdown image in model output cannot call anywhere; KaTeX positions its
# glyphs with style attributes, hence 'unsafe-inline' for style attributes (never for scripts).
# Workers (PDF.js reads PDFs in one) and the web-app manifest come from this server too.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; "
    "font-src 'self'; img-src 'self' data: blob:; connect-src 'self'; worker-src 'self'; "
    "manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css", ".woff2": "font/woff2",
          ".json": "application/json", ".png": "image/png", ".svg": "image/svg+xml"}


def _ui_response(body: bytes, content_type: str, cache: bool) -> Response:
    resp = Response(body, content_type=content_type)
    resp.headers["Content-Security-Policy"] = CSP
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "no-referrer"
    resp.headers["Cache-Control"] = "public, max-age=3600" if cache else "no-cache"
    return resp


def _require_ui() -> None:
    if not current_state().config.ui:
        raise ApiError(404, "File Not Found")


@bp.get("/")
@bp.get("/index.html")
async def index() -> Response:
    _require_ui()
    return _ui_response(read_static("index.html"), "text/html; charset=utf-8", cache=False)


@bp.get("/static/<path:name>")
async def static_file(name: str) -> Response:
    _require_ui()
    body = read_static(name)
    # vendored files are pinned by version: cache them; the page's own files may change
    return _ui_response(body, content_type(name), cache=name.startswith("vendor/"))


def content_type(name: str) -> str:
    """The Content-Type of a file under http/static (module scripts need a JavaScript type)."""
    ctype = _TYPES.get(os.path.splitext(name)[1]) or mimetypes.guess_type(name)[0] or "application/octet-stream"
    if ctype.startswith("text/") or ctype.endswith("javascript"):
        ctype += "; charset=utf-8"
    return ctype


def read_static(name: str) -> bytes:
    """A file under http/static; 404 for anything else (no '..', no absolute path)."""
    parts = name.replace("\\", "/").split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ApiError(404, "File Not Found")
    path = os.path.join(STATIC_DIR, *parts)
    if not os.path.isfile(path):
        raise ApiError(404, "File Not Found")
    with open(path, "rb") as f:
        return f.read()
