"""The candidate list every sampler works on: llama.cpp's `llama_token_data_array`.

Samplers reorder, cut and rescore it in place, in exactly the order llama.cpp would, because
the order decides which token a given random draw selects. Float32 throughout, as llama.cpp;
`expf` is evaluated in float64 and rounded (glibc's expf is correctly rounded in practice,
NumPy's float32 exp is not) except over very long lists, where speed wins.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


F32 = np.float32
_EXACT_EXP_MAX = 4096  # longer lists use NumPy's float32 exp (within 1 ulp of expf)
_STABLE_SORT_MAX = 4096  # longer lists use quicksort (ties in any order, as llama.cpp)


_ARANGE: dict[int, np.ndarray] = {}


def vocab_ids(n: int) -> np.ndarray:
    """0..n-1 as int32, shared and read-only (samplers index it, never write it)."""
    ids = _ARANGE.get(n)
    if ids is None:
        ids = np.arange(n, dtype=np.int32)
        ids.flags.writeable = False
        _ARANGE[n] = ids
    return ids


def expf(x: np.ndarray) -> np.ndarray:
    """Element-wise float32 exp, rounded as C's expf."""
    if x.shape[0] <= _EXACT_EXP_MAX:
        with np.errstate(under="ignore", over="ignore"):
            return np.exp(x.astype(np.float64)).astype(F32)
    return np.exp(x, dtype=F32)


def logf(x: np.ndarray) -> np.ndarray:
    """Element-wise float32 log, rounded as C's logf (log(0) = -inf without a warning)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(np.asarray(x, dtype=np.float64)).astype(F32)


def sum_f32(x: np.ndarray) -> np.float32:
    """A float32 running sum in list order, as a C loop `float s = 0; s += x[i]` computes."""
    if x.shape[0] == 0:
        return F32(0.0)
    return F32(np.cumsum(x, dtype=F32)[-1])


def order_desc(values: np.ndarray) -> np.ndarray:
    """Indices that sort values descending (ties keep list order on short lists)."""
    neg = -values
    if values.shape[0] <= _STABLE_SORT_MAX:
        return np.argsort(neg, kind="stable")
    return np.argsort(neg)


def top_indices(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values, sorted descending (k <= len(values)); below the whole
    list, ties (at the k-th value too) keep list order, as a stable sort of the whole list."""
    n = values.shape[0]
    if k >= n:
        return order_desc(values)
    if k <= 0:
        return np.empty(0, dtype=np.int64)
    # imported here: top_k compiles with numba, which `llama serve` loads only after its port
    # opens (tests/test_http_serve.py's cold start); the first sample pays the import
    from llamacli.core.sampling.top_k import top_k_indices

    return top_k_indices(values, k)


@dataclass
class Candidates:
    """ids (n,) int32, logits (n,) float32, p (n,) float32; `sorted`: by logit, descending;
    `selected`: index of the chosen token once a final sampler ran (-1 before)."""

    ids: np.ndarray
    logits: np.ndarray
    p: np.ndarray
    sorted: bool = False
    selected: int = -1
    identity: bool = False  # ids[i] == i for every i (the untouched vocabulary)

    @classmethod
    def from_logits(cls, logits: np.ndarray) -> Candidates:
        """The whole vocabulary in id order, as llama.cpp's common_sampler starts."""
        lg = np.array(logits, dtype=F32, copy=True)  # (n_vocab,)
        n = lg.shape[0]
        return cls(vocab_ids(n), lg, np.zeros(n, dtype=F32), identity=True)

    @classmethod
    def from_arrays(
        cls,
        ids: np.ndarray,
        logits: np.ndarray,
        p: np.ndarray | None = None,
        sorted: bool = False,
    ) -> Candidates:
        """A candidate list as given (tests feed llama.cpp's own inputs this way)."""
        ids = np.asarray(ids, dtype=np.int32).copy()
        lg = np.asarray(logits, dtype=F32).copy()
        pp = (
            np.zeros(lg.shape[0], dtype=F32)
            if p is None
            else np.asarray(p, dtype=F32).copy()
        )
        ident = bool(np.array_equal(ids, np.arange(ids.shape[0])))
        return cls(ids, lg, pp, sorted, identity=ident)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def take(self, idx: np.ndarray, sorted: bool) -> None:
        """Keep the entries at idx, in that order."""
        self.ids = self.ids[idx]
        self.logits = self.logits[idx]
        self.p = self.p[idx]
        self.sorted = sorted
        self.identity = False

    def truncate(self, n: int) -> None:
        """Keep the first n entries (llama.cpp's `cur_p->size = n`)."""
        self.ids = self.ids[:n]
        self.logits = self.logits[:n]
        self.p = self.p[:n]

    def drop_front(self, n: int) -> None:
        """Drop the first n entries (llama.cpp's `cur_p->data += n`)."""
        self.ids = self.ids[n:]
        self.logits = self.logits[n:]
        self.p = self.p[n:]
        self.identity = False

    def partial_sort(self, k: int) -> None:
        """llama_token_data_array_partial_sort_inplace: keep the top k, sorted."""
        self.take(top_indices(self.logits, k), sorted=True)

    def max_logit(self) -> np.float32:
        return F32(self.logits[0]) if self.sorted else F32(self.logits.max())

    def softmax(self, do_sort: bool) -> None:
        """llama_sampler_softmax_impl: p = expf(l - max) / float32 sum, sorted first if asked."""
        if do_sort and not self.sorted:
            self.partial_sort(len(self))
        e = expf(self.logits - self.max_logit())
        self.p = e / sum_f32(e)

    def positions(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where the given (distinct) token ids sit in the list: (positions, index into tokens)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        n = len(self)
        if self.identity:
            which = np.flatnonzero((tokens >= 0) & (tokens < n))
            return tokens[which], which
        if tokens.shape[0] == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        order = np.argsort(tokens)
        sorted_tokens = tokens[order]
        j = np.searchsorted(sorted_tokens, self.ids)
        j[j >= sorted_tokens.shape[0]] = 0
        hit = sorted_tokens[j] == self.ids
        pos = np.flatnonzero(hit)
        return pos, order[j[pos]]

    def copy(self) -> Candidates:
        return Candidates(
            self.ids.copy(),
            self.logits.copy(),
            self.p.copy(),
            self.sorted,
            self.selected,
            self.identity,
        )
