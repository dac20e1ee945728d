"""The steps between a prompt's matmuls, compiled and split across threads: each gives the bits
of the NumPy steps it replaced (GELU then the product with the up projection, the f16 rounding
of K and V, Q8_0 block sums), and attention groups are planned costliest first."""

from __future__ import annotations

import numpy as np
import pytest

from llamacli.core.model.families.base import plan_attention
from llamacli.core.model.kernels import numerics as N
from llamacli.core.model.kernels.qmm import threads
from llamacli.core.model.kernels.qmm.acts import block_sums
from llamacli.core.model.precision import GGMLPrecision
from llamacli.core.model.state.batch import Batch


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def _edge_values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random values over many magnitudes, with GELU's and f16's edges mixed in."""
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-30, 18, shape))).astype(np.float32)
    edges = np.array([10.0, -10.0, np.nextafter(10, 0), np.nextafter(-10, 0), 0.0, -0.0, 65504.0, 65520.0, 1e-8, -6e-8,
                      np.inf, -np.inf], dtype=np.float32)
    x.reshape(-1)[: edges.size * 50 : 50] = edges
    return x


@pytest.fixture(params=[1, 2])
def pr(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> GGMLPrecision:
    monkeypatch.setattr(threads._contention, "update", lambda: False)  # split rows even on a busy machine
    return GGMLPrecision(threads=request.param)


def test_gelu_gate_times_up_is_the_two_steps(pr: GGMLPrecision) -> None:
    rng = np.random.default_rng(3)
    g, u = _edge_values(rng, (300, 2048)), _edge_values(rng, (300, 2048))
    with np.errstate(invalid="ignore", over="ignore"):
        want = pr.gelu(g) * u
        got = pr.gated(g, u, "gelu")
        one_row = pr.gated(g[7], u[7], "gelu")
    np.testing.assert_array_equal(_bits(got), _bits(want))
    np.testing.assert_array_equal(_bits(one_row), _bits(want[7]))


def test_kv_rounding_is_numerics_round_f16(pr: GGMLPrecision) -> None:
    x = _edge_values(np.random.default_rng(4), (300, 2, 256))
    got = pr.kv(x)
    assert got.shape == x.shape
    np.testing.assert_array_equal(_bits(got), _bits(N.round_f16(x)))
    # every float32 near the f16 range's ends and its subnormals: ties round to even alike
    near = np.concatenate([np.arange(0x33000000, 0x38900000, 97, dtype=np.uint32),
                           np.arange(0x477F0000, 0x47800400, dtype=np.uint32)]).view(np.float32)
    np.testing.assert_array_equal(_bits(pr.kv(near.reshape(-1, 8))), _bits(N.round_f16(near.reshape(-1, 8))))


def test_block_sums_are_the_code_sums_per_32() -> None:
    codes = np.random.default_rng(5).integers(-128, 128, (70, 640)).astype(np.int8)
    want = codes.reshape(70, -1, 32).sum(axis=-1, dtype=np.int32)[..., None]
    np.testing.assert_array_equal(block_sums(codes), want)


def test_prompt_blocks_are_planned_costliest_first() -> None:
    """A 512-token prompt's causal query blocks cost 1 : 3 : 5 : 7: taken in turn by two
    threads in that order they end at 6 and 10, costliest first at 8 and 8."""
    groups = plan_attention(Batch.single(list(range(512))))
    assert [int(g.q_pos.min()) for g in groups] == [384, 256, 128, 0]
    costs = [g.pairs() for g in groups]
    assert costs == sorted(costs, reverse=True) and costs[0] > 6 * costs[-1]
