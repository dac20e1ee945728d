"""http/app.py: what the app does around every route: API keys, CORS, the loading state,
header case on the wire."""

from __future__ import annotations

from llamacli.http.app import create_app
from llamacli.http.config import ServerConfig
from tests.fakes import FakeEngine, FakeTokenizer, fake_model
from tests.http_app_client import Client, make


def test_api_keys_and_public_endpoints() -> None:
    c, _ = make(ServerConfig(api_keys=["k1", "k2"]))
    body = {"prompt": "a", "n_predict": 1}
    code, d, _ = c.post("/completion", body)
    assert code == 401 and d == {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}}
    assert c.post("/completion", body, headers={"Authorization": "Bearer nope"})[0] == 401
    assert c.post("/completion", body, headers={"Authorization": "Bearer k2"})[0] == 200
    assert c.post("/completion", body, headers={"X-Api-Key": "k1"})[0] == 200
    # public: the health checks and the web UI's files; everything else needs the key
    for path in ("/health", "/v1/health", "/", "/sw.js", "/manifest.webmanifest", "/_app/version.json"):
        assert c.get(path)[0] == 200, path
    for path in ("/props", "/v1/models", "/models", "/slots", "/metrics"):
        assert c.get(path)[0] == 401, path
    assert c.get("/v1/models", headers={"Authorization": "Bearer k1"})[0] == 200


def test_cors() -> None:
    c, _ = make(ServerConfig(api_keys=["k"]))
    code, _, h = c.request("OPTIONS", "/v1/chat/completions", headers={
        "Origin": "http://example.com", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert code == 200 and h["Access-Control-Allow-Origin"] == "http://example.com"
    assert h["Access-Control-Allow-Methods"] == "GET, POST, DELETE, OPTIONS" and h["Access-Control-Allow-Headers"] == "*"
    assert h["Access-Control-Allow-Credentials"] == "true"
    _, _, h = c.get("/health", headers={"Origin": "http://example.com"})
    assert h["Access-Control-Allow-Origin"] == "http://example.com" and h["Access-Control-Allow-Credentials"] == "true"
    c2, _ = make(ServerConfig(cors_origins="localhost"))
    assert "Access-Control-Allow-Origin" not in c2.get("/health", headers={"Origin": "http://evil.com"})[2]
    assert c2.get("/health", headers={"Origin": "http://localhost:3000"})[2]["Access-Control-Allow-Origin"]


def test_cors_origin_rules() -> None:
    """llama-server's rules: `*` reflects any Origin, `localhost` only localhost hosts (any
    port, IPv6 included, never a lookalike), an explicit origin is sent as given."""
    pre = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "Authorization"}
    c, _ = make(ServerConfig())
    assert c.request("OPTIONS", "/completions", headers={"Origin": "localhost", **pre})[2]["Access-Control-Allow-Origin"] == "localhost"
    c, _ = make(ServerConfig(cors_origins="localhost"))
    for origin in ("http://localhost", "http://localhost:8080", "http://127.0.0.1:3000", "http://[::1]", "http://[::1]:3000"):
        code, _, h = c.request("OPTIONS", "/completions", headers={"Origin": origin, **pre})
        assert code == 200 and h["Access-Control-Allow-Origin"] == origin, origin
    for origin in ("http://evil.com", "http://notlocalhost", "http://localhost.evil.com"):
        code, _, h = c.request("OPTIONS", "/completions", headers={"Origin": origin, **pre})
        assert code == 200 and "Access-Control-Allow-Origin" not in h, origin
    c, _ = make(ServerConfig(cors_origins="https://app.example"))
    assert c.get("/health", headers={"Origin": "https://other.example"})[2]["Access-Control-Allow-Origin"] == "https://app.example"


def test_loading_state_is_503() -> None:
    app = create_app(None, ServerConfig())
    c = Client(app)
    for path in ("/health", "/v1/health"):
        code, d, _ = c.get(path)
        assert code == 503 and d == {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
    assert c.post("/completion", {"prompt": "a"})[0] == 503
    tok = FakeTokenizer()
    app.extensions["llama"].set_ready(FakeEngine(tokenizer=tok), fake_model(tok))
    assert c.get("/health")[0] == 200


def test_canonical_header_case() -> None:
    from llamacli.http.header_case import canonical

    assert canonical(b"access-control-allow-origin") == b"Access-Control-Allow-Origin"
    assert canonical(b"process-start-time-unix") == b"Process-Start-Time-Unix"
