"""http/routes_proxy.py: /cors-proxy (--ui-mcp-proxy) against a local target server."""

from __future__ import annotations

from typing import Any

from llamacli.http.config import ServerConfig
from tests.http_app_client import make


def test_cors_proxy() -> None:
    """/cors-proxy is 403 unless --ui-mcp-proxy; with it, only x-llama-server-proxy-header-*
    headers reach the target (the caller's key, cookies and proxy credentials never do)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: dict[str, str] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            seen.update({k.lower(): v for k, v in self.headers.items()})
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    target = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    try:
        url = f"/cors-proxy?url=http://127.0.0.1:{target.server_port}/x"
        c, _ = make(ServerConfig())
        code, d, _ = c.get(url)
        assert code == 403 and d["error"]["type"] == "feature_disabled"
        c, _ = make(ServerConfig(ui_mcp_proxy=True, api_keys=["k"]))
        code, text, _ = c.get(url, headers={"Authorization": "Bearer k", "Cookie": "s=1", "Proxy-Authorization": "Basic x",
                                            "x-llama-server-proxy-header-accept": "application/json",
                                            "x-llama-server-proxy-header-authorization": "Bearer explicit"})
        assert code == 200 and text == "ok"
        assert seen["accept"] == "application/json" and seen["authorization"] == "Bearer explicit"
        assert "cookie" not in seen and "proxy-authorization" not in seen and "x-api-key" not in seen
        assert c.get("/cors-proxy?url=ftp://x/y", headers={"Authorization": "Bearer k"})[0] == 400
    finally:
        target.shutdown()
        target.server_close()
