"""The same benchmarks run on llama.cpp through llama-cpp-python (when it is installed), so
that `llama bench` prints both side by side from one run on the same machine load."""

from __future__ import annotations

import ctypes
import time
from typing import Any

import numpy as np

from llamacli.core.bench import BenchResult


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

    def _decode(self, tokens: np.ndarray, seqs: np.ndarray, pos: np.ndarray) -> None:
        b: Any = self.batch
        n = len(tokens)
        for i in range(n):
            b.token[i] = int(tokens[i])
            b.pos[i] = int(pos[i])
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = int(seqs[i])
            b.logits[i] = 0
        # the last token of each sequence produces logits, as ours does
        last: dict[int, int] = {int(s): i for i, s in enumerate(seqs)}
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
