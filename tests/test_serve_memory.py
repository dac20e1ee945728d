"""Resident memory of a real `llama serve` with the demo model: what it holds is what serving
needs (docs/benchmarks.md, "Memory"); structures only some requests use are built by the
first of them."""

from __future__ import annotations

from tests.http_server import LlamaServer
from tests.pages import rss_kb

PROMPT = {"prompt": "The capital of France is", "n_predict": 4, "temperature": 0.0, "cache_prompt": False}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def test_grammar_tokenizer_is_built_by_the_first_constrained_request(demo_model: str) -> None:
    # llguidance's tokenizer for a 262k vocabulary (token trie and mask slices) is ~100 MiB:
    # a server that is never asked for a grammar does not hold it
    with LlamaServer("-m", demo_model, "-c", "256", "-np", "1") as srv:
        assert srv.proc is not None
        status, body = srv.post("/completion", PROMPT)
        assert status == 200, body
        plain_kb = rss_kb(srv.proc.pid)
        status, body = srv.post("/completion", {**PROMPT, "n_predict": 16, "json_schema": SCHEMA})
        assert status == 200, body
        assert body["content"].startswith("{"), body
        assert rss_kb(srv.proc.pid) - plain_kb > 40 * 1024, (plain_kb, rss_kb(srv.proc.pid))


def test_freed_heap_pages_are_given_back() -> None:
    """http/heap.py (called after a model loads and after it is released on idle): the pages of
    freed blocks that glibc would keep (blocks still in use around them) leave the process."""
    import ctypes.util
    import os
    import threading

    from llamacli.http.heap import return_freed_memory

    if not ctypes.util.find_library("c") or not hasattr(ctypes.CDLL(ctypes.util.find_library("c")), "malloc_trim"):
        return  # not glibc: nothing to check
    kept: list[bytearray] = []

    def fragment() -> None:  # in a thread's arena, as the model's loading thread allocates
        blocks = [bytearray(64 * 1024) for _ in range(1600)]  # 100 MiB, touched
        kept.extend(blocks[::16])  # every 16th stays: the freed ones cannot shrink the heap
        blocks.clear()

    t = threading.Thread(target=fragment)
    t.start()
    t.join()
    before = rss_kb(os.getpid())
    return_freed_memory()
    assert before - rss_kb(os.getpid()) > 50 * 1024, (before, rss_kb(os.getpid()))
    assert len(kept) == 100


def test_kv_cache_pages_come_as_cells_are_written() -> None:
    """A large context costs memory only as it fills: writing three cells of a 16 MiB layer
    array maps a page or two of 4 KiB, not a 2 MiB huge page (np.zeros advises them from 4 MiB,
    and a cell past the array's first 2 MiB boundary would fault one in)."""
    import numpy as np
    import pytest

    from llamacli.core.model.state.kv_cache import KVCache
    from tests.pages import HAVE_PAGEMAP, mapped_pages

    if not HAVE_PAGEMAP:
        pytest.skip("no /proc/self/pagemap")
    cache = KVCache(2, 1, 16384, 1, 256, 256)
    rows = np.ones((3, 1, 256), np.float32)
    cache.write(0, np.zeros(3, np.int64), np.arange(2998, 3001), rows, 2 * rows)
    for a in (cache.k[0], cache.v[0]):
        assert mapped_pages(a.ctypes.data, a.nbytes) <= 2, mapped_pages(a.ctypes.data, a.nbytes)
    assert float(cache.v[0][0, 0, 3000, 5]) == 2.0 and float(cache.k[1].sum()) == 0.0


def test_serving_a_local_file_loads_no_http_client() -> None:
    """httpx2 (~4 MiB of modules) is for -hf downloads: `llama serve -m FILE` never imports it."""
    import subprocess
    import sys
    from pathlib import Path

    code = "import sys, llamacli.commands.serve, llamacli.http.app; print('httpx2' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0 and r.stdout.split() == ["False"], r.stderr
