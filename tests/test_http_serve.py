"""`llama serve` as a process: 503 while loading, graceful SIGTERM/SIGINT (exit 0) with a
stream in flight, API keys, CORS, llama-server's no-op flags, exit codes of bad starts."""

from __future__ import annotations

import http.client
import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import openai
import pytest

from tests.http_server import ROOT, LlamaServer

pytestmark = pytest.mark.slow


def test_loading_503_then_sigterm_mid_stream_exits_0(demo_model: str) -> None:
    srv = LlamaServer("-m", demo_model, "-c", "256", "-np", "1")
    try:
        srv.start(wait_ready=False)
        seen = []
        while True:
            code, body = srv.get("/health")
            seen.append((code, body))
            if code == 200:
                break
            assert code == 503 and body == {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
            time.sleep(0.05)
        assert seen[0][0] == 503 and seen[-1] == (200, {"status": "ok"})

        lines: list[bytes] = []
        started = threading.Event()

        def stream() -> None:
            u = urlparse(srv.url)
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
            conn.request("POST", "/v1/chat/completions", json.dumps(
                {"messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": 500, "stream": True}),
                {"Content-Type": "application/json"})
            resp = conn.getresponse()
            while True:
                chunk = resp.read1(4096)
                if not chunk:
                    break
                lines.append(chunk)
                started.set()
            conn.close()

        t = threading.Thread(target=stream)
        t.start()
        assert started.wait(60)
        t0 = time.monotonic()
        rc = srv.stop(signal.SIGTERM)
        t.join(30)
        body = b"".join(lines).decode()
        assert rc == 0 and time.monotonic() - t0 < 15
        # ended cleanly and honestly: the error event says the answer was cut, then [DONE]
        assert body.endswith("data: [DONE]\n\n") and '"finish_reason":"stop"' not in body
        assert '"type":"unavailable_error"' in body and "shutting down" in body
        assert "shutting down" in srv.log()
    finally:
        srv.__exit__()


_MARK_IMPORTS = """
import sys


class _Mark:
    \"\"\"Prints a line when the engine's compiler (numba) or the web framework (quart) is first imported.\"\"\"

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201
        if name in ("numba", "quart"):
            print(f"imported {name}", file=sys.stderr, flush=True)
        return None


sys.meta_path.insert(0, _Mark())
"""


def test_cold_start_answers_503_from_the_port_opening_through_the_compile(demo_model: str, tmp_path: Path) -> None:
    """A first start on a machine without compiled kernels (an empty numba cache): the port
    opens before the web framework and the engine's code are imported, /health answers
    llama-server's 503 "Loading model" from then on, while the kernels compile too, then 200."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(_MARK_IMPORTS)
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba"), "PYTHONPATH": str(tmp_path / "site")}
    loading = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
    srv = LlamaServer("-m", demo_model, "-c", "256", "-np", "1", env=env, timeout=900)
    try:
        srv.start(wait_ready=False)
        seen: list[tuple[int, bool]] = []  # (status, whether the kernels were compiling then)
        deadline = time.monotonic() + 900
        while True:
            code, body = srv.get("/health")
            log = srv.log()
            seen.append((code, "compiling the matmul kernels" in log and "model loaded" not in log))
            if code == 200:
                break
            assert code == 503 and body == loading, (code, body, log)
            assert time.monotonic() < deadline, log
            time.sleep(0.1)
        log = srv.log()
    finally:
        srv.__exit__()
    assert seen[0][0] == 503 and any(compiling for code, compiling in seen if code == 503), (seen, log)
    lines = log.splitlines()
    opened = next(i for i, line in enumerate(lines) if "listening on" in line)
    assert opened < lines.index("imported quart") and opened < lines.index("imported numba"), log


def test_api_keys_cors_ui_and_ignored_flags(demo_model: str, tmp_path: Path) -> None:
    keyfile = tmp_path / "keys.txt"
    keyfile.write_text("# keys\nk2\n\n")
    args = ["-m", demo_model, "-c", "256", "-np", "1", "--no-warmup", "--api-key", "k1", "--api-key-file", str(keyfile),
            "--no-ui", "-ngl", "99", "-fa", "--mlock", "-ctk", "q8_0", "--no-mmap", "-tb", "4", "--log-colors", "off"]
    with LlamaServer(*args) as srv:
        log = srv.log()
        for flag in ("--n-gpu-layers", "--flash-attn", "--mlock", "--cache-type-k", "--no-mmap", "--threads-batch",
                     "--log-colors"):
            assert f"note: {flag} has no effect here" in log, flag
        assert srv.get("/health")[0] == 200 and srv.get("/sw.js")[0] == 404  # public (--no-ui: no UI files)
        assert srv.get("/v1/models")[0] == 401  # as llama-server: only health and UI files are public
        assert srv.get("/v1/models", headers={"Authorization": "Bearer k2"})[0] == 200
        code, body = srv.get("/props")
        assert code == 401 and body == {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}}
        assert srv.get("/props", headers={"Authorization": "Bearer nope"})[0] == 401
        assert srv.get("/props", headers={"Authorization": "Bearer k2"})[0] == 200
        assert srv.get("/props", headers={"X-Api-Key": "k1"})[0] == 200
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=srv.url + "/v1", api_key="wrong", max_retries=0).completions.create(
                model="x", prompt="a", max_tokens=1)
        r = openai.OpenAI(base_url=srv.url + "/v1", api_key="k1", max_retries=0).completions.create(
            model="x", prompt="Hello", max_tokens=1)
        assert r.usage.completion_tokens == 1
        code, _ = srv.request("OPTIONS", "/v1/chat/completions", headers={
            "Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        assert code == 200
        u = urlparse(srv.url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        conn.request("OPTIONS", "/v1/chat/completions", headers={"Origin": "http://localhost:5173",
                                                                 "Access-Control-Request-Method": "POST"})
        resp = conn.getresponse()
        resp.read()
        assert resp.getheader("Access-Control-Allow-Origin") == "http://localhost:5173"
        assert "POST" in resp.getheader("Access-Control-Allow-Methods", "")
        conn.close()
        assert srv.get("/")[0] == 404  # --no-ui
        assert srv.stop(signal.SIGINT) == 0


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls_and_json_log_lines(demo_model: str, tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    with LlamaServer("-m", demo_model, "-c", "256", "-np", "1", "--no-warmup", "--ssl-key-file", str(key),
                     "--ssl-cert-file", str(cert), "--log-format", "json", cafile=str(cert)) as srv:
        assert srv.url.startswith("https://")
        assert srv.get("/v1/models")[0] == 200  # no --api-key: everything is open
        with pytest.raises(OSError):  # plain HTTP is not served
            urllib.request.urlopen(srv.url.replace("https://", "http://") + "/health", timeout=10).read()
        lines = [json.loads(ln) for ln in srv.log().splitlines() if ln.startswith("{")]
        assert any(d.get("path") == "/v1/models" and d.get("status") == 200 for d in lines)


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "llamacli", "serve", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)


def test_bad_starts_exit_with_one_error_line(tmp_path: Path) -> None:
    r = _serve("-m", str(tmp_path / "missing.gguf"), "--port", "0")
    assert r.returncode == 2 and "error:" in r.stderr and "missing.gguf" in r.stderr and "Traceback" not in r.stderr
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        r = _serve("--port", str(busy.getsockname()[1]))
        assert r.returncode == 1 and "error:" in r.stderr and "Traceback" not in r.stderr
    finally:
        busy.close()
    r = _serve("--top-p", "7", "--port", "0")
    assert r.returncode == 1 and "top_p" in r.stderr


def test_llama_server_flags_and_wire_format(demo_model: str) -> None:
    """Flags llama.cpp's server tests start servers with, on a real `llama serve`: --alias and
    --tags in /v1/models; --tools limits CORS to localhost origins by default; --no-slots is a
    501; header names are written capitalised (llama.cpp's tests read them from a plain dict);
    an OpenAI client's own model name is served."""
    args = ["-m", demo_model, "-c", "256", "-np", "1", "--no-warmup", "--alias", "tinyllama-2,fim,code",
            "--tags", "chat,fim,small", "--tools", "all", "--no-slots", "--metrics"]
    with LlamaServer(*args) as srv:
        _, d = srv.get("/v1/models")
        (m,) = d["data"]
        assert (m["id"], m["aliases"], m["tags"]) == ("code", ["code", "fim", "tinyllama-2"], ["chat", "fim", "small"])
        code, d = srv.get("/slots")
        assert code == 501 and d["error"]["type"] == "not_supported_error"
        u = urlparse(srv.url)
        for origin, allowed in [("http://localhost:8080", True), ("http://evil.com", False)]:
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
            conn.request("OPTIONS", "/completions", headers={"Origin": origin, "Access-Control-Request-Method": "POST"})
            resp = conn.getresponse()
            resp.read()
            names = [k for k, _ in resp.getheaders()]
            assert resp.status == 200 and "Access-Control-Allow-Methods" in names  # exact case on the wire
            assert (resp.getheader("Access-Control-Allow-Origin") == origin) == allowed, origin
            conn.close()
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        resp.read()
        assert "Process-Start-Time-Unix" in [k for k, _ in resp.getheaders()]
        conn.close()
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0)
        r = client.completions.create(model="gpt-3.5-turbo-instruct", prompt="Hello", max_tokens=1)
        assert r.model == "code" and r.usage.completion_tokens == 1
