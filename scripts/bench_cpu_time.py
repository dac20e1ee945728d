"""Decode and prompt speed as CPU time, ours beside llama.cpp's: figures that hold on a busy machine.

    python scripts/bench_cpu_time.py [-m MODEL] [-n 64] [-p 512] [--reps 3] [--parallel 16] [--physical]

`llama bench` times wall clocks, which on a machine shared with other work measure how each
engine copes with losing its cores as much as its speed (llama.cpp's threads spin at their
barriers; ours run small matmuls on one thread when the machine is busy). Here both run on one
thread, one after the other, and each reports the CPU time it spent: tg = a one-token decode
step (its logits included) after a 100-token prompt, tg-nologits = the same step without the
vocabulary projection (llama.cpp skips it when no logits are asked for; ours runs
`forward_hidden`), pp = a P-token prompt into an empty cache, and with `--parallel N`:
parallelN = `llama bench`'s aggregate decode step (N sequences with a 32-token prompt each,
then 32 steps in which every sequence adds one token; every sequence's logits), per token.
Best of `--reps`. llama.cpp runs
in a child process (llama-cpp-python, `PYTHONPATH` chooses its build); the CPU our kernels use
is the one numba targets (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES choose another code path).

`--split` adds how a P-token prompt of ours splits across two threads: the CPU time of all
threads and of the calling thread on two (its share bounds the wall clock from below), beside
one thread's, with the busy-machine fallbacks (threads.py) off, as on a quiet machine.

`--physical` adds the physical view of decoding, on the same terms (one thread, CPU time): the
read bandwidth of one thread (a STREAM-like loop summing 1 GiB), the bytes a decode step reads
(every weight once, but one row of the token embedding when the output matrix is its own), and
for each engine those bytes per CPU second of its tg step: the share of the bandwidth it uses.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

PROMPT = 100  # cached tokens before the decode steps


def _cpu_ms(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    t = time.process_time()
    for i in range(n):
        fn(i)
    return (time.process_time() - t) / n * 1e3


PAR_PROMPT, PAR_STEPS = 32, 32  # llama bench's parallel test (core/model/bench.py)


def _par_batches(n_vocab: int, n_seq: int) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """The parallel test's tokens: its prompt (PAR_PROMPT tokens, every sequence the same),
    then per step (tokens, sequences, positions) of n_seq rows."""
    toks = np.random.default_rng(3).integers(0, n_vocab, PAR_PROMPT + PAR_STEPS)
    steps = [(np.full(n_seq, toks[PAR_PROMPT + i]), np.arange(n_seq), np.full(n_seq, PAR_PROMPT + i))
             for i in range(PAR_STEPS)]
    return toks[:PAR_PROMPT], steps


def ours(path: str, n: int, p: int, reps: int, n_par: int = 0) -> dict[str, float]:
    from llamacli.core.model.kernels.qmm import threads
    from llamacli.core.model.load import load_model
    from llamacli.core.model.state.batch import Batch

    # One thread: load_model sets the kernels' thread count itself (every core by default).
    model, _, _ = load_model(path, threads=1)
    assert threads.policy()[1] == 1
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, model.args.n_vocab, max(p, PROMPT + n + 1))
    cache = model.new_cache(1, len(prompt))

    def step(f):  # type: ignore[no-untyped-def]
        def run(i: int) -> None:
            f(Batch(prompt[PROMPT + i : PROMPT + i + 1], [0], [PROMPT + i]), cache)
        return run

    out: dict[str, list[float]] = {"tg": [], "tg-nologits": [], "pp": []}
    for _ in range(reps):
        cache.clear()
        model.forward(Batch.single(prompt[:PROMPT]), cache)
        out["tg"].append(_cpu_ms(step(model.forward), n))
        cache.clear()  # a recurrent state cannot be cut back: the prompt again
        model.forward(Batch.single(prompt[:PROMPT]), cache)
        out["tg-nologits"].append(_cpu_ms(step(model.forward_hidden), n))
        cache.clear()
        out["pp"].append(_cpu_ms(lambda i: model.forward(Batch.single(prompt[:p]), cache), 1) / p)
    if n_par:
        head, steps = _par_batches(model.args.n_vocab, n_par)
        pcache = model.new_cache(n_par, PAR_PROMPT + PAR_STEPS)
        ones = np.ones(n_par, bool)
        for name, f in ((f"parallel{n_par}", model.forward), (f"parallel{n_par}-nologits", model.forward_hidden)):
            out[name] = []
            for _ in range(reps):
                pcache.clear()
                model.forward(Batch(np.tile(head, n_par), np.repeat(np.arange(n_par), PAR_PROMPT),
                                    np.tile(np.arange(PAR_PROMPT), n_par)), pcache)
                out[name].append(_cpu_ms(lambda i: f(Batch(*steps[i], decode=ones), pcache), PAR_STEPS) / n_par)
    return {k: min(v) for k, v in out.items()}


def split(path: str, p: int, reps: int) -> list[tuple[int, float, float]]:
    """(threads, CPU ms of all threads, CPU ms of the calling thread) of a P-token prompt of
    ours on one thread and on two (best of `reps`)."""
    from llamacli.core.model.kernels.qmm import threads
    from llamacli.core.model.load import load_model
    from llamacli.core.model.state.batch import Batch

    threads._Contention.BUSY_CORES = float("inf")  # never busy: as on a quiet machine
    threads._contention.busy = False
    rows = []
    for n_threads in (1, 2):
        model, _, _ = load_model(path, threads=n_threads)
        prompt = np.random.default_rng(1).integers(0, model.args.n_vocab, p)
        cache = model.new_cache(1, p)
        model.forward(Batch.single(prompt), cache)  # warm-up
        best = (float("inf"), 0.0)
        for _ in range(reps):
            cache.clear()
            c, t = time.process_time(), time.thread_time()
            model.forward(Batch.single(prompt), cache)
            best = min(best, (time.process_time() - c, time.thread_time() - t))
        rows.append((n_threads, best[0] * 1e3, best[1] * 1e3))
    return rows


def reference(path: str, n: int, p: int, reps: int, n_par: int = 0) -> dict[str, float]:
    from llamacli.bench_reference import LlamaCppBench

    # as bench_reference's child: one context of n_seq_max sequences serves every measure
    lc = LlamaCppBench(path, n_ctx=max(p, PROMPT + n + 1, max(n_par, 1) * 64) + 256, n_seq_max=max(n_par, 1),
                       threads=1)
    b, L = lc.batch, lc.L
    prompt = np.random.default_rng(1).integers(0, lc.n_vocab, max(p, PROMPT + n + 1))

    def one(logits: bool):  # type: ignore[no-untyped-def]
        def run(i: int) -> None:
            b.token[0], b.pos[0], b.n_seq_id[0], b.seq_id[0][0] = int(prompt[PROMPT + i]), PROMPT + i, 1, 0
            b.logits[0] = int(logits)
            b.n_tokens = 1
            if L.llama_decode(lc.ctx, b) != 0:
                raise RuntimeError("llama_decode failed")
            L.llama_synchronize(lc.ctx)
        return run

    def prefill(k: int) -> None:
        lc._clear()
        lc._decode(prompt[:k], np.zeros(k, int), np.arange(k))

    out: dict[str, list[float]] = {"tg": [], "tg-nologits": [], "pp": []}
    try:
        for _ in range(reps):
            prefill(PROMPT)
            out["tg"].append(_cpu_ms(one(True), n))
            prefill(PROMPT)
            out["tg-nologits"].append(_cpu_ms(one(False), n))
            out["pp"].append(_cpu_ms(lambda i: prefill(p), 1) / p)
        if n_par:
            head, steps = _par_batches(lc.n_vocab, n_par)
            for name, logits in ((f"parallel{n_par}", True), (f"parallel{n_par}-nologits", False)):
                out[name] = []
                for _ in range(reps):
                    lc._clear()
                    lc._decode(np.tile(head, n_par), np.repeat(np.arange(n_par), PAR_PROMPT),
                               np.tile(np.arange(PAR_PROMPT), n_par))
                    out[name].append(_cpu_ms(lambda i: lc._decode(*steps[i], logits=logits), PAR_STEPS) / n_par)
    finally:
        lc.close()
    return {k: min(v) for k, v in out.items()}


def read_bandwidth(reps: int = 3) -> float:
    """GB per CPU second of a STREAM-like read on one thread: 1 GiB of float32 summed (the sum
    vectorised: fastmath), best of `reps`."""
    import numba

    @numba.njit(fastmath=True, cache=False)
    def total(a: np.ndarray) -> float:  # type: ignore[misc]
        s = np.float32(0)
        for k in range(a.size):
            s += a[k]
        return float(s)

    a = np.ones(1 << 28, np.float32)
    total(a[:1024])  # compile
    return a.nbytes / min(_cpu_ms(lambda i: total(a), 1) for _ in range(reps)) / 1e6


def bytes_per_token(path: str) -> int:
    """What one decode step reads: every tensor once, except the token embedding, of which it
    reads one row (unless the output matrix is the embedding itself)."""
    from llamacli.core.model.weights.gguf_file import GGUFFile

    f = GGUFFile(path)
    own_output = "output.weight" in f.tensors
    return sum(t.nbytes // t.shape[0] if name == "token_embd.weight" and own_output else t.nbytes
               for name, t in f.tensors.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("-n", type=int, default=64, help="decode steps per measure")
    ap.add_argument("-p", type=int, default=512, help="prompt tokens of the pp measure")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=0, metavar="N",
                    help="also the aggregate decode step of N sequences (llama bench's parallelN), per token")
    ap.add_argument("--physical", action="store_true", help="also the bytes read per step against the bandwidth")
    ap.add_argument("--split", action="store_true", help="also our prompt's CPU time on two threads against one")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.model is None:
        from llamacli.hub import demo_model

        demo = demo_model()
        if demo is None:
            sys.exit("no demo model here: pass -m MODEL")
        a.model = str(demo.path)
    if a.child:
        print(json.dumps(reference(a.model, a.n, a.p, a.reps, a.parallel)))
        return
    mine = ours(a.model, a.n, a.p, a.reps, a.parallel)
    cmd = [sys.executable, __file__, "--child", "-m", a.model, "-n", str(a.n), "-p", str(a.p), "--reps", str(a.reps),
           "--parallel", str(a.parallel)]
    run = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), check=False)
    ref = json.loads(run.stdout.strip().splitlines()[-1]) if run.returncode == 0 and run.stdout.strip() else None
    print(f"{'ms CPU per token, 1 thread':28s} {'llamacli':>9s} {'llama.cpp':>9s} {'speed ratio':>11s}")
    for k in mine:
        r = ref[k] if ref else float("nan")
        print(f"{k:28s} {mine[k]:9.2f} {r:9.2f} {r / mine[k]:10.2f}x")
    if ref is None:
        print(f"(no llama.cpp column: {run.stderr.strip().splitlines()[-1] if run.stderr.strip() else 'llama-cpp-python missing'})")
    if a.split:
        print(f"pp{a.p} of ours, ms CPU: {'threads':>7s} {'all':>7s} {'calling thread':>14s}")
        for n_threads, cpu, own in split(a.model, a.p, a.reps):
            print(f"{'':25s} {n_threads:7d} {cpu:7.0f} {own:14.0f}")
    if a.physical:
        per_token, bandwidth = bytes_per_token(a.model), read_bandwidth()
        print(f"physical view: one thread reads {bandwidth:.1f} GB per CPU second; a decode step reads "
              f"{per_token / 1e9:.3f} GB")
        for name, r in (("llamacli", mine), ("llama.cpp", ref)):
            if r is not None:
                rate = per_token / r["tg"] / 1e6
                print(f"  {name:10s} tg reads {rate:5.1f} GB per CPU second: {rate / bandwidth:4.0%} of the bandwidth")


if __name__ == "__main__":
    main()
