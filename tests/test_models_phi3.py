"""core/model/families/phi3.py: fused weights and LongRoPE (the logits against llama.cpp's are
in test_parity_tiny.py, the incremental decoding in test_models.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llamacli.core.model.families.phi3 import Phi3Model
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from llamacli.core.text.chat_templates.detect import default_builtin
from tests.tiny_models import fixture_tokens, rewrite_gguf, write_tiny_model


def test_longrope_picks_the_long_factors_above_the_original_context(tmp_path: Path) -> None:
    """As llama.cpp: long factors when the context per sequence, padded to 256 cells, exceeds
    rope.scaling.original_context_length (256 in the tiny F32 model); cos and sin both scaled."""
    model, _, _ = load_model(write_tiny_model("phi3", "F32", tmp_path / "m.gguf"))
    assert isinstance(model, Phi3Model)
    short, long = model.ropes(256)[0], model.ropes(257)[0]
    assert model.ropes(1)[0] is short and long is not short
    assert short.freq_factors is not None and long.freq_factors is not None
    assert float(long.freq_factors.max()) == pytest.approx(40.0)
    # the same tokens give other logits in a cache past the original context (other rotations)
    toks = fixture_tokens("phi3", 12)
    a = model.forward(Batch.single(toks), model.new_cache(1, 256))
    b = model.forward(Batch.single(toks), model.new_cache(1, 300))
    assert not np.allclose(a, b)


def test_split_and_fused_files_need_no_rope_factors(tmp_path: Path) -> None:
    model, _, _ = load_model(write_tiny_model("phi3", "F32_SPLIT", tmp_path / "m.gguf"))
    assert model.ropes(100_000)[0].freq_factors is None and model.args.rope.n_dims == 48


def test_a_file_without_long_factors_rotates_long_contexts_unscaled(tmp_path: Path) -> None:
    """llama.cpp reads both factor tensors as optional: past the original context with no
    rope_factors_long it rotates with no factors at all (not with the short ones)."""
    src = write_tiny_model("phi3", "F32", tmp_path / "m.gguf")
    model, _, _ = load_model(rewrite_gguf(src, tmp_path / "short.gguf", drop="rope_factors_long.weight"))
    assert model.ropes(256)[0].freq_factors is not None and model.ropes(257)[0].freq_factors is None


def test_phi3_files_without_a_template_chat_in_phi3_turns() -> None:
    assert default_builtin({"general.architecture": "phi3"}) == "phi3"
