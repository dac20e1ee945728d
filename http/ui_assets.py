"""The web UI's files besides the page itself: what a browser asks for next to `/` (the
service worker, the web-app manifest, the build's version file). Like the page they are public
with an API key set (llama-server leaves every embedded UI asset public) and 404 with --no-ui.
A file of that name in http/static wins over the small built-in fallback."""

from __future__ import annotations

import functools
import json
import os

from quart import Blueprint, Response

from llamacli.http.context import current_state
from llamacli.http.errors import ApiError

bp = Blueprint("ui_assets", __name__)

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")

# path -> (content type, built-in content)
ASSETS: dict[str, tuple[str, bytes]] = {
    "/sw.js": ("text/javascript; charset=utf-8", b"// llamacli: no offline cache\nself.addEventListener('fetch', () => {});\n"),
    "/manifest.webmanifest": (
        "application/manifest+json",
        json.dumps({"name": "llama", "short_name": "llama", "start_url": "/", "display": "standalone"}).encode(),
    ),
    "/_app/version.json": ("application/json", json.dumps({"version": "llamacli"}).encode()),
}
# paths reachable without an API key (with "/" and "/index.html", served by routes_admin)
UI_PATHS = frozenset({"/", "/index.html", *ASSETS})


@functools.cache
def asset_bytes(path: str) -> bytes:
    """The file under http/static when there is one, else the built-in content."""
    local = os.path.join(STATIC_DIR, path.lstrip("/"))
    if os.path.isfile(local):
        with open(local, "rb") as f:
            return f.read()
    return ASSETS[path][1]


def _handler(path: str):  # type: ignore[no-untyped-def]
    async def serve_asset() -> Response:
        if not current_state().config.ui:
            raise ApiError(404, "File Not Found")
        return Response(asset_bytes(path), content_type=ASSETS[path][0])

    serve_asset.__name__ = "asset_" + path.strip("/").replace("/", "_").replace(".", "_")
    return serve_asset


for _path in ASSETS:
    bp.get(_path)(_handler(_path))
