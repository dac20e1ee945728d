"""Numerics modes of the forward pass.

`f32`: plain float32 maths on dequantized weights.
`ggml`: the same maths, with the roundings llama.cpp's CPU backend applies inserted where it
applies them (docs/numerics.md), so that our logits track llama.cpp's closely enough for
token-identical greedy output: activations quantized to each weight type's `vec_dot_type`
before a matmul, K/V cached as f16, attention operands in f16, GELU through the f16 table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from llamacli.core.model.kernels import NUMERICS_MODES
from llamacli.core.model.kernels import heap
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.lora import NO_LORA, LoraSet
from llamacli.core.model.kernels import qmm
from llamacli.core.model.kernels.matmul import MatmulPool, RowLayout, limit_blas
from llamacli.core.model.kernels.qmm.attention import attention as qmm_attention
from llamacli.core.model.kernels.qmm import experts
from llamacli.core.model.kernels.qmm.matrix import act_key
from llamacli.core.model.kernels.qmm.tables import gelu_lookup, gelu_mul_lookup, round_f16_into
from llamacli.core.model.kernels.qmm.router import softmax_rows
from llamacli.core.model.weights.tensors import ExpertLinear, FusedLinear, Linear, OutputWeight

T = TypeVar("T")
# Sees the input of every matmul with a named weight: (the GGUF tensor's name, x (T, n_in)
# float32, before any rounding to the weight's dot type), as llama.cpp's eval callback sees
# `src1` of each MUL_MAT (llama-imatrix collects its statistics this way).
MatmulObserver = Callable[[str, np.ndarray], None]
# Sees the input of every mixture-of-experts matmul (ggml's MUL_MAT_ID): (the expert tensor's
# name, x (T, n_in) shared by the k slots or (T, k, n_in) one row per slot, the selected experts
# (T, k), the number of experts), as llama-imatrix sees src1 and the ids of each MUL_MAT_ID.
ExpertObserver = Callable[[str, np.ndarray, np.ndarray, int], None]

class Precision:
    """float32 maths on dequantized weights (BLAS); the base of the ggml mode, which overrides
    the rounding hooks and multiplies the GGUF blocks themselves.

    Matmuls go through a MatmulPool: multi-threaded and batch-invariant (core/model/kernels/matmul.py).
    """

    name = "f32"
    quantized_weights = False  # what the WeightLoader keeps: GGUF bytes or float32 copies
    singles_per_group = 0  # decoding sequences per attention group (0: all in one batched matmul)

    def __init__(self, threads: int | None = None, batch_invariant: bool = False) -> None:
        self.mm = MatmulPool(threads, batch_invariant)
        self.lora: LoraSet = NO_LORA  # adapters the current forward applies (set by the engine)
        self.observer: MatmulObserver | None = None  # `llama imatrix` sets one; None costs nothing
        self.expert_observer: ExpertObserver | None = None  # the same for the expert matmuls
        heap.keep_freed()  # a layer's freed arrays serve the next one (core/model/kernels/heap.py)

    @property
    def batch_invariant(self) -> bool:
        return self.mm.batch_invariant

    def begin_batch(self, batch: Batch) -> None:
        """Lay out the batch's rows for batch-invariant matmuls (no-op in fast mode)."""
        if self.mm.batch_invariant:
            self.mm.layout = RowLayout.build(batch.seq_ids, batch.positions, batch.decode, self.mm.tile)

    def run_each(self, fn: Callable[[T], None], items: Sequence[T]) -> None:
        """fn(item) for each item (independent pieces of work, e.g. attention groups)."""
        for it in items:
            fn(it)

    def act(self, x: np.ndarray, weight_qtype: object) -> np.ndarray:
        """The activation as the matmul with a weight of this type sees it."""
        return x

    def kv(self, x: np.ndarray) -> np.ndarray:
        """K or V as stored in the cache."""
        return x

    def matmul(self, x: np.ndarray, lin: Linear) -> np.ndarray:
        """x @ W.T, nothing added."""
        return self.mm.linear(self.act(x, lin.qtype), lin.w)  # type: ignore[arg-type]

    def add_lora(self, x: np.ndarray, name: str, y: np.ndarray) -> None:
        """y += each active adapter's ((x A^T) B^T) * scale for the weight `name`, in adapter
        order (llama.cpp's build_lora_mm; before the bias)."""
        for adapter, user_scale in self.lora.active:
            lw = adapter.weights.get(name)
            if lw is not None:
                y += self.matmul(self.matmul(x, lw.a), lw.b) * np.float32(lw.scale(adapter.alpha, user_scale))  # type: ignore[arg-type]

    def add_lora_rows(self, tokens: np.ndarray, name: str, x: np.ndarray) -> None:
        """x (T, n_embd) += each active adapter's A[tokens] B^T * scale for the embedding
        `name` (llama.cpp's build_inp_embd)."""
        for adapter, user_scale in self.lora.active:
            lw = adapter.weights.get(name)
            if lw is not None:
                rows = lw.a.rows(tokens)  # type: ignore[union-attr]  # (T, rank)
                x += self.matmul(rows, lw.b) * np.float32(lw.scale(adapter.alpha, user_scale))

    def linear(self, x: np.ndarray, lin: Linear) -> np.ndarray:
        if self.observer is not None:
            self.observer(lin.name, x)
        y = self.matmul(x, lin)
        self.add_lora(x, lin.name, y)
        if lin.b is not None:
            y += lin.b
        return y

    def linears(self, x: np.ndarray, lins: list[Linear], fused: FusedLinear | None) -> list[np.ndarray]:
        """Several linears of the same input (Q/K/V, gate/up)."""
        if self.observer is not None:
            for lin in lins:
                self.observer(lin.name, x)
        return self._linears(x, lins, fused)

    def _linears(self, x: np.ndarray, lins: list[Linear], fused: FusedLinear | None) -> list[np.ndarray]:
        if fused is not None and not self.lora:
            return self.linear_fused(x, fused)
        return [self.linear(x, lin) for lin in lins]

    def linear_fused(self, x: np.ndarray, f: FusedLinear) -> list[np.ndarray]:
        """The outputs of the fused layers, one rounding and one matmul for all."""
        y = self.mm.linear(self.act(x, f.qtype), f.w)
        outs: list[np.ndarray] = []
        a = 0
        for n, b in zip(f.splits, f.biases):
            part = y[:, a : a + n]
            if b is not None:
                part = part + b
            outs.append(part)
            a += n
        return outs

    def expert_linears(self, x: np.ndarray, exs: list[ExpertLinear], selected: np.ndarray) -> list[np.ndarray]:
        """ggml's mul_mat_id: y[t, j] = x_tj @ W_e.T for e = selected[t, j], for each expert
        tensor in exs (all of the same input). x (T, n_in): the same row for every slot
        (gate/up); or (T, k, n_in): one row per slot (down). selected (T, k) -> [(T, k, n_out)].

        The (token, slot) pairs are grouped by expert: one matmul per active expert over its
        rows, reading only that expert's weights. Each row is rounded for the matmul once, as
        ggml converts src1 once."""
        t, k = selected.shape
        if self.expert_observer is not None:
            for ex in exs:
                self.expert_observer(ex.name, x, selected, ex.n_expert)
        x2 = x.reshape(-1, x.shape[-1])  # (T or T*k, n_in)
        row_of_pair = np.repeat(np.arange(t), k) if x.ndim == 2 else np.arange(t * k)
        acts: dict[object, object] = {}
        outs = [np.empty((t * k, ex.n_out), dtype=np.float32) for ex in exs]
        flat = selected.reshape(-1)
        order = np.argsort(flat, kind="stable")  # pairs grouped by expert
        experts, starts = np.unique(flat[order], return_index=True)
        ends = np.append(starts[1:], flat.shape[0])
        for e, a, b in zip(experts.tolist(), starts.tolist(), ends.tolist()):
            pairs = order[a:b]
            rows = row_of_pair[pairs]
            for ex, out in zip(exs, outs):
                key = act_key(ex.qtype)
                if key not in acts:
                    acts[key] = self.prepare_rows(x2, ex.qtype)
                out[pairs] = self.expert_matmul(acts[key], rows, ex, e)
        for ex, out in zip(exs, outs):
            if ex.b is not None:  # ggml_add_id: each (token, slot) row + its expert's bias
                out += ex.b[flat]
        return [o.reshape(t, k, -1) for o in outs]

    def prepare_rows(self, x: np.ndarray, qtype: object) -> object:
        """x (N, n_in) as the matmuls with weights of this type take it."""
        return self.act(x, qtype)

    def expert_matmul(self, xa: object, rows: np.ndarray, ex: ExpertLinear, e: int) -> np.ndarray:
        """xa[rows] @ W_e.T, xa from prepare_rows."""
        assert ex.w is not None and isinstance(xa, np.ndarray)
        return self.mm.linear(xa[rows], ex.w[e])

    def router_probs(self, logits: np.ndarray) -> np.ndarray:
        """Soft max over each token's expert logits (T, n_expert)."""
        return K.softmax(logits)

    def output(self, x: np.ndarray, ow: OutputWeight) -> np.ndarray:
        """Logits (n, n_vocab) = x (n, n_embd) @ ow.w.T."""
        if self.observer is not None:
            self.observer(ow.weight_name, x)
        return self._output(x, ow)

    def _output(self, x: np.ndarray, ow: OutputWeight) -> np.ndarray:
        y = self.mm.project(self.act(x, ow.qtype), ow.w)  # type: ignore[arg-type]
        self.add_lora(x, ow.name, y)
        return y

    def rope(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray, cfg: K.RopeConfig) -> np.ndarray:
        return K.apply_rope(x, cos, sin, cfg.n_dims, cfg.neox)

    def gelu(self, x: np.ndarray) -> np.ndarray:
        return K.gelu(x)

    def silu(self, x: np.ndarray) -> np.ndarray:
        return K.silu(x)

    def gated(self, g: np.ndarray, u: np.ndarray, activation: str) -> np.ndarray:
        """act(g) * u: a gated FFN's gate (GELU, else SiLU) times its up projection."""
        return (self.gelu(g) if activation == "gelu" else self.silu(g)) * u

    def attention(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, scale: float, softcap: float | None,
        sinks: np.ndarray | None = None,
    ) -> np.ndarray:
        """sinks (H,): gpt-oss's per-head logits in each softmax (K.gqa_attention)."""
        return K.gqa_attention(q, k, v, mask, scale, softcap, sinks)


