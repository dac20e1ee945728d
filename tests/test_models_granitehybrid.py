"""core/model/families/granitehybrid.py, families/mamba2.py, kernels/ssm.py and
state/recurrent.py: what the family reads from the file, the Mamba-2 kernels against a plain
reference, incremental and batched decoding, and the recurrent state in the engine (prompt
reuse and context checkpoints, context shift, slot files, speculative rollback). The logits
against llama.cpp's are in test_parity_tiny.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from llamacli.core.errors import InvalidRequest, ModelLoadError
from llamacli.core.model.families.granitehybrid import GraniteHybridModel
from llamacli.core.model.kernels.ssm import ssm_conv, ssm_scan
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.state.recurrent import HybridCache
from llamacli.core.runtime.engine import Engine, EngineConfig
from llamacli.core.runtime.slot_store import SlotFileError, restore_slot, save_slot
from llamacli.core.runtime.tasks import Final, Task, TaskParams
from llamacli.core.sampling import SamplingParams
from llamacli.core.speculative.config import SpecConfig
from llamacli.core.text.chat_templates.detect import default_builtin
from llamacli.core.text.tokenizer import load_tokenizer
from tests.test_speculative import PROMPTS as SPEC_PROMPTS
from tests.test_speculative import Oracle
from tests.test_speculative import _refs as spec_refs
from tests.test_speculative import _run as spec_run
from tests.tiny_models import fixture_tokens, load_error_without, rewrite_gguf, write_tiny_model

ARCH = "granitehybrid"
FIXTURES = Path(__file__).parent / "fixtures" / "tiny"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path = write_tiny_model(ARCH, "Q8_0", tmp_path_factory.mktemp("gh") / "g.gguf")
    model, g, _ = load_model(path, numerics="ggml")
    return model, load_tokenizer(g.metadata)


def greedy(n: int, **kw) -> TaskParams:  # type: ignore[no-untyped-def]
    return TaskParams(n_predict=n, ignore_eos=True, sampling=SamplingParams(temperature=0.0), **kw)


def test_hyperparameters_as_llama_cpp_reads_them(tmp_path: Path) -> None:
    model, _, _ = load_model(write_tiny_model(ARCH, "F32", tmp_path / "m.gguf"))
    assert isinstance(model, GraniteHybridModel)
    a = model.args
    assert model.recurrent == (True, True, False, True)  # head_count_kv 0: a Mamba-2 layer
    assert (a.n_head, a.n_head_kv, a.head_dim) == (4, 2, 64)
    assert a.embed_scale == 12.0 and a.attn_scale == 0.0078125
    assert a.residual_scale == pytest.approx(0.22) and a.logit_scale == 2.0
    assert a.rope.scale == 0.0  # rope.scaling.finetuned false: no rotation
    m = model.ssm
    assert (m.d_conv, m.d_inner, m.d_state, m.n_head, m.n_group, m.head_dim) == (4, 512, 64, 8, 1, 64)
    assert model.layers[2].mixer is None and model.layers[2].wq is not None
    mw = model.layers[0].mixer
    assert mw is not None and model.layers[0].wq is None
    assert mw.conv_w.shape == (512 + 2 * 64, 4) and mw.A.shape == (8,) and (mw.A < 0).all()
    assert model.kernel_kinds() == ["ssm"]  # no compiled one-token step; the warmup compiles the Mamba-2 kernels
    rope, _, _ = load_model(write_tiny_model(ARCH, "F32_ROPE", tmp_path / "r.gguf"))
    assert rope.args.rope.scale == 1.0 and not rope.args.rope.neox


def test_files_without_a_template_get_granite_4_turns() -> None:
    assert default_builtin({"general.architecture": ARCH}) == "granite-4.0"


@pytest.mark.parametrize("key", [f"{ARCH}.ssm.state_size", f"{ARCH}.ssm.conv_kernel", f"{ARCH}.ssm.group_count"])
def test_missing_ssm_keys_name_the_file_and_key(tmp_path: Path, key: str) -> None:
    src = write_tiny_model(ARCH, "F32", tmp_path / "m.gguf")
    bad, err = load_error_without(src, key, tmp_path)
    assert str(bad) in err and key in err


def test_missing_mamba_tensor_is_one_clear_error(tmp_path: Path) -> None:
    src = write_tiny_model(ARCH, "F32", tmp_path / "m.gguf")
    with pytest.raises(ModelLoadError, match="blk.1.ssm_d"):
        load_model(rewrite_gguf(src, tmp_path / "d.gguf", drop="blk.1.ssm_d"))
    ssm_heads = {f"{ARCH}.ssm.time_step_rank": (7, gguf.GGUFValueType.UINT32)}  # 512 is no multiple of 7
    with pytest.raises(ModelLoadError, match="time_step_rank"):
        load_model(rewrite_gguf(src, tmp_path / "h.gguf", set_values=ssm_heads))


def test_experts_as_granite_4_h_tiny(tmp_path: Path) -> None:
    """expert_count > 0: experts in every layer, recurrent or not, with the shared FFN of
    expert_shared_feed_forward_length rows; softmax router, weights normalised."""
    model, _, _ = load_model(write_tiny_model(ARCH, "F32_MOE", tmp_path / "m.gguf"))
    m = model.args.moe
    assert m is not None and (m.n_expert, m.n_expert_used, m.n_ff_exp, m.gating, m.norm_weights) == (8, 2, 256, "softmax", True)
    assert m.weights_scale == 0.0  # llama.cpp reads no expert_weights_scale for this family
    for lw in model.layers:
        assert lw.moe is not None and lw.moe.shared is not None and lw.w_gate is None
        assert lw.moe.shared[0].n_out == 512


def _final(task: Task) -> Final:
    return [r for r in task.results if isinstance(r, Final)][0]


def _reference_conv(x: np.ndarray, w: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 causal conv over one sequence: each output the window (state, x) . w; the new state."""
    W = w.shape[1]
    win = np.concatenate([state.astype(np.float64), x.T.astype(np.float64)], axis=1)  # (C, W-1+T)
    conv = np.stack([(win[:, t:t + W] * w).sum(axis=1) for t in range(x.shape[0])])  # (T, C)
    return conv, win[:, -(W - 1):]


