"""Figures for docs/scaleout.md: `llama serve --ray` against a plain `llama serve`, on a local
two-node Ray cluster on loopback (tests/ray_cluster.py), the demo model.

    python scripts/bench_scaleout.py [--requests 40] [--conversations 6] [--turns 4]

1. the Serve hop: latency of one small request (/completion, one token, cached prompt) through
   the Serve proxy and ingress vs straight to `llama serve` (p50, p90; same engine settings),
   and its part outside the engine (the latency less the answer's own timings);
2. tokens/s of one replica through Serve vs a plain `llama serve` with the same slots (-np 2, two
   streams at once, 64 tokens each), alternately (never at once), the median of three rounds;
3. the prompt-cache hit rate of a multi-turn workload (conversations x turns, one request at a
   time) with the cache-affinity router vs Ray Serve's default router (`--ray-router pow2`),
   two replicas: sum(cache_n) / sum(cache_n + prompt_n) over the turns after the first.

Throughput at 1 or 2 replicas on one small machine says nothing about scaling out (the
"nodes" share its cores); the hop latency and the hit rate are what this measures.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx2  # noqa: E402

from tests.http_server import LlamaServer  # noqa: E402
from tests.ray_cluster import RayServe  # noqa: E402

COMMON = ("-t", "1", "-c", "2048", "-sps", "0.5")


def hop(urls: list[str], n: int) -> list[tuple[float, float, float]]:
    """Per server: p50 and p90 latency (ms) of a one-token /completion on a cached prompt, and
    the p50 of the time spent outside the engine (the latency less the answer's prompt_ms and
    predicted_ms). The servers are asked in turn, so that the machine's other load falls on
    each alike."""
    body = {"prompt": "The capital of France is", "n_predict": 1, "temperature": 0}
    ms: list[list[float]] = [[] for _ in urls]
    outside: list[list[float]] = [[] for _ in urls]
    with httpx2.Client(timeout=60) as c:
        for url in urls:
            c.post(url + "/completion", json=body)  # the prompt is cached from here on
        for _ in range(n):
            for i, url in enumerate(urls):
                t = time.perf_counter()
                r = c.post(url + "/completion", json=body)
                wall = (time.perf_counter() - t) * 1000
                timings = r.json()["timings"]
                ms[i].append(wall)
                outside[i].append(wall - timings["prompt_ms"] - timings["predicted_ms"])
    return [(statistics.median(m), statistics.quantiles(m, n=10)[8], statistics.median(o)) for m, o in zip(ms, outside)]


def throughput(url: str, streams: int = 2, tokens: int = 64) -> float:
    """Generated tokens/s with `streams` requests at once."""
    done: list[int] = []

    def one(i: int) -> None:
        r = httpx2.post(url + "/completion", timeout=300, json={
            "prompt": f"Story {i}: once upon a time", "n_predict": tokens, "ignore_eos": True, "temperature": 0})
        done.append(r.json()["timings"]["predicted_n"])

    t = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sum(done) / (time.perf_counter() - t)


def hit_rate(url: str, conversations: int, turns: int) -> tuple[float, int]:
    """(cache hit rate of the turns after the first, conversations that changed replica)."""
    cached = prompt = 0
    where: dict[int, set[str]] = {}
    histories: list[list[dict[str, str]]] = [[] for _ in range(conversations)]
    with httpx2.Client(timeout=120) as c:
        for turn in range(turns):
            for conv, h in enumerate(histories):
                text = f"Let us talk about topic number {conv}. " * 8 if turn == 0 else f"And question {turn}?"
                h.append({"role": "user", "content": text})
                r = c.post(url + "/v1/chat/completions", json={"messages": h, "max_tokens": 4, "temperature": 0})
                answer: dict[str, Any] = r.json()
                h.append({"role": "assistant", "content": answer["choices"][0]["message"]["content"] or ""})
                where.setdefault(conv, set()).add(r.headers["x-llama-replica"])
                if turn > 0:
                    cached += answer["timings"]["cache_n"]
                    prompt += answer["timings"]["prompt_n"]
    return cached / (cached + prompt), sum(len(r) > 1 for r in where.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--conversations", type=int, default=6)
    ap.add_argument("--turns", type=int, default=4)
    a = ap.parse_args()
    print(f"CPU: {platform.processor() or platform.machine()}, {_cpu_name()}; demo model; -t 1 per engine")

    # Ray starts its workers with OMP_NUM_THREADS = their num_cpus (1 here): the plain server gets
    # the same, or its BLAS threads would compete with the engine's and the comparison be unfair
    with LlamaServer("-np", "2", *COMMON, env={"OMP_NUM_THREADS": "1"}) as plain, \
            RayServe("--replicas", "1", "-np", "2", *COMMON) as ray:
        (p50, p90, p_out), (s50, s90, s_out) = hop([plain.url, ray.url], a.requests)
        print(f"plain llama serve:   one-token request p50 {p50:.1f} ms, p90 {p90:.1f} ms; outside the engine {p_out:.1f} ms")
        print(f"through Ray Serve:   one-token request p50 {s50:.1f} ms, p90 {s90:.1f} ms; outside the engine {s_out:.1f} ms "
              f"(the hop: {s_out - p_out:+.1f} ms)")
        rounds = [(throughput(plain.url), throughput(ray.url)) for _ in range(3)]  # alternately, never at once
        tps_plain, tps_ray = (statistics.median(x) for x in zip(*rounds))
    print(f"tokens/s, one engine of 2 slots, 2 streams of 64 (median of 3 alternating rounds): plain {tps_plain:.1f}, "
          f"through Serve {tps_ray:.1f} ({tps_ray / tps_plain:.2f}x)")
    for router in ("affinity", "pow2"):
        with RayServe("--replicas", "2", "-np", str((a.conversations + 1) // 2), "--ray-router", router, *COMMON) as ray:
            rate, moved = hit_rate(ray.url, a.conversations, a.turns)
        print(f"{router:>8} router: cache hit rate {rate:.0%} over turns 2..{a.turns} of {a.conversations} conversations; "
              f"{moved} conversations changed replica")


def _cpu_name() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


if __name__ == "__main__":
    main()
