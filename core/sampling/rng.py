"""C++'s `std::mt19937` and the three libstdc++ distributions llama.cpp's samplers draw from.

With the same seed, the same draws come out as in llama.cpp (built with GCC's libstdc++),
so a seeded request picks the same tokens from the same logits. NumPy's MT19937 bit generator
runs the engine; only the seeding (`init_genrand`, which std::mt19937(seed) uses) and
libstdc++'s `generate_canonical` are written here.
"""

from __future__ import annotations

import math
import secrets

import numpy as np

DEFAULT_SEED = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: draw a random seed
_TWO32 = 4294967296.0
_TWO64 = 18446744073709551616.0
_BELOW_ONE = math.nextafter(1.0, 0.0)
_BELOW_ONE_F32 = float(np.nextafter(np.float32(1.0), np.float32(0.0)))


def resolve_seed(seed: int) -> int:
    """llama.cpp's get_rng_seed: LLAMA_DEFAULT_SEED becomes a random 32-bit seed."""
    seed &= 0xFFFFFFFF
    if seed == DEFAULT_SEED:
        return secrets.randbits(32)
    return seed


def _init_genrand(seed: int) -> np.ndarray:
    key = [seed & 0xFFFFFFFF]
    for i in range(1, 624):
        prev = key[-1]
        key.append((1812433253 * (prev ^ (prev >> 30)) + i) & 0xFFFFFFFF)
    return np.array(key, dtype=np.uint32)


class Mt19937:
    """std::mt19937 seeded with a 32-bit seed, plus the distributions the samplers use."""

    def __init__(self, seed: int) -> None:
        self._bg = np.random.MT19937()
        self.seed(seed)

    def seed(self, seed: int) -> None:
        self._bg.state = {
            "bit_generator": "MT19937",
            "state": {"key": _init_genrand(seed), "pos": 624},
        }

    def next_u32(self) -> int:
        """One raw 32-bit output (operator())."""
        return int(self._bg.random_raw())

    def uniform_double(self) -> float:
        """std::uniform_real_distribution<double>(0, 1): two draws, low word first."""
        lo, hi = (int(v) for v in self._bg.random_raw(2))
        r = (float(lo) + float(hi) * _TWO32) / _TWO64
        return _BELOW_ONE if r >= 1.0 else r

    def uniform_float(self) -> float:
        """std::uniform_real_distribution<float>(0, 1): one draw, rounded to float first."""
        r = float(np.float32(self.next_u32()) / np.float32(_TWO32))
        return _BELOW_ONE_F32 if r >= 1.0 else r

    def discrete(self, weights: np.ndarray) -> int:
        """std::discrete_distribution<int>(weights)(rng), libstdc++'s algorithm: float64
        cumulative sums of the normalised weights, last set to 1, lower_bound of one draw.
        Fewer than two weights: index 0 and no draw."""
        if weights.shape[0] < 2:
            return 0
        w = weights.astype(np.float64)
        total = float(np.cumsum(w)[-1])
        cp = np.cumsum(w / total)
        cp[-1] = 1.0
        return int(np.searchsorted(cp, self.uniform_double(), side="left"))
