"""The importance matrix as llama-quantize uses it (tools/quantize/quantize.cpp load_imatrix,
prepare_imatrix): per weight tensor, the mean squared input of each column (per expert for a
3-D expert tensor), which the quantizers use as weights (weighted.py).

GGUF files hold sums and counts: value = sum / count per expert (1 where an expert saw no
data). Legacy `.dat` files hold (sum / count) * ncall: value = that / ncall. Then
`--exclude-weights S` drops the entries whose name contains S, `--include-weights S` keeps only
those that contain one of them (substrings, not patterns).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llamacli.core.errors import InvalidRequest

from .imatrix_file import read_imatrix

# The metadata llama-quantize adds to a file quantized with an importance matrix.
KEY_FILE = "quantize.imatrix.file"
KEY_DATASET = "quantize.imatrix.dataset"
KEY_N_ENTRIES = "quantize.imatrix.entries_count"
KEY_N_CHUNKS = "quantize.imatrix.chunks_count"


@dataclass(frozen=True)
class Importance:
    """A loaded importance matrix: path, per-tensor weights (n_mat * n_in,) float32, the
    datasets it was computed on and its chunk count (-1 if unknown)."""

    path: str
    weights: dict[str, np.ndarray]
    datasets: list[str]
    chunk_count: int

    def for_tensor(self, name: str, n_in: int, n_mat: int) -> np.ndarray | None:
        """The weights of a tensor with n_mat matrices of rows n_in long, as (n_mat, n_in), or
        None if the matrix has no entry for it. A wrong size is an error, except for the token
        embeddings (llama.cpp ignores theirs)."""
        w = self.weights.get(name)
        if w is None:
            return None
        if w.size != n_in * n_mat:
            if name in ("token_embd.weight", "per_layer_token_embd.weight"):
                return None
            raise InvalidRequest(f"imatrix size {w.size} is different from tensor size {n_in * n_mat} for {name}")
        return w.reshape(n_mat, n_in)


def _normalise(sums: np.ndarray, counts: np.ndarray, legacy: bool) -> np.ndarray:
    if legacy:  # (sum / count) * ncall: divide by ncall
        ncall = int(counts[0]) if counts.size else 0
        return sums / np.float32(ncall) if ncall > 0 else sums.copy()
    per = sums.reshape(counts.size, -1)
    out = np.ones_like(per)
    for j, c in enumerate(counts):
        if np.float32(c) > 0:
            out[j] = per[j] / np.float32(c)
    return out.reshape(-1)


def load_importance(path: str, include: tuple[str, ...] = (), exclude: tuple[str, ...] = ()) -> Importance:
    """Read an imatrix file for quantizing, with llama-quantize's checks and filters."""
    if include and exclude:
        raise InvalidRequest("--include-weights and --exclude-weights cannot be used together")
    m = read_imatrix(path)
    if not m.is_legacy and not m.has_metadata:
        raise InvalidRequest(f"missing imatrix metadata in file {path}")
    weights = {name: _normalise(e.sums, e.counts, m.is_legacy) for name, e in m.entries.items()}
    if exclude:
        weights = {k: v for k, v in weights.items() if not any(s in k for s in exclude)}
    if include:
        weights = {k: v for k, v in weights.items() if any(s in k for s in include)}
    for name, w in weights.items():
        if not np.isfinite(w).all():
            bad = w[~np.isfinite(w)][0]
            raise InvalidRequest(f"imatrix contains non-finite value {bad} (tensor {name})")
    return Importance(path, weights, list(m.datasets), m.chunk_count)
