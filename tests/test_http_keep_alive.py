"""http/keep_alive.py: an answer sent before the request body was read (a 401, a 413, `POST
/slots/N?action=erase`, an invalid action) leaves a keep-alive connection usable, or says it
closes. Hypercorn serves the app over the fake engine in this process (tests/inproc_server.py):
a keep-alive httpx client sends several requests on one connection, each body arriving after
the answer has been decided (the race a real client loses now and then: "Server disconnected
without sending a response")."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import httpx2

from llamacli.http.app import create_app
from llamacli.http.config import ServerConfig
from tests.fakes import FakeEngine, FakeTokenizer, fake_model
from tests.inproc_server import RecordClients, serve_in_thread


def _app(config: ServerConfig) -> RecordClients:
    tok = FakeTokenizer()
    return RecordClients(create_app(FakeEngine(tokenizer=tok), config, fake_model(tok)))


def _late(body: bytes, wait: float = 0.3) -> Iterator[bytes]:
    """A body sent after a pause: the server has answered by then (its length is announced)."""
    time.sleep(wait)
    yield body


def _post_late(http: httpx2.Client, url: str, body: bytes) -> httpx2.Response:
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    return http.post(url, content=_late(body), headers=headers)


def test_early_answers_keep_the_connection(tmp_path: Path) -> None:
    app = _app(ServerConfig(api_keys=["k"], slot_save_path=str(tmp_path)))
    auth = {"Authorization": "Bearer k"}
    body = b'{"prompt": "' + b"a" * 100_000 + b'"}'
    with serve_in_thread(app, app) as url, httpx2.Client(timeout=30) as http:
        r = _post_late(http, url + "/completion", body)  # no key: a 401 before the body is read
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert r.headers.get("connection", "").lower() != "close"
        http.headers.update(auth)
        for path in ("/slots/0?action=erase", "/slots/0?action=fly"):  # neither reads its body
            r = _post_late(http, url + path, body)
            assert r.status_code in (200, 400), r.text
        assert http.get(url + "/health").status_code == 200
    assert len(app.ports) == 4 and len(set(app.ports)) == 1, app.ports  # one connection for all four


def test_a_413_reaches_a_client_still_uploading_and_the_connection_lives_on() -> None:
    app = _app(ServerConfig(max_body_size=1000))
    big = b'{"prompt": "' + b"a" * (4 << 20) + b'"}'  # 4 MB against a 1000-byte limit
    with serve_in_thread(app, app) as url, httpx2.Client(timeout=30) as http:
        for _ in range(2):  # httpx sends the whole body before it reads the answer
            r = http.post(url + "/completion", content=big, headers={"Content-Type": "application/json"})
            assert r.status_code == 413 and "--max-body-size" in r.json()["error"]["message"]
        assert http.get(url + "/health").status_code == 200
    assert len(set(app.ports)) == 1, app.ports


def test_a_body_too_large_to_drain_is_answered_with_connection_close() -> None:
    """Announced larger than what is drained (64 MiB): the 413 says the connection closes, and
    comes before a byte of the body is sent."""
    app = _app(ServerConfig(max_body_size=1000))
    with serve_in_thread(app) as url:
        u = urlparse(url)
        with socket.create_connection((u.hostname, u.port), timeout=30) as s:
            s.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100000000\r\n\r\n")
            raw = b""
            while b"}}" not in raw:
                chunk = s.recv(65536)
                assert chunk, raw
                raw += chunk
    head = raw.partition(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 413") and b"\r\nconnection: close" in head, raw[:400]
