"""core/model/families/minimax_m2.py and seed_oss.py: what each reads from the file, MiniMax-M2's
Q/K norms over the whole projection (K's over the KV heads only) and partial rope, its sigmoid
router with a selection bias and tied experts, Seed-OSS's checks, incremental and batched
decoding, and the compiled decode step (the logits and greedy runs against llama.cpp's are in
test_parity_tiny.py: tests/tiny_models.py MINIMAX_M2_MODELS, SEED_OSS_MODELS)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families import moe
from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.families.minimax_m2 import MinimaxM2Model
from llamacli.core.model.families.seed_oss import SeedOssModel
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from llamacli.core.text.chat_templates.detect import default_builtin
from tests.test_decode_step import assert_chunked_and_batched_equal_full, assert_fused_step_same_bits
from tests.tiny_models import DEEPSEEK2_TIED, MINIMAX_M2_MODELS, SEED_OSS_MODELS, fixture_tokens, rewrite_gguf, write_tiny_model

QUANTIZED = [("minimax-m2", "Q8_0"), ("seed_oss", "Q8_0")]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    d = tmp_path_factory.mktemp("minimax")
    return {(a, v): write_tiny_model(a, v, d / f"{a}-{v}.gguf") for a, v in MINIMAX_M2_MODELS + SEED_OSS_MODELS}


@pytest.fixture(scope="module")
def models(files: dict[tuple[str, str], Path]) -> dict[tuple[str, str], DecoderModel]:
    return {key: load_model(path, numerics="ggml")[0] for key, path in files.items()}


def test_minimax_m2_as_llama_cpp_reads_it(models: dict[tuple[str, str], DecoderModel]) -> None:
    model = models[("minimax-m2", "F32")]
    assert isinstance(model, MinimaxM2Model)
    a = model.args
    assert (a.n_embd, a.n_head, a.n_head_kv, a.head_dim, a.rope.n_dims, a.rope.neox) == (256, 8, 2, 64, 32, True)
    m = a.moe
    assert m is not None
    assert (m.n_expert, m.n_expert_used, m.n_ff_exp, m.norm_weights, m.gating) == (16, 4, 256, True, "sigmoid")
    assert m.probs_bias and m.n_shared == 0 and m.weights_scale == 0.0
    for lw in model.layers:
        # over all of q (n_head * head_dim, not n_embd) and all of k (n_head_kv * head_dim)
        assert lw.q_norm is not None and lw.q_norm.shape == (512,)
        assert lw.k_norm is not None and lw.k_norm.shape == (128,)
        assert lw.moe is not None and lw.moe.probs_bias is not None and lw.moe.shared is None
        assert lw.w_gate is None and lw.wq is not None and lw.wq.b is None


def test_seed_oss_as_llama_cpp_reads_it(files: dict[tuple[str, str], Path],
                                        models: dict[tuple[str, str], DecoderModel]) -> None:
    model = models[("seed_oss", "F32")]
    assert isinstance(model, SeedOssModel)
    a = model.args
    assert (a.n_head, a.n_head_kv, a.head_dim, a.rope.n_dims, a.rope.neox, a.moe) == (8, 2, 64, 64, True, None)
    assert a.attn_scale == pytest.approx(64 ** -0.5)
    r = gguf.GGUFReader(str(files[("seed_oss", "F32")]))
    post = {t.name: np.asarray(t.data) for t in r.tensors if t.name.endswith("post_attention_norm.weight")}
    for il, lw in enumerate(model.layers):
        assert lw.q_norm is None and lw.post_attn_norm is None
        assert all(x is not None and x.b is not None for x in (lw.wq, lw.wk, lw.wv))
        assert lw.wo is not None and lw.wo.b is None
        np.testing.assert_array_equal(lw.ffn_norm, post[f"blk.{il}.post_attention_norm.weight"])  # the pre-FFN norm


def test_seed_oss_refuses_partial_rope(files: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    """llama.cpp asserts rope.dimension_count == head size for seed_oss: one line naming the key."""
    bad = rewrite_gguf(files[("seed_oss", "F32")], tmp_path / "rot.gguf",
                       set_values={"seed_oss.rope.dimension_count": (32, gguf.GGUFValueType.UINT32)})
    with pytest.raises(ModelLoadError, match="rope.dimension_count") as e:
        load_model(bad)
    assert str(bad) in str(e.value)


def test_seed_oss_files_without_a_template_chat_in_seed_turns() -> None:
    """Seed-OSS speaks one turn format (llama.cpp's built-in `seed_oss`); chatml would confuse it."""
    assert default_builtin({"general.architecture": "seed_oss"}) == "seed_oss"
    assert default_builtin({"general.architecture": "minimax-m2"}) == "chatml"  # llama.cpp has no built-in for it


def test_minimax_m2_needs_a_gating_function(files: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    """Without expert_gating_func llama.cpp's build_moe_ffn aborts: refused on load, naming the key."""
    bad = rewrite_gguf(files[("minimax-m2", "F32")], tmp_path / "nogate.gguf",
                       drop_keys=("minimax-m2.expert_gating_func",))
    with pytest.raises(ModelLoadError, match="expert_gating_func") as e:
        load_model(bad)
    assert str(bad) in str(e.value)


def test_tied_router_rows_put_ties_on_the_top_k_edge(models: dict[tuple[str, str], DecoderModel],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The Q8_0 file's pairs of experts share a router row (F32) and a selection bias: equal
    sigmoids plus equal biases, the sort order decides as in llama.cpp (whose logits this file
    matches to the bit), and the fixture prompt puts such ties on the top-k edge; the weights are
    the chosen sigmoids, without the bias, normalised to sum 1."""
    model = models[("minimax-m2", "Q8_0")]
    edges = 0
    real_route = moe.route

    def spy(probs, m, softmax, bias):  # type: ignore[no-untyped-def]
        nonlocal edges
        choice = probs + bias
        for a, b in DEEPSEEK2_TIED:
            np.testing.assert_array_equal(choice[:, a], choice[:, b])
        s = -np.sort(-choice, axis=1)
        edges += int(np.sum(s[:, m.n_expert_used - 1] == s[:, m.n_expert_used]))
        sel, w = real_route(probs, m, softmax, bias)
        chosen = np.take_along_axis(probs, sel, axis=1)
        np.testing.assert_allclose(w, chosen / chosen.sum(axis=1, keepdims=True), rtol=1e-6)
        return sel, w

    monkeypatch.setattr(moe, "route", spy)
    model.forward(Batch.single(fixture_tokens("minimax-m2"), all_logits=True), model.new_cache(1, 64))
    assert edges >= 2


@pytest.mark.parametrize("arch,variant", QUANTIZED)
def test_incremental_and_batched_decoding_equal_full_forward(models: dict[tuple[str, str], DecoderModel], arch: str,
                                                             variant: str) -> None:
    """A prompt in chunks, then token by token, and beside another sequence in one forward: the
    bits of one full forward."""
    assert_chunked_and_batched_equal_full(models[(arch, variant)], arch)


@pytest.mark.parametrize("arch,variant", QUANTIZED)
def test_compiled_step_gives_the_same_bits(models: dict[tuple[str, str], DecoderModel], arch: str, variant: str) -> None:
    """The one-token steps with the compiled decode step where the model takes one (seed_oss's
    dense layers; minimax-m2's sigmoid router keeps its steps on the operations): the bits of the
    step one operation at a time, logits and cache."""
    model = models[(arch, variant)]
    assert model.one_token_step_kind() == ("silu" if arch == "seed_oss" else None)
    assert_fused_step_same_bits(model, fixture_tokens(arch, 20))
