"""Weights of a GGUF file, as the numerics mode multiplies them.

`ggml` numerics (the default): every matmul weight stays in its GGUF bytes, a read-only view
of the memory-mapped file (`QuantMatrix`, core/model/kernels/qmm): pages shared with other
processes through the page cache, and only the rows a step touches are read. The token
embedding too: rows are dequantized when gathered, and a tied output projection multiplies
the same bytes. Matrices of the 32-value types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) are packed at
load, their rows interleaved by eights for the kernels (core/model/kernels/qmm/packed.py: the
same bytes regrouped, and the same results, faster); the file's pages of a packed tensor are
then handed back (a later read of them, an embedding row, maps its page again), so it is
resident once. A model with experts packs its matrices into a file-backed cache instead
(`pack="file"`, core/model/weights/pack_cache.py; its experts stay as stored): packed copies in
memory would be anonymous memory on top of a file that a step reads only a small part of (the
30B-A3B shape's attention and vocabulary projection: ~0.8 GB), where its resident memory
should follow the pages it reads.

`f32` numerics (the plain-maths reference): matrices are dequantized to float32 at load and
multiplied with BLAS. They are held as (in, out) C-contiguous so that `x @ w` streams them row
by row; the vocabulary projection stays (n_vocab, n_embd).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType

from llamacli.core.errors import ModelLoadError, UnsupportedTensorType
from llamacli.core.model.weights.gguf_file import GGUFFile, release_pages
from llamacli.core.model.kernels.qmm import QuantMatrix, supports
from llamacli.core.model.kernels.qmm.matrix import pack_matrix, packable
from llamacli.core.model.weights import pack_cache
from llamacli.core.model.kernels.dequant import dequantize, dequantize_rows


@dataclass
class Linear:
    """y = x @ W.T + b for W (n_out, n_in) of type qtype: held as `q` (GGUF bytes, ggml numerics)
    or as `w` (float32 (in, out), f32 numerics)."""

    qtype: GGMLQuantizationType
    n_in: int
    n_out: int
    q: QuantMatrix | None = None
    w: np.ndarray | None = None
    b: np.ndarray | None = None
    name: str = ""  # the GGUF tensor name of W (LoRA adapters name the weights they change)


def fuse_f32(parts: list[Linear]) -> "FusedLinear | None":
    """f32 numerics: one (in, sum of outs) matrix for linears that read the same input (one
    matmul instead of several); the parts' weights become views into it. None if impossible."""
    if len(parts) < 2 or len({p.n_in for p in parts}) != 1 or any(p.w is None for p in parts):
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
    """Several f32 Linear layers side by side: w (in, out_1 + out_2 + ...)."""

    w: np.ndarray
    qtype: GGMLQuantizationType
    splits: list[int]
    biases: list[np.ndarray | None]


@dataclass
class ExpertLinear:
    """The n_expert matrices of a mixture-of-experts layer, W[e] (n_out, n_in), stored as one 3-D
    GGUF tensor (ggml ne = [n_in, n_out, n_expert]): `q[e]` a view of expert e's rows in the
    mapped file (ggml numerics: a step reads only the experts it routes to), or `w` float32
    (n_expert, n_in, n_out) (f32 numerics)."""

    qtype: GGMLQuantizationType
    n_expert: int
    n_in: int
    n_out: int
    q: list[QuantMatrix] | None = None
    w: np.ndarray | None = None
    name: str = ""
    b: np.ndarray | None = None  # (n_expert, n_out): the experts' biases (gpt-oss), float32
    whole: QuantMatrix | None = None  # all experts' rows (n_expert * n_out, row bytes), a view (ggml numerics)


@dataclass
class Embedding:
    """The token embedding (n_vocab, n_embd): GGUF bytes (ggml numerics) or float32 (f32)."""

    qtype: GGMLQuantizationType
    n_vocab: int
    n_embd: int
    q: QuantMatrix | None = None
    w: np.ndarray | None = None
    name: str = "token_embd.weight"  # its GGUF tensor name

    def rows(self, tokens: np.ndarray) -> np.ndarray:
        """(T,) ids -> (T, n_embd) float32 (ggml_get_rows)."""
        if self.w is not None:
            return self.w[tokens]
        assert self.q is not None
        return dequantize_rows(self.q.data, self.qtype, (self.n_vocab, self.n_embd), tokens)


