"""core/model/families/gptoss.py: what it reads from the file (the logits against llama.cpp's
are in test_parity_tiny.py, incremental and batched decoding in test_moe.py)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.gptoss import GptOssModel
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from tests.tiny_models import fixture_tokens, load_error_without, rewrite_gguf, write_tiny_model


def test_hyperparameters_as_llama_cpp_reads_them(tmp_path: Path) -> None:
    model, _, _ = load_model(write_tiny_model("gpt-oss", "F16", tmp_path / "m.gguf"))
    assert isinstance(model, GptOssModel)
    a = model.args
    assert a.swa_layers == (True, False, True, False) and a.sliding_window == 8  # pattern 2: even layers slide
    assert a.rope.neox and a.rope.scale == 1 / 32 and a.rope.ext_factor == 1.0 and a.rope.corr_dims == (8.0, 18.0)
    assert a.rope_swa is None  # no rope.freq_base_swa: the same rope everywhere
    assert a.attn_scale == 0.125  # 1/sqrt(n_rot)
    assert a.moe is not None and (a.moe.gating, a.moe.norm_weights, a.moe.n_expert_used) == ("softmax_weight", False, 4)
    assert a.activation == "swiglu_oai"
    lw = model.layers[0]
    assert lw.attn_sinks is not None and lw.attn_sinks.shape == (a.n_head,)
    assert lw.wq.b is not None and lw.wo.b is not None and lw.moe is not None
    assert lw.moe.gate_inp.b is not None and lw.moe.down.b is not None and lw.moe.down.b.shape == (8, a.n_embd)


def test_pattern_and_swa_base_from_the_file(tmp_path: Path) -> None:
    """`attention.sliding_window_pattern` as an array and `rope.freq_base_swa` win over the
    defaults; a different sliding-window rope gives other logits."""
    src = write_tiny_model("gpt-oss", "F32", tmp_path / "m.gguf")
    bools = gguf.GGUFValueType.ARRAY
    dst = rewrite_gguf(src, tmp_path / "p.gguf", set_values={
        "gpt-oss.attention.sliding_window_pattern": ([False, True, True, False], bools),
        "gpt-oss.rope.freq_base_swa": (10000.0, gguf.GGUFValueType.FLOAT32)})
    model, _, _ = load_model(dst)
    assert model.args.swa_layers == (False, True, True, False)
    assert model.args.rope_swa is not None and model.args.rope_swa.base == 10000.0
    assert model.args.rope_swa.ext_factor == 1.0  # YaRN on the sliding layers too
    toks = fixture_tokens("gpt-oss", 12)
    base, _, _ = load_model(src)
    a = base.forward(Batch.single(toks), base.new_cache(1, 32))
    b = model.forward(Batch.single(toks), model.new_cache(1, 32))
    assert not np.allclose(a, b)


@pytest.mark.parametrize("key", ["gpt-oss.attention.sliding_window", "gpt-oss.expert_feed_forward_length",
                                 "gpt-oss.expert_count"])
def test_missing_keys_name_the_file_and_key(tmp_path: Path, key: str) -> None:
    src = write_tiny_model("gpt-oss", "F32", tmp_path / "m.gguf")
    bad, err = load_error_without(src, key, tmp_path)
    assert str(bad) in err and key in err


def test_missing_sinks_name_the_tensor(tmp_path: Path) -> None:
    src = write_tiny_model("gpt-oss", "F32", tmp_path / "m.gguf")
    bad = rewrite_gguf(src, tmp_path / "bad.gguf", drop="blk.1.attn_sinks.weight")
    with pytest.raises(ModelLoadError, match="blk.1.attn_sinks.weight"):
        load_model(bad)
