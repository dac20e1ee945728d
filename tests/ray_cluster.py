"""A two-node Ray cluster on loopback for the `llama serve --ray` tests, and the deployment on
it; everything started here is stopped by its PID.

Ray rewrites 127.0.0.1 and localhost to the host's external address, so the head runs on
127.0.0.2 and the worker node on 127.0.0.3 (both loopback on Linux); Serve's HTTP proxy on the
head only. `ray stop` is never used (it ends every Ray process of the machine): each node is a
`ray start --block` process in its own session, and SIGTERM to it stops that node's processes
(RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0: at once, not after a 30 s drain).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.http_server import ROOT

HEAD, WORKER = "127.0.0.2", "127.0.0.3"
RAY = str(Path(sys.executable).with_name("ray"))


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class Process:
    """A child process in its own session, its output in a file."""

    def __init__(self, name: str, cmd: list[str], log_dir: str, env: dict[str, str]) -> None:
        self.name = name
        self.log_path = Path(log_dir) / f"{name}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.log())
            if m:
                return m
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}):\n{self.log()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: no {pattern!r} in {timeout:.0f} s:\n{self.log()[-3000:]}")
            time.sleep(0.2)

    def stop(self, wait: float) -> None:
        """SIGTERM, then SIGKILL to its process group after `wait` seconds."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


class RayServe:
    """Head, worker node and `llama serve --ray` with `serve_args`; `url` is the Serve proxy."""

    def __init__(self, *serve_args: str) -> None:
        self.serve_args = serve_args
        self.tmp = tempfile.mkdtemp(prefix="rayt-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
        self.env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0",
                        RAY_USAGE_STATS_ENABLED="0")
        self.procs: list[Process] = []
        self.address = f"{HEAD}:{free_port(HEAD)}"
        self.url = ""

    def start(self) -> RayServe:
        try:
            common = ["--num-cpus", "1", "--disable-usage-stats", "--block"]
            head = self._run("head", [RAY, "start", "--head", "--node-ip-address", HEAD, "--port",
                                      self.address.split(":")[1], "--include-dashboard", "false", "--temp-dir", self.tmp,
                                      "--ray-client-server-port", str(free_port(HEAD)), *common])
            head.wait_for("Ray runtime started", 120)
            self._run("worker", [RAY, "start", "--address", self.address, "--node-ip-address", WORKER, *common]).wait_for(
                "Ray runtime started", 120)
            port = free_port(HEAD)
            self.serve("serve", "--port", str(port), *self.serve_args).wait_for(r"ready at http://", 600)
            self.url = f"http://{HEAD}:{port}"
        except BaseException:
            self.stop()
            raise
        return self

    def serve(self, name: str, *args: str) -> Process:
        """`llama serve --ray` on this cluster (its proxy on the head), as process `name`."""
        return self._run(name, [sys.executable, "-m", "llamacli", "serve", "--ray", self.address, "--host", HEAD, *args])

    def _run(self, name: str, cmd: list[str]) -> Process:
        p = Process(name, cmd, self.tmp, self.env)
        self.procs.append(p)
        return p

    def replica_pid(self, replica: str) -> int:
        """The PID of engine replica `replica` (the Serve controller logs it when it starts)."""
        logs = Path(self.tmp, "session_latest", "logs", "serve").glob("controller_*.log")
        text = "".join(p.read_text(errors="replace") for p in logs)
        return int(re.findall(rf"Replica\(id='{replica}'.*?\(PID: (\d+)\)", text)[-1])

    def stop(self) -> None:
        """`llama serve --ray` first (it deletes the application, drained), then the nodes."""
        for p in reversed(self.procs):
            p.stop(20 if p.name in ("head", "worker") else 60)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> RayServe:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
