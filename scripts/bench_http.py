"""HTTP throughput and memory: `llama serve` beside llama.cpp's llama-server (not run in CI).

    python scripts/bench_http.py [-m MODEL] [--bin /work/ref/build512/bin] [--clients 1,4,8,16]
                                 [--requests 2] [--tokens 48] [--stream] [-t 2]
    python scripts/bench_http.py --memory      # resident after one request, -np 1 -c 2048

Each server in turn (never both at once) on 127.0.0.1, with the same model and flags (-np = the
most clients, -c = 256 per slot, -t); for each client count N, N threads each send --requests
greedy /completion requests of --tokens tokens (ignore_eos, so every answer has that many),
one after the other, with different prompts; aggregate generated tokens/s = all tokens / the
wall time of the round. `--stream` asks for SSE and counts the token events. `--memory`:
each server with `-np 1 -c 2048`, its resident set (VmRSS) after loading and after one
request, each read 1 s after the last answer (SETTLE_S). Which llama-server: `--bin`, a folder that scripts/build_llama_server.sh made (avx512 or
avx2). Our code path is the one numba targets (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES, as
tests/test_qmm.py): compare the AVX2 path with the avx2 build.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTLE_S = 1.0  # --memory: wait after an answer (ours gives freed heap pages back as its engine goes idle)
PROMPTS = ["The history of the printing press", "def quicksort(xs):", "Les fleurs du jardin", "Water boils at",
           "Once upon a time in a small village", "The three laws of motion are", "import json\n", "My favourite recipe"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One server process on 127.0.0.1 (started by `start`, stopped by PID)."""

    def __init__(self, name: str, cmd: Callable[[int], list[str]]) -> None:
        self.name, self.cmd = name, cmd
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 600.0) -> None:
        self.port = _free_port()
        self.proc = subprocess.Popen(self.cmd(self.port), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}")
            try:
                if self.request("GET", "/health", None)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{self.name} not ready in {timeout} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def rss_mib(self) -> float:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def cpu_s(self) -> float:
        """utime + stime of the server process so far (all its threads), seconds."""
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def request(self, method: str, path: str, body: dict[str, object] | None) -> tuple[int, bytes]:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            c.request(method, path, None if body is None else json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def complete(self, prompt: str, tokens: int, stream: bool) -> int:
        """One greedy completion; the tokens generated."""
        body = {"prompt": prompt, "n_predict": tokens, "temperature": 0, "ignore_eos": True, "stream": stream}
        status, data = self.request("POST", "/completion", body)
        if status != 200:
            raise RuntimeError(f"{self.name}: HTTP {status}: {data[:200]!r}")
        if stream:  # one SSE event per token (the last one carries the timings, no content)
            return sum(1 for line in data.splitlines() if line.startswith(b"data: ") and json.loads(line[6:]).get("content"))
        return int(json.loads(data)["tokens_predicted"])


def throughput(server: Server, clients: int, requests: int, tokens: int, stream: bool) -> tuple[float, float]:
    """Aggregate generated tokens/s of `clients` threads sending `requests` requests each, and
    the server's CPU milliseconds per generated token over the round (its utime + stime: the
    figure that a shared, loaded machine does not blur)."""
    counts = [0] * clients
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            for r in range(requests):
                counts[i] += server.complete(PROMPTS[(i + r) % len(PROMPTS)] + f" ({i}.{r})", tokens, stream)
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    cpu0 = server.cpu_s()
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    cpu = server.cpu_s() - cpu0
    if errors:
        raise errors[0]
    return sum(counts) / wall, cpu * 1e3 / sum(counts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("--bin", default="/work/ref/build512/bin", help="folder of llama-server")
    ap.add_argument("--clients", default="1,4,8,16")
    ap.add_argument("--requests", type=int, default=2, help="requests per client and round")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--memory", action="store_true", help="resident memory after one request, -np 1 -c 2048")
    a = ap.parse_args()
    if a.model is None:
        sys.path.insert(0, str(ROOT))
        from llamacli.hub import demo_model

        demo = demo_model()
        if demo is None:
            sys.exit("no demo model here: pass -m MODEL")
        a.model = str(demo.path)
    counts = [int(c) for c in a.clients.split(",")]
    np_, ctx = (1, 2048) if a.memory else (max(counts), 256 * max(counts))
    flags = ["-m", a.model, "-np", str(np_), "-c", str(ctx), "-t", str(a.threads)]
    servers = [
        Server("llama serve", lambda p: [sys.executable, "-m", "llamacli", "serve", "--host", "127.0.0.1", "--port", str(p), *flags]),
        Server("llama-server", lambda p: [str(Path(a.bin) / "llama-server"), "--host", "127.0.0.1", "--port", str(p), *flags]),
    ]
    results: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    for s in servers:
        s.start()
        try:
            if a.memory:  # each read 1 s after the last answer: what the idle server holds
                time.sleep(SETTLE_S)
                loaded = s.rss_mib()
                s.complete(PROMPTS[0], a.tokens, a.stream)
                time.sleep(SETTLE_S)
                results[s.name] = [loaded, s.rss_mib()]
                continue
            s.complete(PROMPTS[0], 4, False)  # warm-up
            rounds = [throughput(s, n, a.requests, a.tokens, a.stream) for n in counts]
            results[s.name], cpu[s.name] = [r[0] for r in rounds], [r[1] for r in rounds]
        finally:
            s.stop()
    ours, ref = results["llama serve"], results["llama-server"]
    if a.memory:
        print(f"{'VmRSS, MiB (-np 1 -c 2048)':28s} {'llama serve':>12s} {'llama-server':>12s} {'ratio':>7s}")
        for i, what in enumerate(("after loading", "after one request")):
            print(f"{what:28s} {ours[i]:12.1f} {ref[i]:12.1f} {ours[i] / ref[i]:6.2f}x")
        return
    kind = "streamed" if a.stream else "non-streamed"
    print(f"{a.tokens}-token greedy /completion, {kind}, {a.requests} per client, -t {a.threads}; "
          f"aggregate tokens/s, and server CPU ms per generated token (utime + stime)")
    print(f"{'clients':>8s} {'llama serve':>12s} {'llama-server':>12s} {'ratio':>7s} {'CPU ms/tok ours':>16s} {'llama-server':>13s} {'ratio':>7s}")
    for n, o, r, co, cr in zip(counts, ours, ref, cpu["llama serve"], cpu["llama-server"]):
        print(f"{n:8d} {o:12.1f} {r:12.1f} {o / r:6.2f}x {co:16.2f} {cr:13.2f} {cr / co:6.2f}x")


if __name__ == "__main__":
    main()
