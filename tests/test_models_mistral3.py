"""core/model/families/mistral3.py: what it reads from the file and the attention temperature
(the logits against llama.cpp's are in test_parity_tiny.py)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.mistral3 import Mistral3Model
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from tests.tiny_models import fixture_tokens, rewrite_gguf, write_tiny_model


def test_hyperparameters_as_llama_cpp_reads_them(tmp_path: Path) -> None:
    model, _, _ = load_model(write_tiny_model("mistral3", "F32", tmp_path / "m.gguf"))
    assert isinstance(model, Mistral3Model)
    a = model.args
    assert not a.rope.neox and a.rope.scale == 1 / 16 and a.rope.ext_factor == 1.0
    # the file's betas (16, 2), not the defaults (32, 1): corr dims from n_ctx_orig 16, base 1e6
    assert a.rope.corr_dims == (0.0, 1.0)
    assert a.rope.corr_dims != K.yarn_corr_dims(64, 16, 1e6, 32.0, 1.0)
    # yarn_log_multiplier 1 (mscale_all_dim): get_mscale(16, 1) / get_mscale(16, 1), then the
    # 1 / (1 + 0.1 ln 16) that ggml's rope multiplies back: 1
    assert a.rope.attn_factor == pytest.approx(1.0, abs=1e-7)
    assert a.attn_temp == (pytest.approx(0.1), 16)
    assert a.attn_scale == 0.125  # 1/sqrt(head_dim)


def test_without_the_log_multiplier_yarn_scales_the_magnitude(tmp_path: Path) -> None:
    src = write_tiny_model("mistral3", "F32", tmp_path / "m.gguf")
    dst = rewrite_gguf(src, tmp_path / "d.gguf", drop_keys=("mistral3.rope.scaling.yarn_log_multiplier",))
    model, _, _ = load_model(dst)
    assert model.args.rope.attn_factor == pytest.approx(1 + 0.1 * np.log(16), rel=1e-6)  # get_mscale(16)


def test_attention_temperature_values() -> None:
    """log(floor(pos / 16) + 1) * 0.1 + 1 per token: 1 below the original context."""
    t = K.attn_temperature(np.array([0, 15, 16, 31, 32, 48, 1000]), 0.1, 16)
    want = np.log(np.floor(np.array([0, 15, 16, 31, 32, 48, 1000]) / 16) + 1) * np.float64(np.float32(0.1)) + 1
    np.testing.assert_array_equal(t, want.astype(np.float32))
    assert t.dtype == np.float32 and t[0] == t[1] == 1.0 and t[2] > 1.0


def test_temperature_changes_only_positions_past_the_original_context(tmp_path: Path) -> None:
    src = write_tiny_model("mistral3", "F32", tmp_path / "m.gguf")
    plain = rewrite_gguf(src, tmp_path / "p.gguf", drop_keys=("mistral3.attention.temperature_scale",))
    toks = fixture_tokens("mistral3", 24)
    out = []
    for path in (src, plain):
        model, _, _ = load_model(path, numerics="ggml")
        out.append(model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 32)))
    np.testing.assert_array_equal(out[0][:16], out[1][:16])
    assert np.abs(out[0][16:] - out[1][16:]).max(axis=1).min() > 1e-3


@pytest.mark.parametrize("variant", ["Q4_K", "F32"])
def test_one_token_steps_equal_the_batched_forward(tmp_path: Path, variant: str) -> None:
    """ggml numerics: token by token past position 16 (Q4_K: through the compiled decode step,
    which scales Q by the position's temperature) gives the bits of one full forward."""
    model, _, _ = load_model(write_tiny_model("mistral3", variant, tmp_path / "m.gguf"), numerics="ggml")
    assert (model._planned_step() is not None) == (variant == "Q4_K")
    toks = fixture_tokens("mistral3", 40)
    full = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 64))
    cache = model.new_cache(1, 64)
    parts = [model.forward(Batch.single(toks[:10], all_logits=True), cache)]
    for i in range(10, 40):
        parts.append(model.forward(Batch.single(toks[i : i + 1], start_pos=i), cache))
    np.testing.assert_array_equal(np.concatenate(parts), full)


def test_experts_are_refused_with_the_key(tmp_path: Path) -> None:
    src = write_tiny_model("mistral3", "F32", tmp_path / "m.gguf")
    bad = rewrite_gguf(src, tmp_path / "bad.gguf", set_values={"mistral3.expert_count": (8, gguf.GGUFValueType.UINT32)})
    with pytest.raises(ModelLoadError, match="mistral3.expert_count"):
        load_model(bad)