class GGMLPrecision(Precision):
    """Emulates ggml-cpu's roundings (see docs/numerics.md for each, with its source)."""

    name = "ggml"
    quantized_weights = True
    # The compiled attention gives each row the same bits in any group, so decoding sequences
    # are grouped by 8: the groups run side by side on the pool (run_each).
    singles_per_group = 8

    def __init__(self, threads: int | None = None, batch_invariant: bool = False) -> None:
        # Every matmul and attention product here is batch-invariant by construction, so the
        # flag changes nothing (kept for the command line).
        super().__init__(threads, False)
        qmm.threads.set_threads(threads)
        # BLAS (what NumPy glue still multiplies, e.g. LoRA factors) on one thread: its spinning
        # threads fought the kernels' threads and any other busy process; attention groups (the
        # compiled kernel releases the GIL) run side by side on our threads instead.
        limit_blas()

    def run_each(self, fn: Callable[[T], None], items: Sequence[T]) -> None:
        qmm.threads.run_each(fn, items)

    def kv(self, x: np.ndarray) -> np.ndarray:
        """Rounded to f16 values (numerics.round_f16's, compiled and split by rows)."""
        return _by_rows(round_f16_into, x)

    def matmul(self, x: np.ndarray, lin: Linear) -> np.ndarray:
        """On the GGUF blocks: activation quantized once to the vec_dot type, integer block dots
        (core/model/kernels/qmm). The same result for a row whatever the batch, CPU or thread count."""
        assert lin.q is not None
        return qmm.matmul(qmm.prepare(x, lin.qtype), lin.q)

    def _linears(self, x: np.ndarray, lins: list[Linear], fused: FusedLinear | None) -> list[np.ndarray]:
        """Weights whose activations round alike share one quantization of x (and, decoding,
        one parallel loop)."""
        groups: dict[object, list[int]] = {}
        for i, lin in enumerate(lins):
            groups.setdefault(act_key(lin.qtype), []).append(i)
        outs: list[np.ndarray] = [np.empty(0)] * len(lins)
        for idx in groups.values():
            xa = qmm.prepare(x, lins[idx[0]].qtype)
            ys = qmm.matmul_many(xa, [lins[i].q for i in idx])  # type: ignore[misc]
            for i, y in zip(idx, ys):
                self.add_lora(x, lins[i].name, y)
                if lins[i].b is not None:
                    y += lins[i].b
                outs[i] = y
        return outs

    def expert_linears(self, x: np.ndarray, exs: list[ExpertLinear], selected: np.ndarray) -> list[np.ndarray]:
        """As Precision's, in one compiled loop over the experts' rows (qmm/experts.py's
        `mul_mat_id`, the same bits) for a batch of tokens where the tensors allow; one token's
        experts one matmul each (measured faster in a decoding process: docs/benchmarks.md)."""
        if (selected.shape[0] == 1 or self.expert_observer is not None or len({(act_key(ex.qtype), ex.n_out) for ex in exs}) != 1
                or not all(experts.takes(ex.whole) for ex in exs)):
            return super().expert_linears(x, exs, selected)
        t, k = selected.shape
        flat = selected.reshape(-1)
        rows = np.repeat(np.arange(t), k) if x.ndim == 2 else np.arange(t * k)
        xa = qmm.prepare(x.reshape(-1, x.shape[-1]), exs[0].qtype)
        assert not isinstance(xa, np.ndarray)
        outs = experts.mul_mat_id(xa, rows, flat, [ex.whole for ex in exs if ex.whole is not None], exs[0].n_out)
        for ex, out in zip(exs, outs):
            if ex.b is not None:  # ggml_add_id
                out += ex.b[flat]
        return [o.reshape(t, k, -1) for o in outs]

    def prepare_rows(self, x: np.ndarray, qtype: object) -> object:
        return qmm.prepare(x, qtype)  # type: ignore[arg-type]

    def expert_matmul(self, xa: object, rows: np.ndarray, ex: ExpertLinear, e: int) -> np.ndarray:
        """On expert e's blocks (a view of its rows in the mapped file)."""
        assert ex.q is not None
        sub = xa[rows] if isinstance(xa, np.ndarray) else xa.rows(rows)  # type: ignore[attr-defined]
        return qmm.matmul(sub, ex.q[e])

    def router_probs(self, logits: np.ndarray) -> np.ndarray:
        """ggml_soft_max: ggml's exp and float64 sum, then one float32 scale (qmm/router.py)."""
        return softmax_rows(np.ascontiguousarray(logits, dtype=np.float32))

    def _output(self, x: np.ndarray, ow: OutputWeight) -> np.ndarray:
        assert ow.q is not None
        y = qmm.matmul(qmm.prepare(x, ow.qtype), ow.q)
        self.add_lora(x, ow.name, y)
        return y

    def rope(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray, cfg: K.RopeConfig) -> np.ndarray:
        return K.apply_rope(x, cos, sin, cfg.n_dims, cfg.neox, fma=True)

    def gelu(self, x: np.ndarray) -> np.ndarray:
        """ggml's GELU: through a table indexed by the f16 input, giving f16 values;
        x <= -10 -> 0 and x >= 10 -> x (docs/numerics.md 2.8)."""
        table = _gelu_f16_table()
        return _by_rows(lambda x1, y1: gelu_lookup(x1, table, y1), x)

    def gated(self, g: np.ndarray, u: np.ndarray, activation: str) -> np.ndarray:
        """GELU: the table's value times u in one compiled pass (the same float32 product)."""
        if activation != "gelu" or g.shape != u.shape:
            return super().gated(g, u, activation)
        table = _gelu_f16_table()
        return _by_rows(lambda g1, u1, y1: gelu_mul_lookup(g1, u1, table, y1), g, u)

    def attention(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, scale: float, softcap: float | None,
        sinks: np.ndarray | None = None,
    ) -> np.ndarray:
        """The non-flash-attention path (docs/numerics.md 2.6): Q rounded to f16 for KQ (K, V
        are already f16 values from the cache), softmax with a float64 sum, probabilities
        rounded to f16 before the V product. Compiled (core/model/kernels/qmm/attention.py): both products
        are float32 sums of exact f16 products in one fixed order, so a row's result is the
        same on every CPU, for every thread count and whatever else is in the batch."""
        return qmm_attention(q, k, v, mask, scale, softcap, sinks)


