"""Weights read from a GGUF file and dequantized to float32 for BLAS matmuls.

Matmul weights are held as (in, out) C-contiguous so that `x @ w` streams them row by row
(measured faster than `x @ w.T` on the (out, in) layout ggml stores). The token embedding
stays (n_vocab, n_embd): rows are gathered for the input and, when the output projection is
tied to it, `x @ E.T` reads the same memory for the logits.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType

from llamacli.core.errors import ModelLoadError, UnsupportedTensorType
from llamacli.core.gguf_file import GGUFFile
from llamacli.core.quants import dequantize


@dataclass
class Linear:
    """y = x @ w + b. w: (in, out) float32; qtype: the type it was stored in (its rounding
    of activations is emulated by the ggml numerics)."""

    w: np.ndarray
    qtype: GGMLQuantizationType
    b: np.ndarray | None = None

    @property
    def n_in(self) -> int:
        return int(self.w.shape[0])

    @property
    def n_out(self) -> int:
        return int(self.w.shape[1])


def fuse(parts: list[Linear]) -> "FusedLinear | None":
    """One (in, sum of outs) matrix for linears that read the same input and whose weight
    types round that input the same way (the same ggml vec_dot_type): one activation rounding
    and one matmul instead of several. The parts' weights become views into it (no copy
    stays). None when they cannot be fused."""
    if len(parts) < 2 or len({p.n_in for p in parts}) != 1:
        return None
    f = FusedLinear(
        w=np.concatenate([p.w for p in parts], axis=1),
        qtype=parts[0].qtype,
        splits=[p.n_out for p in parts],
        biases=[p.b for p in parts],
    )
    a = 0
    for p in parts:
        p.w = f.w[:, a : a + p.n_out]
        a += p.n_out
    return f


@dataclass
class FusedLinear:
    """Several Linear layers side by side: w (in, out_1 + out_2 + ...)."""

    w: np.ndarray
    qtype: GGMLQuantizationType
    splits: list[int]
    biases: list[np.ndarray | None]


@dataclass
class OutputWeight:
    """The vocabulary projection, kept (n_vocab, n_embd) row-major: logits = x @ w.T."""

    w: np.ndarray
    qtype: GGMLQuantizationType


class WeightLoader:
    """Dequantizes tensors of one file, in a small thread pool (NumPy releases the GIL).

    Methods return placeholders resolved by `finish()`, so that all tensors load in parallel.
    """

    def __init__(self, gguf: GGUFFile, threads: int = 2) -> None:
        self.gguf = gguf
        self.pool = ThreadPoolExecutor(max_workers=max(1, threads))
        self.futures: list[Future[None]] = []
        self.loaded_names: set[str] = set()
        self.nbytes = 0

    def _deq(self, name: str) -> np.ndarray:
        t = self.gguf.tensor(name)
        self.loaded_names.add(name)
        try:
            return dequantize(self.gguf.raw(name), t.qtype, t.shape)
        except UnsupportedTensorType as e:
            raise UnsupportedTensorType(self.gguf.path, f"tensor {name!r}: {e.problem}") from None

    def _check_shape(self, name: str, want: tuple[int, ...]) -> None:
        t = self.gguf.tensor(name)
        if t.shape != want:
            raise ModelLoadError(
                self.gguf.path, f"tensor {name!r} has shape {t.shape}, expected {want} from the hyperparameters"
            )

    def vector(self, name: str, n: int | None = None) -> np.ndarray:
        if n is not None:
            self._check_shape(name, (n,))
        v = self._deq(name).reshape(-1)
        self.nbytes += v.nbytes
        return v

    def has(self, name: str) -> bool:
        return name in self.gguf.tensors

    def embedding(self, name: str) -> np.ndarray:
        e = self._deq(name)
        if e.ndim != 2:
            raise ModelLoadError(self.gguf.path, f"tensor {name!r} must be 2-D, has shape {e.shape}")
        self.nbytes += e.nbytes
        return e

    def linear(self, prefix: str, n_in: int, n_out: int) -> Linear:
        """Weight `prefix.weight` (GGUF shape (n_out, n_in)) and optional `prefix.bias`."""
        wname = prefix + ".weight"
        self._check_shape(wname, (n_out, n_in))
        t = self.gguf.tensor(wname)
        lin = Linear(np.empty((n_in, n_out), dtype=np.float32), t.qtype)
        if self.has(prefix + ".bias"):
            self._check_shape(prefix + ".bias", (n_out,))
            lin.b = self.vector(prefix + ".bias")

        def work() -> None:
            lin.w[...] = self._deq(wname).T  # (out, in) -> (in, out), one strided copy

        self.futures.append(self.pool.submit(work))
        self.nbytes += lin.w.nbytes
        return lin

    def output(self, name: str, tied_to: str, embedding: np.ndarray | None = None) -> OutputWeight:
        if self.has(name):
            w = self._deq(name)
            self.nbytes += w.nbytes
            return OutputWeight(w, self.gguf.tensor(name).qtype)
        if embedding is None:
            raise ModelLoadError(self.gguf.path, f"missing tensor {name!r} and no tied embedding")
        return OutputWeight(embedding, self.gguf.tensor(tied_to).qtype)

    def finish(self) -> None:
        """Wait for every queued dequantization; re-raise the first error."""
        try:
            for f in self.futures:
                f.result()
        finally:
            self.pool.shutdown(wait=True)
            self.futures.clear()