def test_ssm_kernels_against_a_float64_reference() -> None:
    rng = np.random.default_rng(5)
    T, C, W, H, P, G, N = 7, 24, 4, 4, 3, 2, 8
    x = rng.standard_normal((T, C)).astype(np.float32)
    w = rng.standard_normal((C, W)).astype(np.float32)
    st0 = rng.standard_normal((1, C, W - 1)).astype(np.float32)
    st = st0.copy()
    out = ssm_conv(x, np.zeros(T, dtype=np.int64), w, st)
    ref, ref_state = _reference_conv(x, w, st0[0])
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(st[0], ref_state.astype(np.float32))

    xs = rng.standard_normal((T, H, P)).astype(np.float32)
    dt = np.concatenate([rng.standard_normal((T - 1, H)), np.full((1, H), 25.0)]).astype(np.float32)  # > 20: dt itself
    A = -rng.uniform(1, 4, H).astype(np.float32)
    B = rng.standard_normal((T, G, N)).astype(np.float32)
    Cm = rng.standard_normal((T, G, N)).astype(np.float32)
    s0 = rng.standard_normal((1, H, P, N)).astype(np.float32)
    s = s0.copy()
    y = ssm_scan(xs, dt, A, B, Cm, np.zeros(T, dtype=np.int64), s)
    state = s0[0].astype(np.float64)
    for t in range(T):
        d = dt[t].astype(np.float64)
        sp = np.where(d > 20, d, np.log1p(np.exp(d)))
        g = np.arange(H) // (H // G)
        state = state * np.exp(sp * A)[:, None, None] + (xs[t] * sp[:, None])[:, :, None] * B[t][g][:, None, :]
        np.testing.assert_allclose(y[t], (state * Cm[t][g][:, None, :]).sum(-1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(s[0], state, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant", ["F32", "Q8_0", "F32_MOE"])
def test_incremental_and_batched_decoding_equal_full_forward(tmp_path: Path, variant: str) -> None:
    """ggml numerics: a prompt in chunks, then token by token, and beside another sequence in one
    forward (the two interleaved), gives the bits of one full forward: the scan runs once over
    the batch, each token advancing its own sequence's state."""
    model, _, _ = load_model(write_tiny_model(ARCH, variant, tmp_path / "m.gguf"), numerics="ggml")
    check_incremental_and_batched(model, ARCH)


def check_incremental_and_batched(model: Any, arch: str) -> None:
    """A prompt in chunks then token by token, and beside another sequence in one forward,
    gives the bits of one full forward (each hybrid family's test)."""
    toks = fixture_tokens(arch, 20)
    full = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 64))
    cache = model.new_cache(2, 64)
    edges = [0, 7, 12, *range(13, 21)]  # two chunks, then one token at a time
    parts = [model.forward(Batch.single(toks[a:b], start_pos=a, all_logits=True), cache) for a, b in zip(edges, edges[1:])]
    np.testing.assert_array_equal(np.concatenate(parts), full)
    other = fixture_tokens(arch, 25)[5:]
    alone = model.forward(Batch.single(other, all_logits=True), model.new_cache(1, 64))
    order = np.argsort(np.r_[np.arange(20), np.arange(20)], kind="stable")  # interleaved: a0 b0 a1 b1 ...
    seq = np.array([0] * 20 + [1] * 20)[order]
    batch = Batch(tokens=np.array(toks + other)[order], seq_ids=seq, positions=np.r_[np.arange(20), np.arange(20)][order],
                  output=np.ones(40, dtype=bool))
    both = model.forward(batch, model.new_cache(2, 64))
    np.testing.assert_array_equal(both[seq == 0], full)
    np.testing.assert_array_equal(both[seq == 1], alone)


def test_a_batch_that_skips_or_repeats_positions_is_refused(tiny) -> None:  # type: ignore[no-untyped-def]
    model, _ = tiny
    cache = model.new_cache(1, 64)
    model.forward(Batch.single([5, 6, 7]), cache)
    for start in (2, 4):
        with pytest.raises(ValueError, match="continue each sequence"):
            model.forward(Batch.single([8], start_pos=start), cache)


def test_cache_keeps_a_prefix_whole_or_nothing(tiny) -> None:  # type: ignore[no-untyped-def]
    model, _ = tiny
    cache = model.new_cache(2, 64)
    assert isinstance(cache, HybridCache) and not cache.can_roll_back
    model.forward(Batch.single(fixture_tokens(ARCH, 10)), cache)
    assert cache.reusable(0, 10) == 10 and cache.reusable(0, 9) == 0
    with pytest.raises(ValueError, match="cannot go back"):
        cache.truncate(0, 5)
    cache.truncate(0, 10)  # no change
    assert cache.conv[0][0].any()
    cache.truncate(0, 0)
    assert cache.lengths[0] == 0 and not cache.conv[0][0].any() and not cache.ssm[0][0].any()


def test_slot_file_round_trip_carries_the_recurrent_state(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    check_slot_round_trip(tiny[0], ARCH, tmp_path)


def check_slot_round_trip(model: Any, arch: str, tmp_path: Path) -> None:
    """Sequence 0 saved to a slot file and restored into sequence 1 continues as it would have;
    a file without recurrent states is refused (each hybrid family's test)."""
    toks = fixture_tokens(arch, 16)
    cache = model.new_cache(2, 64)
    model.forward(Batch.single(toks[:12]), cache)
    res = save_slot(cache, 0, toks[:12], str(tmp_path / "s.bin"))
    assert res.n_tokens == 12
    want = model.forward(Batch.single(toks[12:], start_pos=12, all_logits=True), cache)
    restored, _ = restore_slot(cache, 1, str(tmp_path / "s.bin"))
    assert restored == toks[:12] and cache.lengths[1] == 12
    got = model.forward(Batch(toks[12:], [1] * 4, np.arange(12, 16), output=np.ones(4, dtype=bool)), cache)
    np.testing.assert_array_equal(got, want)
    plain = write_tiny_model("llama", "F32", tmp_path / "l.gguf")  # a file without the states
    other, _, _ = load_model(plain)
    c2 = other.new_cache(1, 64)
    other.forward(Batch.single([1, 2, 3]), c2)
    save_slot(c2, 0, [1, 2, 3], str(tmp_path / "kv.bin"))
    with pytest.raises(SlotFileError):
        restore_slot(cache, 1, str(tmp_path / "kv.bin"))


def test_checkpoints_taken_inside_a_chunk_restore_the_state(tiny) -> None:  # type: ignore[no-untyped-def]
    """A checkpoint 4 tokens before the prompt's end, taken inside a chunk (the mixer splits
    the chunk there): going back to it and evaluating the rest gives the same logits."""
    model, _ = tiny
    toks = fixture_tokens(ARCH, 20)
    cache = model.new_cache(1, 64)
    cache.plan_checkpoints(0, 20, 0, 512)
    assert cache.pending[0] == [16]
    first = model.forward(Batch.single(toks[:18], all_logits=True), cache)
    last = model.forward(Batch.single(toks[18:], start_pos=18, all_logits=True), cache)
    assert [c.n_tokens for c in cache.checkpoints[0]] == [16] and cache.pending[0] == []
    assert cache.reusable(0, 18) == 16 and cache.reusable(0, 15) == 0
    cache.truncate(0, 16)
    again = model.forward(Batch.single(toks[16:], start_pos=16, all_logits=True), cache)
    np.testing.assert_array_equal(again, np.concatenate([first[16:], last]))
    with pytest.raises(ValueError, match="no checkpoint"):
        cache.truncate(0, 17)


def test_engine_reuses_a_whole_sequence_or_a_checkpoint(tiny) -> None:  # type: ignore[no-untyped-def]
    """As llama-server: a prompt that continues the whole cached sequence reuses it; one that
    shares only part of it goes back to the newest context checkpoint within that part (taken
    4 tokens before a prompt's end, or where a reused prefix ended), else starts over; the
    tokens are the same either way. With --ctx-checkpoints 0 only whole sequences are kept."""
    model, tok = tiny
    prompt = fixture_tokens(ARCH, 16)
    with Engine(model, tok, EngineConfig(n_ctx=128, n_parallel=1)) as eng:
        a = eng.run(Task(prompt, greedy(4)))
        b = eng.run(Task(prompt, greedy(4)))  # its last token again: back to the checkpoint at 12
        c = eng.run(Task(prompt + a.tokens + [7, 8], greedy(4)))
        d = eng.run(Task(prompt[:14] + [9, 9], greedy(4)))
        e = eng.run(Task(prompt[:10] + [9, 9, 9], greedy(4)))
        cold = [eng.run(Task(p, greedy(4, cache_prompt=False))).tokens for p in (prompt + a.tokens + [7, 8], prompt[:14] + [9, 9])]
    assert (a.tokens_cached, b.tokens_cached, c.tokens_cached, d.tokens_cached, e.tokens_cached) == (0, 12, 19, 12, 0)
    assert a.tokens == b.tokens and [c.tokens, d.tokens] == cold
    with Engine(model, tok, EngineConfig(n_ctx=128, n_parallel=1, ctx_checkpoints=0)) as eng:
        eng.run(Task(prompt, greedy(4)))
        assert eng.run(Task(prompt, greedy(4))).tokens_cached == 0
        assert eng.run(Task(prompt + a.tokens + [7, 8], greedy(4))).tokens_cached == 19


def test_engine_batches_two_slots_as_each_alone(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    prompts = [fixture_tokens(ARCH, 12), fixture_tokens(ARCH, 30)[12:]]
    with Engine(model, tok, EngineConfig(n_ctx=256, n_parallel=2)) as eng:
        tasks = [eng.submit(Task(p, greedy(10, cache_prompt=False))) for p in prompts]
        together = [_final(t).tokens for t in tasks]
        alone = [eng.run(Task(p, greedy(10, cache_prompt=False))).tokens for p in prompts]
    assert together == alone


def test_context_shift_gives_llama_cpps_logits(tmp_path: Path) -> None:
    """llama-server's shift on a hybrid memory (scripts/oracle_fixtures.py make_hybrid_shift):
    the attention cells after n_keep + n_discard move down and rotate back, the Mamba states stay
    as they are (they still carry the dropped tokens); the next decodes give llama.cpp's logits.
    Clearing the states instead would not."""
    z = np.load(FIXTURES / f"{ARCH}-F32_ROPE-shift.npz")
    model, _, _ = load_model(write_tiny_model(ARCH, "F32_ROPE", tmp_path / "m.gguf"), numerics="ggml")
    assert np.abs(logits_after_shift(model, z, False) - z["logits"]).max() < 0.01
    assert np.abs(logits_after_shift(model, z, True) - z["logits"]).max() > 0.1


def logits_after_shift(model: Any, z: Any, clear_states: bool) -> np.ndarray:
    """A shift fixture's run (scripts/oracle_fixtures.py make_hybrid_shift) on our side: its
    prompt, the shift (which leaves the recurrent states as they are), then its single-token
    decodes; clear_states: the states zeroed after the shift instead."""
    toks, k, d = z["tokens"].tolist(), int(z["n_keep"]), int(z["n_discard"])
    n = len(toks) - z["logits"].shape[0]
    cache = model.new_cache(1, 128)
    model.forward(Batch.single(toks[:n]), cache)
    ssm = {il: st.copy() for il, st in cache.ssm.items()}
    model.shift_cache(cache, 0, k, d)
    assert cache.lengths[0] == n - d and all(np.array_equal(cache.ssm[il], ssm[il]) for il in ssm)
    for st in (*cache.conv.values(), *cache.ssm.values()):
        st *= 0.0 if clear_states else 1.0
    return np.stack([model.forward(Batch.single([t], start_pos=n - d + i), cache)[-1] for i, t in enumerate(toks[n:])])


def check_server_prompt_reuse(model: Any, tok: Any, arch: str) -> None:
    """The /completion requests llama-server answered on the family's tiny Q8_0 file
    (tests/fixtures/tiny/<arch>-Q8_0-server.json, scripts/oracle_fixtures.py --hybrid-server),
    replayed on one slot of the engine: the prompt tokens reused (the same prompt again and a part
    of it: back to the context checkpoint; a continuation: the whole state; a short other prompt:
    nothing) and the tokens are llama-server's (each hybrid family's test)."""
    steps = json.loads((FIXTURES / f"{arch}-Q8_0-server.json").read_text())["steps"]
    assert [st["cache_n"] for st in steps] == [0, 33, 42, 33, 0]
    params = TaskParams(n_predict=6, sampling=SamplingParams(temperature=0.0))
    with Engine(model, tok, EngineConfig(n_ctx=512, n_parallel=1)) as eng:
        for st in steps:
            f = eng.run(Task(st["prompt"], params))
            assert (f.tokens_cached, f.tokens) == (st["cache_n"], st["tokens"])  # the end token too, as llama-server's


def test_engine_context_shift_runs_past_the_context(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    with Engine(model, tok, EngineConfig(n_ctx=40, n_parallel=1, context_shift=True)) as eng:
        f = eng.run(Task(fixture_tokens(ARCH, 20), greedy(40, n_keep=4)))
    assert f.truncated and len(f.tokens) == 40


@pytest.mark.parametrize("good,k", [(2, 5), (0, 3), (6, 6)])
def test_speculative_decoding_rolls_the_state_back_to_the_accepted_tokens(tiny, good: int, k: int) -> None:  # type: ignore[no-untyped-def]
    """Drafts of k tokens, the first `good` right: each verification keeps the states after its
    accepted tokens (the step's rollback copies); the output is plain decoding's, and two slots
    drafting together give each its own."""
    check_speculative_rollback(*tiny, good, k)


def check_speculative_rollback(model: Any, tok: Any, good: int, k: int) -> None:
    """Drafting with `good` of k tokens right gives plain decoding's tokens, each slot's cache
    its own length afterwards (each hybrid family's test)."""
    params = TaskParams(n_predict=30, ignore_eos=True, sampling=SamplingParams(temperature=0.0))
    plain, _ = spec_run(model, tok, SPEC_PROMPTS, params, n_parallel=2)
    spec, eng = spec_run(model, tok, SPEC_PROMPTS, params, drafter=Oracle(spec_refs(plain), good, k, tok.n_vocab),
                         n_parallel=2)
    assert [f.tokens for f in spec] == [f.tokens for f in plain]
    assert all(f.timings.draft_n > 0 for f in spec)
    assert all(f.timings.draft_n_accepted > 0 for f in spec) == (good > 0)
    for s in eng.slots:
        assert int(eng.cache.lengths[s.id]) == len(s.cached) and not eng.cache.rollback[s.id]


def test_a_recurrent_draft_model_is_refused(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    with pytest.raises(InvalidRequest, match="draft model"):
        Engine(model, tok, EngineConfig(n_ctx=64, speculative=SpecConfig(types=("draft-simple",))), draft_model=model)