@dataclass
class OutputWeight:
    """The vocabulary projection W (n_vocab, n_embd): logits = x @ W.T."""

    qtype: GGMLQuantizationType
    q: QuantMatrix | None = None
    w: np.ndarray | None = None  # f32 numerics: (n_vocab, n_embd) row-major
    name: str = ""  # "output.weight"; "" when tied to the token embedding
    weight_name: str = ""  # the GGUF tensor multiplied: `name`, or the tied embedding's

    def __post_init__(self) -> None:
        self.weight_name = self.weight_name or self.name


class WeightLoader:
    """Reads one file's weights for a numerics mode. `quantized`: keep GGUF bytes (ggml mode);
    otherwise dequantize to float32 in a small thread pool (NumPy releases the GIL).

    Methods may return objects filled in by `finish()`, so that tensors decode in parallel.
    `pack`: give matrices their packed form in memory ("memory"), in the file-backed cache
    ("file", `finish` attaches them), or not at all ("off") (module docstring)."""

    def __init__(self, gguf: GGUFFile, threads: int = 2, quantized: bool = True, pack: str = "memory") -> None:
        assert pack in ("memory", "file", "off")
        self.gguf = gguf
        self.quantized = quantized
        self.pack = pack
        self.pool = ThreadPoolExecutor(max_workers=max(1, threads))
        self.futures: list[Future[None]] = []
        self.loaded_names: set[str] = set()
        self.nbytes = 0  # bytes of float32 copies made (0 for quantized weights)
        self.packed: list[QuantMatrix] = []  # matrices given their packed form in memory
        self.to_file: dict[int, tuple[str, QuantMatrix]] = {}  # pack="file": id(m) -> (tensor, m)
        self.cached = pack_cache.Attached()  # what the file-backed cache gave (pack="file")

    @property
    def packed_bytes(self) -> int:
        return sum(m.packed.nbytes for m in self.packed if m.packed is not None)

    def _pack(self, name: str, m: QuantMatrix) -> None:
        """Queue m's packed form (matrix.pack_matrix), then hand the tensor's file pages back."""
        if self.pack == "file" and packable(m):
            self.to_file[id(m)] = (name, m)
        if self.pack != "memory":
            return

        def work() -> None:
            if pack_matrix(m):
                self.packed.append(m)
                self._release(name)

        self.futures.append(self.pool.submit(work))

    def _release(self, name: str) -> None:
        """Drop the mapped pages that lie wholly inside tensor `name` from this process."""
        t = self.gguf.tensor(name)
        release_pages(self.gguf.mapping(name), t.offset, t.offset + t.nbytes)

    def _deq(self, name: str) -> np.ndarray:
        t = self.gguf.tensor(name)
        self.loaded_names.add(name)
        try:
            return dequantize(self.gguf.raw(name), t.qtype, t.shape)
        except UnsupportedTensorType as e:
            raise UnsupportedTensorType(self.gguf.path, f"tensor {name!r}: {e.problem}") from None

    def _matrix(self, name: str, n_rows: int | None = None) -> QuantMatrix:
        """A 2-D tensor (or a 3-D one as n_rows rows) as a view of the mapped file."""
        t = self.gguf.tensor(name)
        self.loaded_names.add(name)
        if not supports(t.qtype):
            raise UnsupportedTensorType(self.gguf.path, f"tensor {name!r}: no matmul for ggml type {t.qtype.name}")
        n_in = t.shape[-1]
        n_out = n_rows if n_rows is not None else t.shape[0]
        data = np.asarray(self.gguf.raw(name)).reshape(-1).view(np.uint8).reshape(n_out, -1)  # a view
        return QuantMatrix(data, t.qtype, int(n_in))

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

    def embedding(self, name: str) -> Embedding:
        t = self.gguf.tensor(name)
        if len(t.shape) != 2:
            raise ModelLoadError(self.gguf.path, f"tensor {name!r} must be 2-D, has shape {t.shape}")
        n_vocab, n_embd = t.shape
        if self.quantized:
            return Embedding(t.qtype, n_vocab, n_embd, q=self._matrix(name), name=name)
        e = self._deq(name)
        self.nbytes += e.nbytes
        return Embedding(t.qtype, n_vocab, n_embd, w=e, name=name)

    def linear(self, prefix: str, n_in: int, n_out: int, weight: str = ".weight") -> Linear:
        """Weight `prefix + weight` (GGUF shape (n_out, n_in)) and optional `prefix.bias`."""
        return self.linear_parts(prefix, n_in, [n_out], weight)[0]

    def linear_parts(self, prefix: str, n_in: int, outs: list[int], weight: str = ".weight") -> list[Linear]:
        """A fused weight (GGUF shape (sum(outs), n_in): Phi-3's attn_qkv, its gate|up ffn_up) as
        one Linear per block of rows. Each output row is its own dot product, so the parts give
        the bits of the fused matmul; in ggml numerics each part is a view of its rows."""
        wname = prefix + weight
        self._check_shape(wname, (sum(outs), n_in))
        t = self.gguf.tensor(wname)
        starts = np.cumsum([0] + outs)
        names = [wname] if len(outs) == 1 else [f"{wname}[{a}:{b}]" for a, b in zip(starts[:-1], starts[1:])]
        lins = [Linear(t.qtype, n_in, n, name=nm) for n, nm in zip(outs, names)]
        if self.has(prefix + ".bias"):
            self._check_shape(prefix + ".bias", (sum(outs),))
            b = self.vector(prefix + ".bias")
            for lin, a, e in zip(lins, starts[:-1], starts[1:]):
                lin.b = b[a:e]
        if self.quantized:
            m = self._matrix(wname)
            for lin, a, e in zip(lins, starts[:-1], starts[1:]):
                lin.q = m if len(outs) == 1 else QuantMatrix(m.data[a:e], t.qtype, n_in)
                self._pack(wname, lin.q)
            return lins
        for lin in lins:
            lin.w = np.empty((n_in, lin.n_out), dtype=np.float32)
            self.nbytes += lin.w.nbytes

        def work() -> None:
            d = self._deq(wname)  # (sum(outs), n_in)
            for lin, a, e in zip(lins, starts[:-1], starts[1:]):
                lin.w[...] = d[a:e].T  # type: ignore[index]  # (out, in) -> (in, out)

        self.futures.append(self.pool.submit(work))
        return lins

    def experts(self, name: str, n_expert: int, n_in: int, n_out: int) -> ExpertLinear:
        """The 3-D expert tensor `name` (GGUF shape (n_expert, n_out, n_in)) and its optional
        biases `{name minus .weight}.bias` (GGUF shape (n_expert, n_out))."""
        self._check_shape(name, (n_expert, n_out, n_in))
        t = self.gguf.tensor(name)
        ex = ExpertLinear(t.qtype, n_expert, n_in, n_out, name=name)
        bias = name.removesuffix(".weight") + ".bias"
        if self.has(bias):
            self._check_shape(bias, (n_expert, n_out))
            ex.b = self.vector(bias).reshape(n_expert, n_out)
        if self.quantized:
            whole = self._matrix(name, n_expert * n_out)  # (n_expert * n_out, row bytes), a view
            ex.q = [QuantMatrix(whole.data[e * n_out : (e + 1) * n_out], t.qtype, n_in) for e in range(n_expert)]
            ex.whole = whole
            return ex
        ex.w = np.empty((n_expert, n_in, n_out), dtype=np.float32)

        def work() -> None:
            d = self._deq(name).reshape(n_expert, n_out, n_in)
            ex.w[...] = d.transpose(0, 2, 1)  # type: ignore[index]  # (E, out, in) -> (E, in, out)

        self.futures.append(self.pool.submit(work))
        self.nbytes += ex.w.nbytes
        return ex

    def output(self, name: str, tied_to: Embedding) -> OutputWeight:
        """`name` if the file has it, else the tied embedding's matrix."""
        if self.has(name):
            if self.quantized:
                q = self._matrix(name)
                self._pack(name, q)
                return OutputWeight(self.gguf.tensor(name).qtype, q=q, name=name)
            w = self._deq(name)
            self.nbytes += w.nbytes
            return OutputWeight(self.gguf.tensor(name).qtype, w=w, name=name)
        if tied_to.q is not None:  # the embedding's bytes: its rows still read them
            self._pack(tied_to.name, tied_to.q)
        return OutputWeight(tied_to.qtype, q=tied_to.q, w=tied_to.w, weight_name=tied_to.name)

    def finish(self) -> None:
        """Wait for every queued dequantization; re-raise the first error. Then, with
        pack="file", map the packed matrices from the cache (pack_cache.attach) and hand the
        model file's pages of their tensors back."""
        try:
            for f in self.futures:
                f.result()
        finally:
            self.pool.shutdown(wait=True)
            self.futures.clear()
        if self.to_file:
            named = list(self.to_file.values())
            self.cached = pack_cache.attach(self.gguf, named)
            if self.cached.nbytes:
                for name in {name for name, _ in named}:
                    self._release(name)
