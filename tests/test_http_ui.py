"""http/ui.py: the chat page and its static files, public and served while the model loads."""

from __future__ import annotations

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
