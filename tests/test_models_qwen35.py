"""core/model/families/qwen35.py (qwen35, qwen35moe, qwen3next), families/delta_net.py, families/hybrid.py and
kernels/delta_net.py: what the family reads from the file, the delta rule against a plain
reference, IMRoPE's pairs, incremental and batched decoding, and the recurrent state in the
engine (prompt reuse and context checkpoints, slot files, speculative rollback, no context
shift). The logits against llama.cpp's are in test_parity_tiny.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import gguf
import numpy as np
import pytest

from llamacli.core.errors import InvalidRequest, ModelLoadError
from llamacli.core.model.families.delta_net import DeltaNetWeights
from llamacli.core.model.families.moe import gated_ffn, moe_ffn
from llamacli.core.model.families.qwen35 import Qwen3NextModel, Qwen35Model, Qwen35MoeModel
from llamacli.core.model.kernels import ops as K
from llamacli.core.model.kernels.delta_net import gated_delta_net
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.recurrent import HybridCache
from llamacli.core.runtime.engine import Engine, EngineConfig
from llamacli.core.runtime.slot_store import restore_slot, save_slot
from llamacli.core.runtime.tasks import Task, TaskParams
from llamacli.core.sampling import SamplingParams
from llamacli.core.text.tokenizer import load_tokenizer
from tests.test_models_granitehybrid import greedy, logits_after_shift
from tests.test_speculative import PROMPTS as SPEC_PROMPTS
from tests.test_speculative import Oracle
from tests.test_speculative import _refs as spec_refs
from tests.test_speculative import _run as spec_run
from tests.tiny_models import fixture_tokens, load_error_without, rewrite_gguf, write_tiny_model

ARCH = "qwen35"
FIXTURES = Path(__file__).parent / "fixtures" / "tiny"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path = write_tiny_model(ARCH, "Q8_0", tmp_path_factory.mktemp("q35") / "q.gguf")
    model, g, _ = load_model(path, numerics="ggml")
    return model, load_tokenizer(g.metadata)


def test_hyperparameters_as_llama_cpp_reads_them(tmp_path: Path) -> None:
    model, _, _ = load_model(write_tiny_model(ARCH, "F32", tmp_path / "m.gguf"))
    assert isinstance(model, Qwen35Model)
    a = model.args
    assert model.recurrent == (True, True, True, False)  # full_attention_interval 4
    assert (a.n_head, a.n_head_kv, a.head_dim, a.rope.n_dims, a.rope.neox) == (4, 2, 64, 16, True)
    assert a.extra["rope_sections"] == (3, 3, 2, 0) and not model.can_shift
    m = model.delta_net
    assert (m.d_conv, m.d_inner, m.d_state, m.n_v_head, m.n_k_head, m.conv_dim) == (4, 256, 64, 4, 2, 512)
    mw = model.layers[0].mixer
    assert isinstance(mw, DeltaNetWeights) and model.layers[0].wq is None
    assert mw.conv_w.shape == (512, 4) and mw.A.shape == (4,) and (mw.A < 0).all() and mw.norm.shape == (64,)
    lw = model.layers[3]
    assert lw.mixer is None and lw.wq is not None and lw.wq.n_out == 2 * 4 * 64  # query and gate per head
    assert model.kernel_kinds() == ["ssm"]
    cache = model.new_cache(2, 32)
    assert isinstance(cache, HybridCache) and cache.ssm[0].shape == (2, 4, 64, 64) and cache.conv[0].shape == (2, 512, 3)


def test_recurrent_layers_key_interval_and_nextn_layers(tmp_path: Path) -> None:
    """`full_attention_interval` places the attention layers, `attention.recurrent_layers` (when
    present) overrides it; nextn layers at the end of block_count are not run."""
    src = write_tiny_model(ARCH, "F32", tmp_path / "m.gguf")
    every2 = {f"{ARCH}.full_attention_interval": (2, gguf.GGUFValueType.UINT32)}
    with pytest.raises(ModelLoadError, match="blk.1.attn_q"):  # layer 1 would be attention
        load_model(rewrite_gguf(src, tmp_path / "i.gguf", set_values=every2))
    flags = {**every2, f"{ARCH}.attention.recurrent_layers": ([True, True, True, False], gguf.GGUFValueType.ARRAY)}
    model, _, _ = load_model(rewrite_gguf(src, tmp_path / "r.gguf", set_values=flags))
    assert model.recurrent == (True, True, True, False)
    nextn = {f"{ARCH}.nextn_predict_layers": (1, gguf.GGUFValueType.UINT32)}
    model, _, _ = load_model(rewrite_gguf(src, tmp_path / "n.gguf", set_values=nextn))
    assert model.args.n_layer == 3 and model.recurrent == (True, True, True)


@pytest.mark.parametrize("key", [f"{ARCH}.ssm.state_size", f"{ARCH}.ssm.group_count",
                                 f"{ARCH}.rope.dimension_sections"])
def test_missing_keys_name_the_file_and_key(tmp_path: Path, key: str) -> None:
    src = write_tiny_model(ARCH, "F32", tmp_path / "m.gguf")
    bad, err = load_error_without(src, key, tmp_path)
    assert str(bad) in err and key in err


def test_inconsistent_delta_net_sizes_and_missing_tensors_are_clear_errors(tmp_path: Path) -> None:
    src = write_tiny_model(ARCH, "F32", tmp_path / "m.gguf")
    heads = {f"{ARCH}.ssm.time_step_rank": (3, gguf.GGUFValueType.UINT32)}  # 3 x 64 != inner_size 256
    with pytest.raises(ModelLoadError, match="time_step_rank"):
        load_model(rewrite_gguf(src, tmp_path / "h.gguf", set_values=heads))
    with pytest.raises(ModelLoadError, match="blk.1.ssm_alpha"):
        load_model(rewrite_gguf(src, tmp_path / "a.gguf", drop="blk.1.ssm_alpha.weight"))


@pytest.mark.parametrize("grouped", [False, True])
def test_delta_rule_against_a_float64_reference(grouped: bool) -> None:
    """Two sequences interleaved, 4 value heads over 2 key heads (value head h reads key head
    h % 2, as ggml broadcasts; grouped, Qwen3-Next: h // 2), a decay and beta per token and head."""
    rng = np.random.default_rng(7)
    T, Hk, Hv, S = 9, 2, 4, 8
    q = rng.standard_normal((T, Hk, S)).astype(np.float32)
    k = rng.standard_normal((T, Hk, S)).astype(np.float32)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((T, Hv, S)).astype(np.float32)
    g = -rng.uniform(0.0, 2.0, (T, Hv)).astype(np.float32)
    beta = rng.uniform(0.0, 1.0, (T, Hv)).astype(np.float32)
    seq = np.array([0, 1, 0, 0, 1, 1, 0, 1, 0])
    s0 = rng.standard_normal((2, Hv, S, S)).astype(np.float32)
    st = s0.copy()
    out = gated_delta_net(q, k, v, g, beta, seq, st, grouped)
    ref = s0.astype(np.float64).transpose(0, 1, 3, 2)  # S[i][j]: key i, value j
    for t in range(T):
        s = seq[t]
        for h in range(Hv):
            hk = h // (Hv // Hk) if grouped else h % Hk
            kk, qq = k[t, hk].astype(np.float64), q[t, hk].astype(np.float64)
            M = ref[s, h] * np.exp(float(g[t, h]))
            d = (v[t, h] - kk @ M) * beta[t, h]
            M = M + np.outer(kk, d)
            ref[s, h] = M
            np.testing.assert_allclose(out[t, h], qq @ M / np.sqrt(S), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(st, ref.transpose(0, 1, 3, 2), rtol=1e-4, atol=1e-4)


def test_imrope_pairs_as_ggml_assigns_them() -> None:
    """GGML_ROPE_TYPE_IMROPE: pair i by sector r = i % sum(sections): h where r % 3 == 1 and
    r < 3 s1, w where r % 3 == 2 and r < 3 s2, t where r % 3 == 0 and r < 3 s0, else e."""
    cfg = K.RopeConfig(32, 10000.0, 1.0, True, None)
    pos4 = np.array([[5, 7, 11, 13], [0, 1, 2, 3]])
    cos, sin = K.mrope_cos_sin(pos4, cfg, (3, 2, 3, 0), interleaved=True)
    want = [0, 1, 2, 0, 1, 2, 0, 3]  # sector 6: t (6 < 9), sector 7: 7 % 3 = 1 but 7 >= 6: e
    for i in range(16):
        c, s = K.rope_cos_sin(pos4[:, want[i % 8]], cfg)
        np.testing.assert_array_equal(cos[:, i], c[:, i])
        np.testing.assert_array_equal(sin[:, i], s[:, i])


def test_experts_as_qwen3_5_moe(tmp_path: Path) -> None:
    """qwen35moe: experts in every layer, recurrent or not, softmax router, weights normalised,
    no scale; the shared expert's output times sigmoid(h . ffn_gate_inp_shexp)."""
    model, _, _ = load_model(write_tiny_model("qwen35moe", "F32", tmp_path / "m.gguf"))
    assert isinstance(model, Qwen35MoeModel) and model.recurrent == (True, True, True, False)
    m = model.args.moe
    assert m is not None and (m.n_expert, m.n_expert_used, m.n_ff_exp, m.gating, m.norm_weights) == (8, 2, 256, "softmax", True)
    assert m.weights_scale == 0.0 and m.shared_gate
    for lw in model.layers:
        assert lw.moe is not None and lw.moe.shared is not None and lw.moe.shared_gate is not None and lw.w_gate is None
        assert lw.moe.shared[0].n_out == 512
    mw = model.layers[0].moe
    h = np.random.default_rng(3).standard_normal((5, 256)).astype(np.float32)
    full = moe_ffn(model.precision, mw, h, m)
    shared = gated_ffn(model.precision, h, *mw.shared) * (1 / (1 + np.exp(-(h @ mw.shared_gate))))[:, None]
    routed = moe_ffn(model.precision, replace(mw, shared=None, shared_gate=None), h, m)
    np.testing.assert_allclose(full, routed + shared, rtol=1e-5, atol=1e-5)


def test_qwen3_next_layout(tmp_path: Path) -> None:
    """qwen3next: NeoX rope without sections (its cache shifts), value heads grouped by key
    head, beta and alpha in ssm_ba; the first converter's fused ssm_in (F32) or attn_qkv and
    attn_gate (Q8_0)."""
    for variant, fused in (("F32", True), ("Q8_0", False)):
        model, _, _ = load_model(write_tiny_model("qwen3next", variant, tmp_path / f"{variant}.gguf"))
        assert isinstance(model, Qwen3NextModel) and model.can_shift and "rope_sections" not in model.args.extra
        assert model.delta_net.grouped and model.args.moe is not None and model.args.moe.shared_gate
        mw = model.layers[0].mixer
        assert isinstance(mw, DeltaNetWeights) and mw.ba is not None and mw.beta is None and mw.alpha is None
        assert (mw.qkvz is not None, mw.qkv is None, mw.gate is None) == (fused, fused, fused)


def test_qwen3_next_context_shift_gives_llama_cpps_logits(tmp_path: Path) -> None:
    """llama-server's shift on qwen3next's memory (scripts/oracle_fixtures.py make_hybrid_shift):
    the attention cells after n_keep + n_discard move down and rotate back, the delta-net states
    stay; the next decodes give llama.cpp's logits. Clearing the states instead would not."""
    z = np.load(FIXTURES / "qwen3next-F32-shift.npz")
    model, _, _ = load_model(write_tiny_model("qwen3next", "F32", tmp_path / "m.gguf"), numerics="ggml")
    assert np.abs(logits_after_shift(model, z, False) - z["logits"]).max() < 0.01
    assert np.abs(logits_after_shift(model, z, True) - z["logits"]).max() > 0.1


@pytest.mark.parametrize("arch,variant", [(ARCH, "F32"), (ARCH, "Q8_0"), ("qwen35moe", "Q8_0"), ("qwen3next", "F32"),
                                          ("qwen3next", "Q8_0")])
def test_incremental_and_batched_decoding_equal_full_forward(tmp_path: Path, arch: str, variant: str) -> None:
    """ggml numerics: a prompt in chunks, then token by token, and beside another sequence in one
    forward (the two interleaved), gives the bits of one full forward."""
    model, _, _ = load_model(write_tiny_model(arch, variant, tmp_path / "m.gguf"), numerics="ggml")
    toks = fixture_tokens(ARCH, 20)
    full = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 64))
    cache = model.new_cache(2, 64)
    edges = [0, 7, 12, *range(13, 21)]
    parts = [model.forward(Batch.single(toks[a:b], start_pos=a, all_logits=True), cache) for a, b in zip(edges, edges[1:])]
    np.testing.assert_array_equal(np.concatenate(parts), full)
    other = fixture_tokens(ARCH, 25)[5:]
    alone = model.forward(Batch.single(other, all_logits=True), model.new_cache(1, 64))
    order = np.argsort(np.r_[np.arange(20), np.arange(20)], kind="stable")
    seq = np.array([0] * 20 + [1] * 20)[order]
    batch = Batch(tokens=np.array(toks + other)[order], seq_ids=seq, positions=np.r_[np.arange(20), np.arange(20)][order],
                  output=np.ones(40, dtype=bool))
    both = model.forward(batch, model.new_cache(2, 64))
    np.testing.assert_array_equal(both[seq == 0], full)
    np.testing.assert_array_equal(both[seq == 1], alone)


