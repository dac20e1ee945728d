"""core/model/families/gemma4.py: what it reads from the file, the greedy continuations against
llama.cpp's, the variants it refuses (the teacher-forced logits against llama.cpp's are in
test_parity_tiny.py)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.families.gemma4 import Gemma4Model, LayerShape
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from tests.test_decode_step import _decode_together
from tests.test_models_gemma2 import check_steps_equal_batched, greedy_tokens
from tests.tiny_models import GEMMA4_MODELS, fixture_tokens, rewrite_gguf, write_tiny_model

FIXTURES = Path(__file__).parent / "fixtures" / "tiny"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("gemma4")
    return {v: write_tiny_model(a, v, d / f"{a}-{v}.gguf") for a, v in GEMMA4_MODELS}


@pytest.fixture(scope="module")
def models(files: dict[str, Path]) -> dict[str, DecoderModel]:
    return {v: load_model(p, numerics="ggml")[0] for v, p in files.items()}


def test_hyperparameters_as_llama_cpp_reads_them(models: dict[str, DecoderModel]) -> None:
    model = models["F32"]
    assert isinstance(model, Gemma4Model)
    a = model.args
    assert a.swa_layers == (True, False, True, False) and a.sliding_window == 16  # the file's pattern array
    assert model.shapes == (LayerShape(2, 64), LayerShape(1, 128), LayerShape(2, 64), LayerShape(1, 128))
    assert a.attn_scale == 1.0 and not a.scale_q and a.final_softcap == 8.0 and a.attn_softcap is None
    assert a.embed_scale == 16.0 and a.activation == "gelu" and a.rope.neox
    full, swa = model.ropes(128)
    assert (full.n_dims, full.base, swa.n_dims, swa.base) == (128, 1e6, 64, 1e4)
    assert full.freq_factors is not None and swa.freq_factors is None  # proportional rope on full layers only
    assert [lw.wv is None for lw in model.layers] == [False, True, False, True]  # V = K where no attn_v
    assert all(lw.out_scale is not None and 0.5 <= lw.out_scale <= 1.5 for lw in model.layers)
    cache = model.new_cache(1, 32)
    assert [k.shape for k in cache.k] == [(1, 2, 32, 64), (1, 1, 32, 128)] * 2


@pytest.mark.parametrize("variant", ["F32", "Q4_K"])
def test_greedy_continuation_equals_llama_cpp(models: dict[str, DecoderModel], variant: str) -> None:
    """Our 16 greedy tokens after the 40-token prompt (past the 16-token window) are llama.cpp's,
    every one (llama.cpp's top two are at least 0.03 apart at each step on both files)."""
    z = np.load(FIXTURES / f"gemma4-{variant}.npz")
    assert greedy_tokens(models[variant], z) == z["greedy"].tolist()


def test_one_token_steps_equal_the_batched_forward(models: dict[str, DecoderModel]) -> None:
    """Q4_K: token by token through the compiled decode step (layers of two shapes, V normed and
    taken from K where there is no attn_v, the layers' output scales) gives the bits of the step
    through the operations one by one and of one full forward."""
    check_steps_equal_batched(models["Q4_K"], "gemma4")


def test_one_token_steps_of_many_sequences_give_the_same_bits(models: dict[str, DecoderModel]) -> None:
    """Q4_K: one token of each of ten sequences through the compiled layers gives the bits of
    the batched operations, logits and cache."""
    model = models["Q4_K"]
    toks = fixture_tokens("gemma4", 24)
    one_by_one, cache_a = _decode_together(model, False, toks)
    fused, cache_b = _decode_together(model, True, toks)
    np.testing.assert_array_equal(one_by_one, fused)
    assert all(np.array_equal(a, b) for a, b in zip(cache_a, cache_b))


U32 = gguf.GGUFValueType.UINT32


@pytest.mark.parametrize("values,drop,what", [
    ({"gemma4.embedding_length_per_layer_input": (64, U32)}, None, "per-layer embeddings"),
    ({"gemma4.attention.shared_kv_layers": (2, U32)}, None, "KV shared across layers"),
    ({"gemma4.expert_count": (8, U32)}, None, "experts"),
])
def test_variants_it_does_not_run_are_refused_in_one_line(files: dict[str, Path], tmp_path: Path, values: dict,
                                                          drop: str | None, what: str) -> None:
    dst = rewrite_gguf(files["F32"], tmp_path / "v.gguf", drop=drop, set_values=values)
    with pytest.raises(ModelLoadError, match=what) as e:
        load_model(dst)
    assert "\n" not in str(e.value)
