"""The kernels' threads: numba's parallel loops, sized by `-t/--threads`.

numba's OpenMP layer (libgomp) spins idle threads for a while before they sleep; with another
process busy on a core, spinning threads steal its time and the whole step waits for the
slowest thread. We keep the spin short (GOMP_SPINCOUNT, read once when libgomp loads) unless
the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT. No BLAS threads run on the quantized path.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "20000")

import numba  # noqa: E402

_lock = threading.Lock()
_wanted = 0
_local = threading.local()
_pool: ThreadPoolExecutor | None = None
T = TypeVar("T")


def max_threads() -> int:
    return int(getattr(numba.config, "NUMBA_NUM_THREADS"))  # set at import from the environment: no static attribute


def set_threads(n: int | None) -> int:
    """The kernels' thread count from now on (None or <= 0: every core). Returns it."""
    global _wanted
    with _lock:
        _wanted = max_threads() if not n or n <= 0 else max(1, min(int(n), max_threads()))
        return _wanted


# Below this many multiply-adds a matmul runs on the calling thread alone: waking the pool
# costs more than it saves.
SERIAL_MACS = 1 << 17
# The same while other processes keep the cores busy. Each parallel region waits for its
# slowest thread, and with another process busy on a core that thread is often descheduled for
# a whole time slice: measured on the demo model (AMD EPYC, 2 cores) decoding at 512 tokens of
# context beside one busy process, 2 threads took 95-102 ms per token with the threshold at
# 2^17, 48 ms at 2M, 23 ms at 8M (one thread: 24 ms); on a quiet machine 2^17 is faster (tg64
# 87 vs 69 tokens/s). At 8M a decode step's layer matmuls (a few hundred microseconds each with
# the 16-row kernels) run on the calling thread; the vocabulary projection, prompts and batches
# of many sequences still use the pool.
SERIAL_MACS_BUSY = 1 << 23


class _Contention:
    """Whether other processes keep the CPUs busy: the machine's busy CPU time (/proc/stat)
    minus this process's own (os.times), over the last ~half second, above half a core.
    Read at most every CHECK seconds; without /proc/stat, never busy."""

    CHECK = 0.5
    BUSY_CORES = 0.5

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = self._sample()
        self.busy = False

    @staticmethod
    def _sample() -> tuple[float, float, float] | None:
        try:
            with open("/proc/stat", "rb") as f:
                cpu = f.readline().split()
        except OSError:
            return None
        # user nice system idle iowait irq softirq steal: busy = all but idle and iowait
        ticks = [int(v) for v in cpu[1:9]]
        busy = (sum(ticks) - ticks[3] - ticks[4]) / _HZ
        t = os.times()
        return time.monotonic(), busy, t.user + t.system

    def update(self) -> bool:
        now = time.monotonic()
        last = self._last
        if last is None or now - last[0] < self.CHECK or not self._lock.acquire(blocking=False):
            return self.busy
        try:
            cur = self._sample()
            if cur is not None:
                others = (cur[1] - last[1]) - (cur[2] - last[2])
                self.busy = others / (cur[0] - last[0]) > self.BUSY_CORES
                self._last = cur
        finally:
            self._lock.release()
        return self.busy


_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_contention = _Contention()


def policy() -> tuple[int, int]:
    """(serial, n): a kernel of at least `serial` multiply-adds runs on n threads, a smaller
    one on the calling thread alone (the thresholds above, as the machine is busy or not)."""
    start()
    serial = SERIAL_MACS_BUSY if _contention.update() else SERIAL_MACS
    return serial, _wanted or max_threads()


_started = False


def start() -> None:
    """Start numba's threading layer (if not yet): compiled code that sets its thread count
    calls the layer's set_num_threads by its symbol (core/model/kernels/qmm/layer.py)."""
    global _started
    if not _started:
        numba.get_num_threads()
        _started = True


def configure(macs: int = SERIAL_MACS) -> None:
    """Apply the thread count for a kernel of `macs` multiply-adds in the calling thread
    (numba's setting is per thread). The results do not depend on it."""
    serial, n = policy()
    want = n if macs >= serial else 1
    if getattr(_local, "n", None) != want:
        numba.set_num_threads(want)
        _local.n = want


def forget() -> None:
    """After compiled code set the calling thread's count itself (`policy`): `configure` sets
    it again next time."""
    _local.n = None


# Below this many elements a row-wise step (a norm, a table lookup, quantizing activations)
# runs on the calling thread alone: handing work to the pool costs ~20-50 us.
SPLIT_MIN_ELEMENTS = 1 << 16


def _executor() -> ThreadPoolExecutor | None:
    """The Python threads that run independent compiled calls beside the calling thread (the
    calls release the GIL): one fewer than the kernel threads, re-made when that count
    changes; None for one thread."""
    global _pool
    n = (_wanted or max_threads()) - 1
    with _lock:
        if n < 1:
            return None
        if _pool is None or _pool._max_workers != n:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(n, thread_name_prefix="llama-kern")
        return _pool


_END = object()


def run_each(fn: Callable[[T], None], items: Sequence[T]) -> None:
    """fn(item) for each item (independent pieces of work: attention groups, row ranges), side
    by side: the calling thread and the pool's threads take the next item in turn until none
    is left; in order on the calling thread when there is one thread or one item."""
    pool = _executor() if len(items) > 1 else None
    if pool is None:
        for it in items:
            fn(it)
        return
    queue = iter(items)
    taking = threading.Lock()

    def drain() -> None:
        while True:
            with taking:
                item = next(queue, _END)
            if item is _END:
                return
            fn(item)  # type: ignore[arg-type]

    helpers = [pool.submit(drain) for _ in range(min(pool._max_workers, len(items) - 1))]
    try:
        drain()
    finally:
        for f in helpers:
            f.result()


def split_rows(fn: Callable[[int, int], None], n_rows: int, n_cols: int) -> None:
    """fn(a, b) over row ranges that cover [0, n_rows), one per thread, when the step is large
    enough to gain from it and the machine is not busy (as `configure`); fn(0, n_rows) otherwise.
    For row-wise steps only: each row's result is the same whichever range computed it."""
    n = _wanted or max_threads()
    if n <= 1 or n_rows < 2 or n_rows * n_cols < SPLIT_MIN_ELEMENTS or _contention.update():
        fn(0, n_rows)
        return
    n = min(n, n_rows)
    edges = [n_rows * i // n for i in range(n + 1)]
    run_each(lambda i: fn(edges[i], edges[i + 1]), list(range(n)))
