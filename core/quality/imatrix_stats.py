"""`llama imatrix --show-statistics`: llama-imatrix's per-tensor and per-layer statistics of
an importance matrix (tools/imatrix/imatrix.cpp: compute_statistics, compute_cossim,
show_statistics), in its float32 arithmetic (sums added one value after another).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from llamacli.core.quantize.imatrix_file import ImatrixEntry

F32 = np.float32
ACTIVE_THRESHOLD = F32(1e-5)
_BLK = re.compile(r"blk\.(\d+)\.")


def _seq_sum(v: np.ndarray) -> F32:
    """std::accumulate(.., 0.0f): float32, left to right."""
    return F32(np.cumsum(v, dtype=F32)[-1]) if v.size else F32(0)


def _dot(a: np.ndarray, b: np.ndarray) -> F32:
    """std::inner_product(.., 0.0f): float32 products added left to right."""
    return _seq_sum((a * b).astype(F32))


@dataclass
class TensorStats:
    """One weight's row of the table (sums divided by their counts)."""

    tensor: str
    layer: str  # the block number as written in the name, or "-"
    name: str  # the part before ".weight"
    values: np.ndarray  # the raw sums (for the cosine similarity)
    total: float  # Σ(Act²)
    minimum: float
    maximum: float
    mean: float
    stddev: float
    active: float  # fraction of columns above 1e-5
    elements: int
    entropy: float
    zd: float  # fraction of columns more than one standard deviation above the mean
    cossim: float = 0.0  # cosine similarity with the same weight in the previous block

    @property
    def block(self) -> int:
        return int(self.layer) if self.layer.isdigit() else -1

    @property
    def entropy_norm(self) -> float:
        return 100.0 * (float(self.entropy) / float(np.log2(self.elements))) if self.elements > 0 else 0.0


def split_name(tensor: str) -> tuple[str, str]:
    """(layer, short name) of `blk.N.attn_q.weight`: ("N", "attn_q"); ("-", tensor) otherwise."""
    parts = tensor.split(".")
    layer = next((parts[i + 1] for i in range(len(parts) - 1) if parts[i] == "blk"), "-")
    name = next((parts[i - 1] for i in range(1, len(parts)) if parts[i] == "weight"), "") or tensor
    return layer, name


def tensor_stats(tensor: str, e: ImatrixEntry) -> TensorStats | None:
    """The statistics of one entry, None for one without data (llama.cpp skips it)."""
    n_mat = e.n_mat
    if n_mat == 0 or e.sums.shape[0] % n_mat:
        return None
    row = e.sums.shape[0] // n_mat
    acts = [e.sums[i * row : (i + 1) * row] / F32(e.counts[i]) for i in range(n_mat) if e.counts[i] != 0]
    if not acts:
        return None
    a = np.concatenate(acts).astype(F32)
    n = F32(a.shape[0])
    total = _seq_sum(a)
    mean = total / n
    var = _dot(a, a) / n - mean * mean
    dev = F32(np.sqrt(max(F32(0), var)))
    active = F32(1) - F32(int((np.abs(a) <= ACTIVE_THRESHOLD).sum())) / n
    entropy = F32(0)
    if total > 0:
        p = a / total
        p = p[p > 0]
        entropy = -_seq_sum((p * np.log2(p)).astype(F32))
    z = int(((a - mean) / dev > 1).sum()) if dev > 0 else 0
    layer, name = split_name(tensor)
    return TensorStats(tensor, layer, name, e.sums, float(total), float(a.min()), float(a.max()), float(mean),
                       float(dev), float(active), int(a.shape[0]), float(entropy), float(F32(z) / F32(a.shape[0])))


def _cossim(stats: list[TensorStats]) -> None:
    by_name = {s.tensor: s for s in stats}
    for s in stats:
        m = _BLK.search(s.tensor)
        if m is None:
            s.cossim = 0.0
            continue
        prev = by_name.get(s.tensor[: m.start(1)] + str(int(m.group(1)) - 1) + s.tensor[m.end(1) :])
        if prev is not None and prev.values.shape == s.values.shape:
            dp = _dot(s.values, prev.values)
            mag = F32(np.sqrt(_dot(s.values, s.values))) * F32(np.sqrt(_dot(prev.values, prev.values)))
            with np.errstate(all="ignore"):
                s.cossim = float(dp / mag)


@dataclass(frozen=True)
class LayerStats:
    """Per block: the averages of Σ(Act²), ZD and CosSim weighted by the columns of each tensor."""

    layer: int
    bias: float
    zd: float
    cossim: float


def statistics(entries: dict[str, ImatrixEntry]) -> tuple[list[TensorStats], list[LayerStats]]:
    """The table rows (by short name, then largest Σ(Act²) first) and the per-layer averages."""
    stats = [s for name, e in entries.items() if (s := tensor_stats(name, e)) is not None]
    _cossim(stats)
    stats.sort(key=lambda s: (s.name, -s.total))
    acc: dict[int, list[F32]] = {}
    for s in stats:
        w = acc.setdefault(s.block, [F32(0), F32(0), F32(0), F32(0)])
        n = F32(s.elements)
        w[0] = F32(w[0] + n * F32(s.total))
        w[1] = F32(w[1] + n * F32(s.zd))
        w[2] = F32(w[2] + n * F32(s.cossim))
        w[3] = F32(w[3] + n)
    layers = [LayerStats(b, float(w[0] / w[3]), float(w[1] / w[3]), float(w[2] / w[3]))
              for b, w in sorted(acc.items()) if b >= 0 and w[3] > 0]
    return stats, layers
