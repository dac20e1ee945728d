"""http/ui.py: the chat page and its static files, public and served while the model loads."""

from __future__ import annotations

import struct

from llamacli.http.app import create_app
from llamacli.http.config import ServerConfig
from tests.http_app_client import Client, make


def test_ui_page() -> None:
    c, _ = make(ServerConfig())
    code, text, h = c.get("/")
    assert code == 200 and h["Content-Type"].startswith("text/html") and 'src="static/js/app.js"' in text
    assert "script-src 'self'" in h["Content-Security-Policy"]
    code, js, h = c.get("/static/js/stream.js")
    assert code == 200 and h["Content-Type"].startswith("text/javascript") and "v1/chat/completions" in js
    code, _, h = c.get("/static/vendor/dompurify/purify.min.js")
    assert code == 200 and "max-age" in h["Cache-Control"]
    for bad in ("/static/../app.py", "/static/%2e%2e/app.py", "/static/js/nope.js", "/static/"):
        assert c.get(bad)[0] == 404, bad
    c, _ = make(ServerConfig(ui=False))
    assert c.get("/")[0] == 404
    assert c.get("/static/js/app.js")[0] == 404


def test_ui_is_public_and_served_while_loading() -> None:
    c, _ = make(ServerConfig(api_keys=["k"]))
    assert c.get("/")[0] == 200 and c.get("/static/app.css")[0] == 200
    assert c.get("/props")[0] == 401
    c = Client(create_app(None, ServerConfig()))
    assert c.get("/")[0] == 200 and c.get("/static/js/app.js")[0] == 200
    assert c.get("/props")[0] == 503


def test_web_app_files_and_module_types() -> None:
    """The manifest (http/static's, not the built-in fallback) and its icons; PDF.js's module
    files as JavaScript (a module script with another type is refused); the page's policy
    lets PDF.js's worker and the manifest load from this server only."""
    c, _ = make(ServerConfig())
    code, manifest, h = c.get("/manifest.webmanifest")
    assert code == 200 and h["Content-Type"] == "application/manifest+json"
    assert manifest["display"] == "standalone" and {i["sizes"] for i in manifest["icons"]} == {"192x192", "512x512", "any"}
    for icon in manifest["icons"]:
        code, body, h = c.get("/" + icon["src"])
        assert code == 200 and h["Content-Type"].startswith(icon["type"]), icon
        if icon["type"] == "image/png":  # the size it claims, from the PNG header
            assert body[:8] == b"\x89PNG\r\n\x1a\n" and "%dx%d" % struct.unpack(">II", body[16:24]) == icon["sizes"]
    for name in ("pdf.min.mjs", "pdf.worker.min.mjs"):
        code, _, h = c.get(f"/static/vendor/pdfjs/{name}")
        assert code == 200 and h["Content-Type"] == "text/javascript; charset=utf-8", name
    csp = c.get("/")[2]["Content-Security-Policy"]
    assert "worker-src 'self'" in csp and "manifest-src 'self'" in csp and "unsafe-eval" not in csp
