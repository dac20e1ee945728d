"""top_indices (the top-k of every sampling step) is the head of a stable descending sort
of the whole list: ties, at the k-th value too, keep list order; banned (-inf) tokens only
fill what the live ones cannot."""

from __future__ import annotations

import numpy as np

from llamacli.core.sampling.candidates import top_indices
from llamacli.core.sampling.top_k import top_k_indices


def _stable_head(values: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-values, kind="stable")[:k]


def test_top_indices_is_the_head_of_a_stable_sort() -> None:
    rng = np.random.default_rng(29)
    for trial in range(400):
        n = int(rng.integers(2, 5000))  # blocks of 1024 entries and a partial last one
        k = int(rng.integers(1, n))
        v = rng.integers(-6, 6, n).astype(np.float32)  # many ties, at the k-th value too
        if trial % 3 == 0:
            v[rng.random(n) < 0.6] = -np.inf  # a grammar's mask: most tokens banned
        elif trial % 3 == 1:
            v[rng.random(n) < 0.05] = -np.inf  # ignore_eos: a few banned
        if trial % 4 == 1:
            v = np.sort(v)  # ascending: every entry would beat the heap's worst
        if trial % 8 == 2:
            v[rng.random(n) < 0.02] = np.nan  # NaN sorts last
        np.testing.assert_array_equal(top_indices(v, k), _stable_head(v, k), err_msg=f"n={n} k={k}")


def test_top_indices_over_a_vocabulary() -> None:
    rng = np.random.default_rng(7)
    v = (rng.standard_normal(262144) * 3).astype(np.float32)
    v[[1, 106]] = -np.inf
    v[5000] = v[9000] = v[200000] = np.float32(40.0)  # a three-way tie at the top
    for k in (1, 2, 3, 40, 1000):
        np.testing.assert_array_equal(top_indices(v, k), _stable_head(v, k))
    assert list(top_k_indices(v, 3)) == [5000, 9000, 200000]


def test_fewer_live_tokens_than_k_fill_with_the_earliest_banned() -> None:
    v = np.full(10, -np.inf, dtype=np.float32)
    v[[7, 3]] = [1.0, 2.0]
    assert list(top_indices(v, 5)) == [3, 7, 0, 1, 2]


def test_many_nans_leave_the_order_to_the_stable_sort() -> None:
    v = np.full(1000, np.nan, dtype=np.float32)
    v[[900, 5, 300]] = [1.0, 3.0, 2.0]
    np.testing.assert_array_equal(top_indices(v, 10), _stable_head(v, 10))
