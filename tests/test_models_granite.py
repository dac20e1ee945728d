"""core/model/families/granite.py: what granite and granitemoe read from the file, as llama.cpp
reads it (the logits against llama.cpp's are in test_parity_tiny.py, incremental and batched
decoding in test_models.py and test_moe.py, the tied experts in test_moe.py)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families.granite import GraniteModel, GraniteMoeModel
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from llamacli.core.text.chat_templates.detect import default_builtin
from tests.tiny_models import fixture_tokens, load_error_without, rewrite_gguf, write_tiny_model


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("granite")
    # (rewrite_gguf copies F32 files only; the Q8_0 granitemoe has the shared FFN)
    return {name: write_tiny_model(arch, v, d / f"{name}.gguf")
            for name, arch, v in (("granite", "granite", "F32"), ("granitemoe", "granitemoe", "F32"),
                                  ("shared", "granitemoe", "Q8_0"), ("granitehybrid", "granitehybrid", "F32"))}


def test_hyperparameters_as_llama_cpp_reads_them(files: dict[str, Path]) -> None:
    dense, _, _ = load_model(files["granite"])
    moe, g, _ = load_model(files["shared"])
    assert type(dense) is GraniteModel and type(moe) is GraniteMoeModel
    for m in (dense, moe):
        a = m.args
        assert (a.n_head, a.n_head_kv, a.head_dim) == (4, 2, 64)
        assert a.embed_scale == 12.0 and a.attn_scale == 0.0078125  # attention.scale, not 1/sqrt(64)
        assert a.residual_scale == pytest.approx(0.22) and a.logit_scale == 2.0
        assert a.rope.scale == 1.0 and not a.rope.neox  # rope on, normal (GPT-J) order
    assert dense.args.moe is None and dense.layers[0].w_gate is not None and dense.layers[0].w_gate.n_out == 512
    mo = moe.args.moe
    assert mo is not None and "granitemoe.expert_feed_forward_length" not in g.metadata
    # the experts have feed_forward_length rows; GraniteMoeShared's shared FFN its own
    assert (mo.n_expert, mo.n_expert_used, mo.n_ff_exp, mo.gating, mo.norm_weights, mo.weights_scale) == (
        8, 2, 256, "softmax", True, 0.0)
    assert (mo.n_shared, mo.n_ff_shared) == (1, 512)
    for lw in moe.layers:
        assert lw.w_gate is None and lw.moe is not None and lw.moe.shared is not None
        assert lw.moe.shared[0].n_out == 512 and lw.moe.gate.n_out == 256


@pytest.mark.parametrize("arch", ["granite", "granitemoe"])
def test_logit_scale_is_required(files: dict[str, Path], tmp_path: Path, arch: str) -> None:
    """llama.cpp reads `logit_scale` as a required key for both (granitehybrid: optional)."""
    key = f"{arch}.logit_scale"
    bad, err = load_error_without(files[arch], key, tmp_path)
    assert str(bad) in err and repr(key) in err


@pytest.mark.parametrize("arch,rope_scale", [("granite", 0.0), ("granitemoe", 1.0)])
def test_rope_finetuned_switches_rope_off_for_granite_only(files: dict[str, Path], tmp_path: Path, arch: str,
                                                            rope_scale: float) -> None:
    """granite reads `rope.scaling.finetuned` as its rope switch (false: no rotation);
    granitemoe's loader never reads it, so its rope stays on."""
    off = rewrite_gguf(files[arch], tmp_path / "off.gguf",
                       set_values={f"{arch}.rope.scaling.finetuned": (False, gguf.GGUFValueType.BOOL)})
    model, _, _ = load_model(off)
    assert model.args.rope.scale == rope_scale


def test_deepstack_layers_are_refused(files: dict[str, Path], tmp_path: Path) -> None:
    """Granite 4 Vision's text model (`deepstack_mapping` >= 0 somewhere): one clear line."""
    bad = rewrite_gguf(files["granite"], tmp_path / "ds.gguf",
                       set_values={"granite.deepstack_mapping": ([-1, 1], gguf.GGUFValueType.ARRAY)})
    with pytest.raises(ModelLoadError, match="deepstack_mapping"):
        load_model(bad)


@pytest.mark.parametrize("arch", ["granite", "granitemoe"])
def test_files_without_a_template_chat_in_granite_turns(arch: str) -> None:
    assert default_builtin({"general.architecture": arch}) == "granite"


@pytest.mark.parametrize("name", ["granite", "granitemoe", "granitehybrid"])
def test_given_embeddings_are_scaled_as_token_embeddings_are(files: dict[str, Path], name: str) -> None:
    """llama.cpp's build_inp_embd multiplies every input row by `embedding_scale` (for Granite,
    media embeddings too; Gemma scales its token rows only): a prompt given as its token
    embedding rows (media rows) gives the logits of the tokens themselves."""
    model, _, _ = load_model(files[name], numerics="ggml")
    assert model.scale_media_embd and model.args.embed_scale == 12.0
    toks = fixture_tokens(name, 12)
    want = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 64))
    rows = model.tok_embd.rows(np.array(toks))  # (12, n_embd), unscaled
    given = Batch(np.full(12, -1), np.zeros(12), np.arange(12), output=np.ones(12, dtype=bool), embd=rows)
    np.testing.assert_array_equal(model.forward(given, model.new_cache(1, 64)), want)
