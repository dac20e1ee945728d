"""core/model/families/olmoe.py and qwen2moe.py: what each reads from the file, OLMoE's Q/K norms
over the whole projection, qwen2moe's gated shared expert, router ties, incremental and batched
decoding, and the compiled decode step (the logits and greedy runs against llama.cpp's are in
test_parity_tiny.py: tests/tiny_models.py OLMOE_MODELS, QWEN2MOE_MODELS)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.families import moe
from llamacli.core.model.families.base import DecoderModel
from llamacli.core.model.families.olmoe import OlmoeModel
from llamacli.core.model.families.qwen2moe import Qwen2MoeModel
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from tests.test_decode_step import assert_chunked_and_batched_equal_full, assert_fused_step_same_bits
from tests.tiny_models import DEEPSEEK2_TIED, OLMOE_MODELS, QWEN2MOE_MODELS, fixture_tokens, rewrite_gguf, write_tiny_model

QUANTIZED = [("olmoe", "Q4_K"), ("qwen2moe", "Q8_0")]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    d = tmp_path_factory.mktemp("olmoe")
    return {(a, v): write_tiny_model(a, v, d / f"{a}-{v}.gguf") for a, v in OLMOE_MODELS + QWEN2MOE_MODELS}


@pytest.fixture(scope="module")
def models(files: dict[tuple[str, str], Path]) -> dict[tuple[str, str], DecoderModel]:
    return {key: load_model(path, numerics="ggml")[0] for key, path in files.items()}


def test_olmoe_as_llama_cpp_reads_it(models: dict[tuple[str, str], DecoderModel]) -> None:
    model = models[("olmoe", "F32")]
    assert isinstance(model, OlmoeModel)
    a = model.args
    assert (a.n_head, a.n_head_kv, a.head_dim, a.rope.neox) == (4, 4, 64, True)
    assert a.moe is not None
    # experts of feed_forward_length rows (the file has no expert_feed_forward_length), not renormalised
    assert (a.moe.n_expert, a.moe.n_expert_used, a.moe.n_ff_exp, a.moe.norm_weights, a.moe.gating) == (16, 4, 256, False, "softmax")
    assert a.moe.n_shared == 0 and a.moe.weights_scale == 0.0
    for lw in model.layers:
        assert lw.q_norm is not None and lw.q_norm.shape == (256,)  # n_embd: over all of q, not per head
        assert lw.k_norm is not None and lw.k_norm.shape == (256,)
        assert lw.moe is not None and lw.moe.shared is None and lw.w_gate is None and lw.wq is not None and lw.wq.b is None


def test_qwen2moe_as_llama_cpp_reads_it(models: dict[tuple[str, str], DecoderModel]) -> None:
    model = models[("qwen2moe", "F32")]
    assert isinstance(model, Qwen2MoeModel)
    a = model.args
    assert (a.n_head, a.n_head_kv, a.head_dim, a.rope.neox) == (4, 2, 64, True)
    m = a.moe
    assert m is not None
    assert (m.n_expert, m.n_expert_used, m.n_ff_exp, m.norm_weights, m.gating) == (16, 4, 256, False, "softmax")
    assert (m.n_shared, m.n_ff_shared, m.shared_gate, m.shared_gate_silu) == (1, 512, True, True)
    for lw in model.layers:
        assert lw.q_norm is None and lw.wq is not None and lw.wq.b is not None and lw.wk.b is not None  # type: ignore[union-attr]
        assert lw.moe is not None and lw.moe.shared is not None and lw.moe.shared[0].n_out == 512
        assert lw.moe.shared_gate is not None and lw.moe.shared_gate.shape == (256,)


def test_qwen2moe_shared_gate_is_silu_over_its_logit(models: dict[tuple[str, str], DecoderModel]) -> None:
    """The shared expert's output times ggml_div(ggml_silu(x), x) of its gate logit x (llama.cpp's
    qwen2moe graph), not ggml_sigmoid (qwen35moe's): the same value to a few ulps, other bits."""
    model = models[("qwen2moe", "F32")]
    lw = model.layers[0]
    m = model.args.moe
    assert m is not None and lw.moe is not None and lw.moe.shared is not None and lw.moe.shared_gate is not None
    h = np.random.default_rng(5).standard_normal((6, 256)).astype(np.float32)
    pr = model.precision
    routed = moe.moe_ffn(pr, moe.MoEWeights(lw.moe.gate_inp, lw.moe.gate, lw.moe.up, lw.moe.down), h, m)
    shared = moe.gated_ffn(pr, h, *lw.moe.shared)
    x = (h * lw.moe.shared_gate).sum(axis=1, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(moe.moe_ffn(pr, lw.moe, h, m), routed + shared * (pr.silu(x) / x))
    sig = moe.sigmoid_rows(np.ascontiguousarray(x))
    np.testing.assert_allclose(pr.silu(x) / x, sig, rtol=1e-6)
    assert not np.array_equal(pr.silu(x) / x, sig)  # (these rows tell the two apart)


def test_olmoe_needs_as_many_kv_heads_as_heads(files: dict[tuple[str, str], Path], tmp_path: Path) -> None:
    """llama.cpp's K norm spans n_embd, so a GQA file cannot run (llama.cpp aborts in ggml_mul):
    refused with one line naming the keys."""
    bad = rewrite_gguf(files[("olmoe", "F32")], tmp_path / "gqa.gguf",
                       set_values={"olmoe.attention.head_count_kv": (2, gguf.GGUFValueType.UINT32)})
    with pytest.raises(ModelLoadError, match="head_count_kv") as e:
        load_model(bad)
    assert str(bad) in str(e.value)


@pytest.mark.parametrize("arch,variant", QUANTIZED)
def test_tied_router_rows_put_ties_on_the_top_k_edge(models: dict[tuple[str, str], DecoderModel], arch: str,
                                                      variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The quantized files' pairs of experts share a router row (F32): equal probabilities, the
    sort order decides as in llama.cpp (whose logits these files match), and the fixture prompt
    puts such ties on the top-k edge; without renormalisation the tied expert's weight is its
    probability as it is."""
    model = models[(arch, variant)]
    edges = 0
    real_route = moe.route

    def spy(probs, m, *rest):  # type: ignore[no-untyped-def]
        nonlocal edges
        for a, b in DEEPSEEK2_TIED:
            np.testing.assert_array_equal(probs[:, a], probs[:, b])
        s = -np.sort(-probs, axis=1)
        edges += int(np.sum(s[:, m.n_expert_used - 1] == s[:, m.n_expert_used]))
        sel, w = real_route(probs, m, *rest)
        np.testing.assert_array_equal(w, np.take_along_axis(probs, sel, axis=1))  # not renormalised
        return sel, w

    monkeypatch.setattr(moe, "route", spy)
    model.forward(Batch.single(fixture_tokens(arch), all_logits=True), model.new_cache(1, 64))
    assert edges >= 2


@pytest.mark.parametrize("arch,variant", QUANTIZED)
def test_incremental_and_batched_decoding_equal_full_forward(models: dict[tuple[str, str], DecoderModel], arch: str,
                                                             variant: str) -> None:
    """A prompt in chunks, then token by token (olmoe: through the compiled decode step), and
    beside another sequence in one forward: the bits of one full forward."""
    assert_chunked_and_batched_equal_full(models[(arch, variant)], arch)


@pytest.mark.parametrize("arch,variant", QUANTIZED)
def test_compiled_expert_step_gives_the_same_bits(models: dict[tuple[str, str], DecoderModel], arch: str,
                                                  variant: str) -> None:
    """olmoe's layers (Q/K norms over the whole projection, unnormalised weights) run in the
    compiled MoE decode step (core/model/kernels/qmm/experts.py) with the bits of the step through
    moe.py one operation at a time, logits and cache; qwen2moe (a gated shared expert) keeps the
    step through its operations."""
    model = models[(arch, variant)]
    assert model.one_token_step_kind() == ("moe" if arch == "olmoe" else None)
    assert_fused_step_same_bits(model, fixture_tokens(arch, 20))