def _by_rows(fn: Callable[..., None], x: np.ndarray, *more: np.ndarray) -> np.ndarray:
    """y (x's shape, float32) = fn(x, *more, y) for an element-wise compiled fn of flat arrays,
    called on ranges of rows (the first axis: tokens) side by side (threads.split_rows)."""
    ins = [np.ascontiguousarray(a, dtype=np.float32) for a in (x, *more)]
    y = np.empty_like(ins[0])
    if y.ndim < 2 or y.size == 0:
        fn(*[a.reshape(-1) for a in ins], y.reshape(-1))
        return y
    rows = [a.reshape(a.shape[0], -1) for a in (*ins, y)]
    qmm.threads.split_rows(lambda a, b: fn(*[r[a:b].reshape(-1) for r in rows]), *rows[-1].shape)
    return y


_GELU_TABLE: np.ndarray | None = None


def _gelu_f16_table() -> np.ndarray:
    """f32(f16(gelu(h))) for every f16 bit pattern h (65536 entries), built once."""
    global _GELU_TABLE
    if _GELU_TABLE is None:
        h = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            _GELU_TABLE = K.gelu(h).astype(np.float16).astype(np.float32)
    return _GELU_TABLE


def make_precision(mode: str, threads: int | None = None, batch_invariant: bool = False) -> Precision:
    if mode == "ggml":
        return GGMLPrecision(threads, batch_invariant)
    if mode == "f32":
        return Precision(threads, batch_invariant)
    raise ValueError(f"unknown numerics mode {mode!r} (choose from {', '.join(NUMERICS_MODES)})")