def test_slot_file_round_trip_carries_the_recurrent_state(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model, _ = tiny
    toks = fixture_tokens(ARCH, 16)
    cache = model.new_cache(2, 64)
    model.forward(Batch.single(toks[:12]), cache)
    save_slot(cache, 0, toks[:12], str(tmp_path / "s.bin"))
    want = model.forward(Batch.single(toks[12:], start_pos=12, all_logits=True), cache)
    restored, _ = restore_slot(cache, 1, str(tmp_path / "s.bin"))
    assert restored == toks[:12] and cache.lengths[1] == 12
    got = model.forward(Batch(toks[12:], [1] * 4, np.arange(12, 16), output=np.ones(4, dtype=bool)), cache)
    np.testing.assert_array_equal(got, want)


def test_checkpoints_taken_inside_a_chunk_restore_the_state(tiny) -> None:  # type: ignore[no-untyped-def]
    model, _ = tiny
    toks = fixture_tokens(ARCH, 20)
    cache = model.new_cache(1, 64)
    cache.plan_checkpoints(0, 20, 0, 512)
    first = model.forward(Batch.single(toks[:18], all_logits=True), cache)
    last = model.forward(Batch.single(toks[18:], start_pos=18, all_logits=True), cache)
    assert [c.n_tokens for c in cache.checkpoints[0]] == [16]
    cache.truncate(0, 16)
    again = model.forward(Batch.single(toks[16:], start_pos=16, all_logits=True), cache)
    np.testing.assert_array_equal(again, np.concatenate([first[16:], last]))


def test_engine_reuses_a_whole_sequence_or_a_checkpoint(tiny) -> None:  # type: ignore[no-untyped-def]
    """As llama-server on a recurrent model: the whole cached sequence, else the newest context
    checkpoint within the shared prefix, else nothing; the tokens are a cold run's."""
    model, tok = tiny
    prompt = fixture_tokens(ARCH, 16)
    with Engine(model, tok, EngineConfig(n_ctx=128, n_parallel=1)) as eng:
        a = eng.run(Task(prompt, greedy(4)))
        b = eng.run(Task(prompt, greedy(4)))
        c = eng.run(Task(prompt + a.tokens + [7, 8], greedy(4)))
        d = eng.run(Task(prompt[:14] + [9, 9], greedy(4)))
        cold = [eng.run(Task(p, greedy(4, cache_prompt=False))).tokens for p in (prompt + a.tokens + [7, 8], prompt[:14] + [9, 9])]
    assert (a.tokens_cached, b.tokens_cached, c.tokens_cached, d.tokens_cached) == (0, 12, 19, 12)
    assert a.tokens == b.tokens and [c.tokens, d.tokens] == cold


def test_no_context_shift_a_full_sequence_ends(tiny) -> None:  # type: ignore[no-untyped-def]
    """IMRoPE: llama-server turns the shift off (get_can_shift false); a generation stops at the
    context's end even when the shift is asked for."""
    model, tok = tiny
    with pytest.raises(InvalidRequest, match="context shift"):
        model.shift_cache(model.new_cache(1, 32), 0, 4, 4)
    with Engine(model, tok, EngineConfig(n_ctx=40, n_parallel=1, context_shift=True)) as eng:
        f = eng.run(Task(fixture_tokens(ARCH, 20), greedy(40, n_keep=4)))
    assert len(f.tokens) < 40


def test_qwen3_next_engine_context_shift_runs_past_the_context(tmp_path: Path) -> None:
    model, g, _ = load_model(write_tiny_model("qwen3next", "Q8_0", tmp_path / "n.gguf"), numerics="ggml")
    with Engine(model, load_tokenizer(g.metadata), EngineConfig(n_ctx=40, n_parallel=1, context_shift=True)) as eng:
        f = eng.run(Task(fixture_tokens(ARCH, 20), greedy(40, n_keep=4)))
    assert f.truncated and len(f.tokens) == 40


@pytest.mark.parametrize("good,k", [(2, 5), (0, 3)])
def test_speculative_decoding_rolls_the_state_back_to_the_accepted_tokens(tiny, good: int, k: int) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    params = TaskParams(n_predict=30, ignore_eos=True, sampling=SamplingParams(temperature=0.0))
    plain, _ = spec_run(model, tok, SPEC_PROMPTS, params, n_parallel=2)
    spec, eng = spec_run(model, tok, SPEC_PROMPTS, params, drafter=Oracle(spec_refs(plain), good, k, tok.n_vocab),
                         n_parallel=2)
    assert [f.tokens for f in spec] == [f.tokens for f in plain]
    assert all(f.timings.draft_n_accepted > 0 for f in spec) == (good > 0)
    for s in eng.slots:
        assert int(eng.cache.lengths[s.id]) == len(s.cached) and not eng.cache.rollback[s.id]
