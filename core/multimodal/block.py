"""The pre-norm transformer block that mtmd's `clip_graph::build_vit` builds for vision and
audio towers alike (no mask, no rope, biases where the file has them):

    x = x + o(attention(q(h), k(h), v(h)))     h = ln1(x)
    x = x + down(act(up(ln2(x))))

The tensors (`<prefix>.blk.<il>.{ln1,attn_q,attn_k,attn_v,attn_out,ln2,ffn_up,ffn_down}`) and the
step order are shared; each tower passes the operations its numerics need (the layer norm, the
attention over the heads, the activation), so each keeps the bits that libmtmd gives it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from llamacli.core.model.precision import Precision
from llamacli.core.model.weights.tensors import Linear, WeightLoader


@dataclass
class Norm:
    """LayerNorm weight and bias (n,)."""

    w: np.ndarray
    b: np.ndarray | None


@dataclass
class BlockWeights:
    ln1: Norm
    q: Linear
    k: Linear
    v: Linear
    o: Linear
    ln2: Norm
    up: Linear
    down: Linear


def read_norm(ld: WeightLoader, prefix: str, n: int) -> Norm:
    return Norm(ld.vector(prefix + ".weight", n), ld.vector(prefix + ".bias", n) if ld.has(prefix + ".bias") else None)


def read_block(ld: WeightLoader, prefix: str, e: int, f: int, legacy_ffn: bool = False) -> BlockWeights:
    """Block `prefix` (e.g. "v.blk.3") of width e and FFN width f. legacy_ffn: swap up and down
    when ffn_down reads e values (files of older converters: clip.cpp does it for the vision
    projector types listed in its `is_ffn_swapped`)."""
    up, down = f"{prefix}.ffn_up", f"{prefix}.ffn_down"
    if legacy_ffn and ld.gguf.tensor(down + ".weight").shape[-1] == e and e != f:
        up, down = down, up
    return BlockWeights(
        ln1=read_norm(ld, f"{prefix}.ln1", e),
        q=ld.linear(f"{prefix}.attn_q", e, e),
        k=ld.linear(f"{prefix}.attn_k", e, e),
        v=ld.linear(f"{prefix}.attn_v", e, e),
        o=ld.linear(f"{prefix}.attn_out", e, e),
        ln2=read_norm(ld, f"{prefix}.ln2", e),
        up=ld.linear(up, e, f),
        down=ld.linear(down, f, e),
    )


NormFn = Callable[[np.ndarray, Norm, float], np.ndarray]  # (x (T, E), norm, eps) -> (T, E)
AttendFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]  # q, k, v (T, H * D) -> heads' output (T, H * D)
ActFn = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class BlockOps:
    """A tower's numerics for the block's three non-matmul steps."""

    norm: NormFn
    attend: AttendFn
    act: ActFn


def block_forward(x: np.ndarray, w: BlockWeights, eps: float, ops: BlockOps, pr: Precision) -> np.ndarray:
    """One block over x (T, E) -> (T, E)."""
    q, k, v = pr.linears(ops.norm(x, w.ln1, eps), [w.q, w.k, w.v], None)
    x = x + pr.linear(ops.attend(q, k, v), w.o)
    return x + pr.linear(ops.act(pr.linear(ops.norm(x, w.ln2, eps), w.up)), w.down)
