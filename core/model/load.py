"""Loading a model: GGUF file -> architecture module -> weights in memory."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from llamacli.core.errors import UnsupportedArchitecture
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.model.weights.pack_cache import Attached
from llamacli.core.model.families import ARCHITECTURES
from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.precision import make_precision
from llamacli.core.model.weights.tensors import WeightLoader


@dataclass
class LoadStats:
    seconds: float
    weight_bytes: int  # float32 copies of weights held in memory (0 for GGUF-byte weights)
    rss_bytes: int  # resident set size of the process after loading
    rss_file_bytes: int = 0  # the part of it that is file-backed pages (the mapped GGUF's, libraries')
    packed_bytes: int = 0  # GGUF-byte weights packed for the kernels (their file pages handed back)
    pack_cache: Attached = field(default_factory=Attached)  # packed weights mapped from the cache file


def rss_bytes() -> int:
    """Resident memory of this process (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def rss_file_bytes() -> int:
    """The file-backed part of this process's resident memory (`RssFile` in /proc/self/status;
    0 where unavailable): pages the kernel can drop and read again, shared with the page cache."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssFile:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def load_model(
    path: str | os.PathLike[str], numerics: str = "ggml", threads: int = -1, batch_invariant: bool = False
) -> tuple[DecoderModel, GGUFFile, LoadStats]:
    """Open, validate and load a model; raises ModelLoadError subclasses on bad files.

    threads: the kernels' threads (<= 0: every core). batch_invariant: every sequence's results
    independent of what else is in the batch (f32 numerics; the ggml numerics always are)."""
    t0 = time.perf_counter()
    if threads is None or threads <= 0:
        threads = os.cpu_count() or 1
    precision = make_precision(numerics, threads, batch_invariant)
    g = GGUFFile(path)
    arch = g.architecture
    cls = ARCHITECTURES.get(arch)
    if cls is None:
        raise UnsupportedArchitecture(
            g.path, f"unknown architecture {arch!r} (supported: {', '.join(sorted(ARCHITECTURES))})"
        )
    args = cls.read_args(g)
    args.check(g.path)
    # a model with experts reads a small part of its file per step: its packed copies are
    # file-backed (tensors.py)
    loader = WeightLoader(g, threads=threads, quantized=precision.quantized_weights,
                          pack="memory" if args.moe is None else "file")
    try:
        model = cls(args, g, precision, loader)
    finally:
        loader.finish()
    model._fuse_layers()
    stats = LoadStats(time.perf_counter() - t0, loader.nbytes, rss_bytes(), rss_file_bytes(), loader.packed_bytes,
                      loader.cached)
    return model, g, stats
