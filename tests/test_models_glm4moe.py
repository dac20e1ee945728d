"""core/model/families/glm4moe.py: what it reads from the file, its sigmoid router with the
selection bias and shared expert (the logits against llama.cpp's are in test_parity_tiny.py,
incremental and batched decoding in test_moe.py)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.glm4moe import Glm4MoeModel
from llamacli.core.model.families.moe import MoEArgs, route
from llamacli.core.model.kernels.qmm.router import sigmoid_rows
from llamacli.core.model.load import load_model
from tests.tiny_models import rewrite_gguf, write_tiny_model


@pytest.mark.parametrize("variant", ["F32", "Q4_K"])
def test_hyperparameters_and_layers_as_llama_cpp_reads_them(tmp_path: Path, variant: str) -> None:
    model, _, _ = load_model(write_tiny_model("glm4moe", variant, tmp_path / "m.gguf"))
    assert isinstance(model, Glm4MoeModel)
    a = model.args
    assert a.n_layer == 3 and len(model.layers) == 3  # block_count 4 less the nextn layer
    assert a.rope.neox and a.rope.n_dims == 32 and a.head_dim == 64  # half of each head rotated
    assert a.moe is not None
    assert (a.moe.gating, a.moe.norm_weights, a.moe.weights_scale, a.moe.n_shared) == ("sigmoid", True, 2.5, 1)
    dense, *experts = model.layers
    assert dense.moe is None and dense.w_gate is not None and dense.w_gate.n_out == 512
    for lw in experts:
        assert lw.moe is not None and lw.w_gate is None and lw.wq.b is not None
        assert lw.moe.probs_bias is not None and lw.moe.probs_bias.shape == (16,)
        assert lw.moe.shared is not None and lw.moe.shared[0].n_out == 256
    assert all((lw.q_norm is not None) == (variant == "F32") for lw in model.layers)  # Q/K norms where the file has them


def test_sigmoid_is_ggmls() -> None:
    x = np.array([[-200.0, -88.0, -3.5, 0.0, 1e-8, 2.25, 30.0, 200.0]], dtype=np.float32)
    with np.errstate(all="raise"):
        s = sigmoid_rows(x)
    want = (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)
    assert s.dtype == np.float32 and s[0, 0] == 0.0 and s[0, -1] == 1.0
    np.testing.assert_allclose(s, want, rtol=2e-7, atol=0)


def test_selection_bias_chooses_but_does_not_weight() -> None:
    """exp_probs_b (DeepSeek-V3 style): the top k of probs + bias, weighted by the probs."""
    rng = np.random.default_rng(3)
    probs = sigmoid_rows(rng.standard_normal((30, 16)).astype(np.float32))
    bias = (0.3 * rng.standard_normal(16)).astype(np.float32)
    m = MoEArgs(16, 4, 64, norm_weights=True, weights_scale=2.5, gating="sigmoid")
    sel, w = route(probs, m, bias=bias)
    np.testing.assert_array_equal(sel, np.argsort(-(probs + bias), axis=1, kind="stable")[:, :4])
    chosen = np.take_along_axis(probs, sel, 1)
    np.testing.assert_allclose(w, chosen / chosen.sum(1, keepdims=True) * 2.5, rtol=1e-6)
    assert not np.array_equal(sel, route(probs, m)[0])  # the bias moved some choices


def test_mrope_sections_are_refused(tmp_path: Path) -> None:
    src = write_tiny_model("glm4moe", "F32", tmp_path / "m.gguf")
    bad = rewrite_gguf(src, tmp_path / "bad.gguf", set_values={
        "glm4moe.rope.dimension_sections": ([8, 12, 12, 0], gguf.GGUFValueType.ARRAY)})
    with pytest.raises(ModelLoadError, match="dimension_sections"):
        load_model(bad)


@pytest.mark.parametrize("kind,name", [("key", "glm4moe.expert_shared_count"), ("key", "glm4moe.expert_count"),
                                       ("tensor", "blk.1.exp_probs_b.bias"), ("tensor", "blk.2.ffn_down_shexp.weight")])
def test_missing_keys_and_router_tensors_are_named(tmp_path: Path, kind: str, name: str) -> None:
    src = write_tiny_model("glm4moe", "F32", tmp_path / "m.gguf")
    bad = rewrite_gguf(src, tmp_path / "bad.gguf", drop_keys=(name,) if kind == "key" else (),
                       drop=name if kind == "tensor" else None)
    with pytest.raises(ModelLoadError) as e:
        load_model(bad)
    assert str(bad) in str(e.value) and name in str(e.value)


def test_nextn_layer_tensors_are_not_needed(tmp_path: Path) -> None:
    """llama.cpp skips the multi-token-prediction layer; we never read it: without it the
    trunk loads the same (its tensors are only dropped here for the check)."""
    src = write_tiny_model("glm4moe", "F32", tmp_path / "m.gguf")
    dst = rewrite_gguf(src, tmp_path / "d.gguf", drop="blk.3.nextn.eh_proj.weight")
    model, _, _ = load_model(dst)
    assert len(model.layers) == 3
