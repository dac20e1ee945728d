"""The same benchmarks run on llama.cpp through llama-cpp-python (when it is installed), so
that `llama bench` prints both side by side from one run on the same machine load."""

from __future__ import annotations

import ctypes
import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from llamacli.core.model.bench import BenchResult
from llamacli.core.model.load import rss_bytes, rss_file_bytes


def available() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


class LlamaCppBench:
    """A llama.cpp model and context driven through the low-level C API."""

    FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}  # llama_flash_attn_type

    def __init__(self, path: str, n_ctx: int, n_seq_max: int, threads: int, flash_attn: str = "auto") -> None:
        import llama_cpp as L

        self.L = L
        L.llama_backend_init()
        # keep a reference: llama.cpp calls it later, a collected callback would crash
        self._log_cb = L.llama_log_callback(lambda *a: None)
        L.llama_log_set(self._log_cb, ctypes.c_void_p(0))
        mp = L.llama_model_default_params()
        self.model = L.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = 512
        cp.n_ubatch = 512
        cp.n_seq_max = n_seq_max
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.flash_attn_type = self.FLASH_ATTN[flash_attn]
        self.ctx = L.llama_init_from_model(self.model, cp)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.batch = L.llama_batch_init(512, 0, 1)

    def close(self) -> None:
        L = self.L
        L.llama_batch_free(self.batch)
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)

    def _decode(self, tokens: np.ndarray, seqs: np.ndarray, pos: np.ndarray, logits: bool = True) -> None:
        b: Any = self.batch
        n = len(tokens)
        for i in range(n):
            b.token[i] = int(tokens[i])
            b.pos[i] = int(pos[i])
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = int(seqs[i])
            b.logits[i] = 0
        # the last token of each sequence produces logits, as ours does (none: `logits` False)
        last: dict[int, int] = {int(s): i for i, s in enumerate(seqs)} if logits else {}
        for i in last.values():
            b.logits[i] = 1
        b.n_tokens = n
        if self.L.llama_decode(self.ctx, self.batch) != 0:
            raise RuntimeError("llama_decode failed")
        self.L.llama_synchronize(self.ctx)

    def _clear(self) -> None:
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)

    def pp(self, n_prompt: int = 512, reps: int = 2) -> BenchResult:
        toks = np.random.default_rng(1).integers(0, self.n_vocab, n_prompt)
        self._clear()
        self._decode(toks, np.zeros(n_prompt, int), np.arange(n_prompt))  # warm-up, as ours
        best = float("inf")
        for _ in range(reps):
            self._clear()
            t = time.perf_counter()
            self._decode(toks, np.zeros(n_prompt, int), np.arange(n_prompt))
            best = min(best, time.perf_counter() - t)
        return BenchResult(f"pp{n_prompt}", n_prompt, best)

    def tg(self, n_gen: int = 128) -> BenchResult:
        toks = np.random.default_rng(2).integers(0, self.n_vocab, n_gen + 1)
        self._clear()
        self._decode(toks[:1], np.zeros(1, int), np.zeros(1, int))
        t = time.perf_counter()
        for i in range(1, n_gen + 1):
            self._decode(toks[i : i + 1], np.zeros(1, int), np.array([i]))
        return BenchResult(f"tg{n_gen}", n_gen, time.perf_counter() - t)

    def parallel(self, n_seq: int, n_steps: int = 32, n_prompt: int = 32) -> BenchResult:
        toks = np.random.default_rng(3).integers(0, self.n_vocab, n_prompt + n_steps)
        self._clear()
        self._decode(np.tile(toks[:n_prompt], n_seq), np.repeat(np.arange(n_seq), n_prompt), np.tile(np.arange(n_prompt), n_seq))
        t = time.perf_counter()
        for i in range(n_steps):
            p = n_prompt + i
            self._decode(np.full(n_seq, toks[p]), np.arange(n_seq), np.full(n_seq, p))
        return BenchResult(f"parallel{n_seq}", n_seq * n_steps, time.perf_counter() - t)


# ---- in a child process ------------------------------------------------------------------------
# llama-cpp-python can take the whole process down (it segfaults on CPUs whose AMX state the OS
# does not grant): the reference runs in a child, and a crash costs only its column.


@dataclass
class ReferenceRun:
    """The reference's results (one per test, in order), or None and why they are missing."""

    results: list[BenchResult] | None
    missing_reason: str = ""
    rss_bytes: int = 0  # the child's resident memory after loading the model (0: not known)
    rss_file_bytes: int = 0  # the file-backed part of it


def run_in_child(
    path: str, n_prompt: int, n_gen: int, seqs: list[int], reps: int, threads: int, flash_attn: str,
    timeout_s: float = 1800.0,
) -> ReferenceRun:
    """Run `LlamaCppBench` in `python -m llamacli.bench_reference`; never raises for its failures."""
    args = {"path": path, "n_prompt": n_prompt, "n_gen": n_gen, "seqs": seqs, "reps": reps, "threads": threads,
            "flash_attn": flash_attn}
    try:
        p = subprocess.run([sys.executable, "-m", "llamacli.bench_reference", json.dumps(args)],
                           capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return ReferenceRun(None, f"the llama.cpp reference did not finish in {timeout_s:.0f} s")
    if p.returncode != 0:
        if p.returncode < 0:
            try:
                why = f"it was killed by {signal.Signals(-p.returncode).name}"
            except ValueError:
                why = f"it was killed by signal {-p.returncode}"
        else:
            lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
            why = f"it exited with status {p.returncode}" + (f": {lines[-1]}" if lines else "")
        return ReferenceRun(None, f"the llama.cpp reference (llama-cpp-python) crashed: {why}")
    try:
        out = json.loads(p.stdout.strip().splitlines()[-1])
        rows = out["results"]
        return ReferenceRun([BenchResult(r["test"], int(r["n_tokens"]), float(r["seconds"])) for r in rows],
                            rss_bytes=int(out.get("rss", 0)), rss_file_bytes=int(out.get("rss_file", 0)))
    except (ValueError, IndexError, KeyError, TypeError, AttributeError):
        return ReferenceRun(None, "the llama.cpp reference printed no results")


def _child(args: dict[str, Any]) -> None:
    seqs = list(args["seqs"])
    lc = LlamaCppBench(args["path"], n_ctx=max(seqs + [1]) * max(args["n_prompt"], 64) + 256,
                       n_seq_max=max(seqs + [1]), threads=args["threads"], flash_attn=args["flash_attn"])
    rss, rss_file = rss_bytes(), rss_file_bytes()  # after loading, as ours is measured
    try:
        res = [lc.pp(args["n_prompt"], args["reps"]), lc.tg(args["n_gen"])] + [lc.parallel(n) for n in seqs]
    finally:
        lc.close()
    rows = [{"test": r.test, "n_tokens": r.n_tokens, "seconds": r.seconds} for r in res]
    print(json.dumps({"results": rows, "rss": rss, "rss_file": rss_file}), flush=True)


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
