"""Start a real `llama serve` on 127.0.0.1 for end-to-end tests, and stop it by its PID.

    with LlamaServer("-c", "512", "-np", "2") as srv:
        httpx2.get(srv.url + "/health")

The server binds port 0 (a free port chosen by the system) and prints its URL on stderr;
start() waits for that line, then for /health to answer 200. Its output goes to a file
(`srv.log()` reads it), never to a pipe that could fill up.
"""

from __future__ import annotations

import json
import os
import re
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
URL_LINE = re.compile(r"listening on (https?://[^\s,]+)")


class LlamaServer:
    def __init__(
        self, *args: str, timeout: float = 120.0, env: dict[str, str] | None = None, cafile: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        self.args = list(args)
        self.cwd = Path(cwd) if cwd is not None else ROOT  # the server's working directory (--tools' root)
        self.ssl = ssl.create_default_context(cafile=cafile) if cafile else None  # to trust a test certificate
        self.timeout = timeout
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self._log = tempfile.NamedTemporaryFile(prefix="llama-serve-", suffix=".log", delete=False)

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self, wait_ready: bool = True) -> "LlamaServer":
        cmd = [sys.executable, "-m", "llamacli", "serve", "--host", "127.0.0.1", "--port", "0", *self.args]
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(self.env or {}))
        if self.cwd != ROOT:  # elsewhere, this checkout's llamacli must still be the one imported
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(cmd, cwd=self.cwd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.timeout
        while not self.url:
            m = URL_LINE.search(self.log())
            if m:
                self.url = m.group(1)
                break
            self._check_alive()
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"llama serve printed no URL in {self.timeout} s:\n{self.log()}")
            time.sleep(0.05)
        if wait_ready:
            self.wait_ready(deadline)
        return self

    def wait_ready(self, deadline: float | None = None) -> None:
        deadline = deadline or time.monotonic() + self.timeout
        while True:
            status, _ = self.get("/health")
            if status == 200:
                return
            self._check_alive()
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"llama serve not ready in {self.timeout} s:\n{self.log()}")
            time.sleep(0.1)

    def _check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"llama serve exited with {self.proc.returncode}:\n{self.log()}")

    def send_signal(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int | None:
        """Send `sig` to the server's PID and wait; SIGKILL (same PID) if it does not exit."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        return self.proc.returncode

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._log.close()
        os.unlink(self._log.name)

    def log(self) -> str:
        with open(self._log.name, "rb") as f:
            return f.read().decode("utf-8", "replace")

    # ---- plain HTTP (urllib: no dependency beyond the standard library) ---------------------
    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None, raw: bytes | None = None
    ) -> tuple[int, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers or {})
        if data is not None and "Content-Type" not in (headers or {}):
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.ssl) as r:
                return r.status, _decode(r.read(), r.headers.get("Content-Type", ""))
        except urllib.error.HTTPError as e:
            return e.code, _decode(e.read(), e.headers.get("Content-Type", ""))
        except (urllib.error.URLError, ConnectionError):
            return 0, None

    def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return self.request("POST", path, body, **kw)


def _decode(raw: bytes, content_type: str) -> Any:
    if "json" in content_type:
        return json.loads(raw)
    return raw.decode("utf-8", "replace")
