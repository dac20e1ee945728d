"""What HTTP costs: N concurrent streaming clients of `llama serve` against the same N tasks
submitted in-process to an Engine with the same settings (greedy, ignore_eos, no prompt cache).
Reports aggregate generated tokens/s of each and time to first token.

    python -m tests.test_http_bench --clients 8 --tokens 16 --rounds 6

As a test it runs only with LLAMA_HTTP_BENCH=1 (it takes minutes on a small CPU).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.http_server import LlamaServer

PROMPTS = [
    "Once upon a time, in a small village by the sea,",
    "The history of the printing press begins",
    "Here is a recipe for a simple tomato soup:",
    "The three laws of motion state that",
    "In the year 2100, cities will",
    "A good night's sleep matters because",
    "The old lighthouse keeper opened the door and",
    "To learn a new language quickly, you should",
]


@dataclass
class Run:
    tokens: int
    wall_s: float
    ttft_s: list[float]

    @property
    def tps(self) -> float:
        return self.tokens / self.wall_s


def _params(n_tokens: int) -> dict[str, Any]:
    return {"n_predict": n_tokens, "temperature": 0.0, "ignore_eos": True, "cache_prompt": False}


def run_inprocess(engine: Any, tokenizer: Any, n: int, n_tokens: int) -> Run:
    from llamacli.core.sampling import SamplingParams
    from llamacli.core.runtime.tasks import Partial, Task, TaskParams

    prompts = [tokenizer.tokenize(PROMPTS[i % len(PROMPTS)], True, True) for i in range(n)]
    ttft: list[float] = [0.0] * n
    counts = [0] * n
    t0 = time.perf_counter()
    tasks = [
        engine.submit(Task(p, TaskParams(n_predict=n_tokens, sampling=SamplingParams(temperature=0.0),
                                         ignore_eos=True, cache_prompt=False)))
        for p in prompts
    ]

    def read(i: int) -> None:
        for r in tasks[i].results:
            if isinstance(r, Partial) and r.tokens:
                if not counts[i]:
                    ttft[i] = time.perf_counter() - t0
                counts[i] += len(r.tokens)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return Run(sum(counts), time.perf_counter() - t0, ttft)


def run_http(url: str, n: int, n_tokens: int) -> Run:
    u = urlparse(url)
    ttft: list[float] = [0.0] * n
    counts = [0] * n
    barrier = threading.Barrier(n + 1)
    t0 = 0.0

    def client(i: int) -> None:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
        body = json.dumps({"prompt": PROMPTS[i % len(PROMPTS)], "stream": True, **_params(n_tokens)})
        barrier.wait()
        conn.request("POST", "/completion", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        buf = b""
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                msg, buf = buf.split(b"\n\n", 1)
                if msg.startswith(b"data: "):
                    d = json.loads(msg[6:])
                    if d.get("tokens") and not d.get("stop"):
                        if not counts[i]:
                            ttft[i] = time.perf_counter() - t0
                        counts[i] += len(d["tokens"])
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    barrier.wait()
    for t in threads:
        t.join()
    return Run(sum(counts), time.perf_counter() - t0, ttft)


def bench(model: str | None, n: int, n_tokens: int, rounds: int, n_ctx_slot: int = 256) -> dict[str, Any]:
    from llamacli.core.runtime.engine import Engine, EngineConfig
    from llamacli.loading import open_model

    rt = open_model(model)
    engine = Engine(rt.model, rt.tokenizer, EngineConfig(n_ctx=n * n_ctx_slot, n_parallel=n, n_batch=512)).start()
    args = ["-c", str(n * n_ctx_slot), "-np", str(n), "-ub", "512", "--no-cache-prompt"]
    if model:
        args += ["-m", model]
    inproc: list[Run] = []
    over_http: list[Run] = []
    try:
        run_inprocess(engine, rt.tokenizer, n, 2)  # warm up both sides the same way
        with LlamaServer(*args, timeout=300) as srv:
            run_http(srv.url, n, 2)
            for k in range(rounds):  # interleaved (order alternating): outside load hits both alike
                if k % 2:
                    over_http.append(run_http(srv.url, n, n_tokens))
                    inproc.append(run_inprocess(engine, rt.tokenizer, n, n_tokens))
                else:
                    inproc.append(run_inprocess(engine, rt.tokenizer, n, n_tokens))
                    over_http.append(run_http(srv.url, n, n_tokens))
    finally:
        engine.stop()

    def summary(runs: list[Run]) -> dict[str, Any]:
        return {
            "tokens_per_s_median": statistics.median(r.tps for r in runs),
            "tokens_per_s_best": max(r.tps for r in runs),
            "ttft_median_s": statistics.median(statistics.median(r.ttft_s) for r in runs),
            "ttft_best_s": min(statistics.median(r.ttft_s) for r in runs),
            "per_round_tokens_per_s": [round(r.tps, 1) for r in runs],
        }

    a, b = summary(inproc), summary(over_http)
    return {
        "clients": n, "tokens_each": n_tokens, "rounds": rounds, "in_process": a, "http": b,
        "ratio_of_best": b["tokens_per_s_best"] / a["tokens_per_s_best"],
        "ratio_median_of_rounds": statistics.median(h.tps / i.tps for h, i in zip(over_http, inproc)),
    }


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("LLAMA_HTTP_BENCH") != "1", reason="benchmark: set LLAMA_HTTP_BENCH=1")
def test_http_costs_little(demo_model: str) -> None:
    res = bench(demo_model, 8, 16, 4)
    print(json.dumps(res, indent=2))
    assert res["ratio_of_best"] > 0.8


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    print(json.dumps(bench(a.model, a.clients, a.tokens, a.rounds), indent=2))
