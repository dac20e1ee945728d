"""Speculative decoding (core/speculative): the drafters on crafted sequences, the scheduler's
draft budget, and the engine's verification on tiny models. Every engine test compares the
speculative run with the same run without speculation: the tokens must be identical (greedy
and seeded sampling alike; the ggml numerics make a row's logits independent of the other
rows of its forward, so verifying k tokens in one forward gives the bits of k decode steps)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from llamacli.core.runtime.engine import Engine, EngineConfig
from llamacli.core.errors import InvalidRequest, ModelLoadError
from llamacli.core.text.grammar.spec import GrammarSpec
from llamacli.core.model.load import load_model
from llamacli.core.sampling import SamplingParams
from llamacli.core.runtime.scheduler import Chunk, SlotState, schedule
from llamacli.core.speculative import DraftParams, SpecConfig, parse_types
from llamacli.core.speculative.drafter import DraftRequest
from llamacli.core.speculative.speculator import Speculator, draft_room
from llamacli.core.speculative.draft_model import check_compatible, top_prob
from llamacli.core.speculative.ngram import NgramCache, cache_draft, cache_update, ngram_simple_draft
from llamacli.core.runtime.tasks import Final, Task, TaskParams
from llamacli.core.text.tokenizer import load_tokenizer
from tests.tiny_models import write_tiny_model

# ---- n-gram drafters on crafted sequences -------------------------------------------------


def test_ngram_simple_copies_what_followed_the_most_recent_match() -> None:
    # history: 1 2 3 [4 5 6 7 8 9] ... 1 2 3 [10 11 12 13 14] ... 1 2, sampled 3
    filler = list(range(100, 140))
    hist = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, *filler, 1, 2, 3, 10, 11, 12, 13, 14, *filler[:5], 1, 2]
    # n=3: pattern (1, 2, 3) occurs twice; the later occurrence wins; m=4 tokens follow it
    assert ngram_simple_draft(hist, 3, size_n=3, size_m=4) == [10, 11, 12, 13]
    # m larger than what follows the match: the copy stops at the end of the history
    assert ngram_simple_draft(hist, 3, size_n=3, size_m=20) == [10, 11, 12, 13, 14, *filler[:5], 1, 2]
    # a history of at most n + m + 1 tokens is too short to draft from (llama.cpp's rule)
    assert ngram_simple_draft(hist, 3, size_n=3, size_m=len(hist) - 4) == []
    # no occurrence of the pattern: no draft
    assert ngram_simple_draft(hist, 99, size_n=3, size_m=4) == []
    # too short a history (cur_len <= n + m + 1): no draft
    assert ngram_simple_draft(hist[:8], 3, size_n=3, size_m=4) == []


def test_ngram_simple_needs_size_n_tokens_after_the_match() -> None:
    # llama.cpp drops a draft shorter than the n-gram itself (copy_max < size_n)
    hist = [*range(50, 80), 7, 8, 9, 1, 2, 7, 8]
    assert ngram_simple_draft(hist, 9, size_n=3, size_m=10) == [1, 2, 7, 8]
    assert ngram_simple_draft(hist, 9, size_n=3, size_m=10) == hist[33:]
    short = [*range(50, 80), 7, 8, 9, 7, 8]  # only 2 tokens follow the match: fewer than n=3
    assert ngram_simple_draft(short, 9, size_n=3, size_m=10) == []


def test_ngram_cache_drafts_the_clear_majority_follower() -> None:
    counts: dict = {}
    seq = [5, 6, 7, 5, 6, 7, 5, 6, 8, 5, 6]
    cache_update(counts, seq, len(seq))
    assert counts[(5, 6)] == {7: 2, 8: 1}
    assert counts[(6,)] == {7: 2, 8: 1}
    # (5, 6): 3 samples, 7 has 67% >= 50% -> 7; then (6, 7)->5, (7, 5)->6 ...
    assert cache_draft(counts, seq, 4) == [7, 5, 6, 7]
    # a 1-gram with a split vote (7: 1, 9: 1, 50% < 66%) and no longer n-gram: nothing
    split: dict = {}
    cache_update(split, [1, 7, 1, 9, 1], 5)
    assert cache_draft(split, [3, 1], 4) == []


def test_ngram_cache_drafter_follows_its_slot_and_recounts_after_a_change() -> None:
    d = NgramCache()
    d.begin(0, [])
    hist = [5, 6, 7, 5, 6, 7, 5]
    assert d.draft([DraftRequest(0, hist, 6, 3)]) == [[7, 5, 6]]
    # the history changed (a context shift dropped tokens): counted again from scratch, so
    # the old (5,) -> 6 counts do not draft 6 any more (one new sample is too few)
    assert d.draft([DraftRequest(0, [5, 6, 8, 8], 5, 3)]) == [[]]


# ---- configuration, room, scheduling ------------------------------------------------------


def test_parse_types_and_validation() -> None:
    assert parse_types(None, has_draft_model=False) == ()
    assert parse_types(None, has_draft_model=True) == ("draft-simple",)
    assert parse_types("ngram-simple, draft-simple", has_draft_model=True) == ("ngram-simple", "draft-simple")
    assert parse_types("none", has_draft_model=False) == ()
    SpecConfig(types=("ngram-simple", "ngram-cache")).validate()
    with pytest.raises(InvalidRequest, match="unknown speculative type 'ngram'"):
        SpecConfig(types=("ngram",)).validate()
    with pytest.raises(InvalidRequest, match="'draft-mtp' is not supported"):
        SpecConfig(types=("draft-mtp",)).validate()
    with pytest.raises(InvalidRequest, match="n_min"):
        SpecConfig(types=("draft-simple",), draft=DraftParams(n_max=2, n_min=3)).validate()
    with pytest.raises(InvalidRequest, match="p_min"):
        SpecConfig(draft=DraftParams(p_min=1.5)).validate()


def test_draft_room() -> None:
    assert draft_room(n_ctx_slot=100, n_cached=50, limit=-1, n_generated=0) == 48
    assert draft_room(n_ctx_slot=100, n_cached=50, limit=10, n_generated=6) == 3  # 4 tokens left: 3 drafted + 1
    assert draft_room(n_ctx_slot=100, n_cached=50, limit=10, n_generated=10) == 0
    assert draft_room(n_ctx_slot=100, n_cached=99, limit=-1, n_generated=0) == 0


def test_schedule_gives_a_decode_its_draft_within_the_budget() -> None:
    slots = [SlotState(0, True, 0, 1, n_draft=5), SlotState(1, True, 0, 2, n_draft=0), SlotState(2, False, 30, 3)]
    assert schedule(slots, 16) == [Chunk(0, 6, True), Chunk(1, 1, True), Chunk(2, 9, False)]
    assert schedule(slots, 4) == [Chunk(0, 4, True)]  # the draft is cut to what fits


def test_speculator_takes_the_first_drafter_that_proposes() -> None:
    class Fixed:
        def __init__(self, name: str, out: dict[int, list[int]]) -> None:
            self.name, self.out, self.accepted = name, out, []

        def begin(self, slot_id: int, prompt: Sequence[int]) -> None:
            pass

        def draft(self, requests: list[DraftRequest]) -> list[list[int]]:
            return [list(self.out.get(r.slot_id, [])) for r in requests]

        def accept(self, slot_id: int, n: int) -> None:
            self.accepted.append((slot_id, n))

    a, b = Fixed("a", {0: [1, 2, 3, 4]}), Fixed("b", {0: [9], 1: [7, 8]})
    sp = Speculator([a, b])
    reqs = [DraftRequest(0, [0], 0, 2), DraftRequest(1, [0], 0, 5), DraftRequest(2, [0], 0, 5)]
    assert sp.draft(reqs) == [[1, 2], [7, 8], []]
    sp.accept(0, 2)
    sp.accept(1, 1)
    assert (a.accepted, b.accepted) == ([(0, 2)], [(1, 1)])


def test_top_prob_is_the_softmax_among_the_top_10() -> None:
    lg = np.array([0.0] * 20 + [3.0, 1.0], dtype=np.float32)
    tok, p = top_prob(lg)
    top = np.array([3.0, 1.0] + [0.0] * 8)
    assert tok == 20
    assert p == pytest.approx(np.exp(3.0) / np.exp(top).sum())


# ---- the engine on a tiny model -------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    d = tmp_path_factory.mktemp("spec")
    path = write_tiny_model("gemma3", "Q8_0", d / "g.gguf")
    model, g, _ = load_model(path, numerics="ggml")
    return model, load_tokenizer(g.metadata), path


PROMPTS = ["the cat sat on the mat", "a dog ran to the park and", "one two three four five six"]


def _run(model, tok, prompts: list[str], params: TaskParams, spec: SpecConfig | None = None,  # type: ignore[no-untyped-def]
         drafter: object | None = None, n_parallel: int = 1, draft_model=None) -> tuple[list[Final], Engine]:
    cfg = EngineConfig(n_ctx=256 * n_parallel, n_parallel=n_parallel, speculative=spec or SpecConfig())
    eng = Engine(model, tok, cfg, draft_model=draft_model)
    if drafter is not None:
        eng.spec = Speculator([drafter])  # type: ignore[list-item]
    with eng:
        tasks = [eng.submit(Task(tok.tokenize(p, add_special=True, parse_special=False), params)) for p in prompts]
        finals = [[r for r in t.results if isinstance(r, Final)][0] for t in tasks]
    for f in finals:
        assert f.error is None, f.error
    return finals, eng


class Oracle:
    """Drafts from known continuations: the first `good` tokens right, the rest wrong."""

    name = "oracle"

    def __init__(self, refs: list[list[int]], good: int, k: int, vocab: int) -> None:
        self.refs, self.good, self.k, self.vocab = refs, good, k, vocab
        self.begun: list[int] = []

    def begin(self, slot_id: int, prompt: Sequence[int]) -> None:
        self.begun.append(slot_id)

    def draft(self, requests: list[DraftRequest]) -> list[list[int]]:
        out = []
        for r in requests:
            seq = [*r.history, r.last]
            ref = next((x for x in self.refs if x[: len(seq)] == seq), None)
            if ref is None:
                out.append([])
                continue
            nxt = ref[len(seq) : len(seq) + self.k]
            out.append([t if i < self.good else (t + 1) % self.vocab for i, t in enumerate(nxt)])
        return out

    def accept(self, slot_id: int, n: int) -> None:
        pass


def _refs(finals: list[Final]) -> list[list[int]]:
    return [f.prompt_tokens + f.tokens for f in finals]


@pytest.mark.parametrize("good,k", [(8, 8), (0, 4), (2, 5)])
def test_verification_keeps_the_output_and_rolls_back_rejected_cells(tiny, good: int, k: int) -> None:  # type: ignore[no-untyped-def]
    model, tok, _ = tiny
    params = TaskParams(n_predict=40, ignore_eos=True, sampling=SamplingParams(temperature=0.0))
    plain, eng0 = _run(model, tok, PROMPTS[:1], params)
    oracle = Oracle(_refs(plain), good, k, tok.n_vocab)
    spec, eng = _run(model, tok, PROMPTS[:1], params, drafter=oracle)
    assert spec[0].tokens == plain[0].tokens
    t = spec[0].timings
    steps = eng.metrics.spec_drafts_total
    assert t.draft_n > 0 and steps > 0
    # each verification accepts min(good, k) tokens, except where n_predict cut the draft
    assert t.draft_n_accepted == t.draft_n if good >= k else t.draft_n_accepted <= steps * good
    if good < k:
        assert t.draft_n_accepted >= (steps - 1) * good
    assert eng.metrics.spec_accepted_tokens_total == t.draft_n_accepted
    # fewer forwards than tokens when drafts are accepted
    assert eng.metrics.n_decode_total < eng0.metrics.n_decode_total or good == 0
    # the slot's cache holds exactly its tokens: rejected rows were dropped
    s = eng.slots[0]
    assert int(eng.cache.lengths[0]) == len(s.cached)
    assert s.cached == (plain[0].prompt_tokens + plain[0].tokens)[: len(s.cached)]
    assert t.to_dict()["draft_n"] == t.draft_n
    assert "draft_n" not in plain[0].timings.to_dict()


def test_several_slots_with_drafts_give_each_slot_its_own_output(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok, _ = tiny
    params = TaskParams(n_predict=30, ignore_eos=True, sampling=SamplingParams(temperature=0.0))
    alone = [_run(model, tok, [p], params)[0][0] for p in PROMPTS]
    oracle = Oracle(_refs(alone), good=3, k=6, vocab=tok.n_vocab)
    together, eng = _run(model, tok, PROMPTS, params, drafter=oracle, n_parallel=3)
    assert [f.tokens for f in together] == [f.tokens for f in alone]
    assert all(f.timings.draft_n_accepted > 0 for f in together)
    assert sorted(oracle.begun) == [0, 1, 2]


def test_seeded_sampling_and_stateful_samplers_see_accepted_tokens_only(tiny) -> None:  # type: ignore[no-untyped-def]
    """The same sampler calls in the same order: a seeded run with penalties, DRY and a grammar
    gives the same tokens with drafts half right (if a rejected draft token reached the
    penalties, the grammar or the random state, the outputs would part)."""
    model, tok, _ = tiny
    sp = SamplingParams(temperature=0.9, seed=1234, top_k=0, min_p=0.0, top_p=1.0, repeat_penalty=1.3,
                        repeat_last_n=16, dry_multiplier=0.8, dry_allowed_length=1)
    grammar = GrammarSpec("gbnf", 'root ::= ([a-z ]+ ".")+')
    for g in (None, grammar):
        params = TaskParams(n_predict=40, sampling=sp, grammar=g)
        plain, _ = _run(model, tok, PROMPTS[:2], params, n_parallel=2)
        oracle = Oracle(_refs(plain), good=2, k=4, vocab=tok.n_vocab)
        spec, _ = _run(model, tok, PROMPTS[:2], params, drafter=oracle, n_parallel=2)
        assert [f.tokens for f in spec] == [f.tokens for f in plain]
        assert [f.content for f in spec] == [f.content for f in plain]
        assert all(f.timings.draft_n_accepted > 0 for f in spec)


def test_stop_string_and_n_predict_inside_an_accepted_draft(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok, _ = tiny
    base = TaskParams(n_predict=30, ignore_eos=True, sampling=SamplingParams(temperature=0.0))
    plain, _ = _run(model, tok, PROMPTS[:1], base)
    text = plain[0].content
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    for params in (TaskParams(n_predict=30, ignore_eos=True, stop=[stop], sampling=SamplingParams(temperature=0.0)),
                   TaskParams(n_predict=13, ignore_eos=True, sampling=SamplingParams(temperature=0.0))):
        ref, _ = _run(model, tok, PROMPTS[:1], params)
        spec, eng = _run(model, tok, PROMPTS[:1], params, drafter=Oracle(_refs(plain), 8, 8, tok.n_vocab))
        assert (spec[0].tokens, spec[0].content, spec[0].stop_type) == (ref[0].tokens, ref[0].content, ref[0].stop_type)
        assert len(spec[0].tokens) <= params.n_predict
        # the rows drafted past the stop were dropped from the cache
        assert int(eng.cache.lengths[0]) == len(eng.slots[0].cached) == len(spec[0].prompt_tokens) + len(spec[0].tokens) - 1


@pytest.mark.parametrize("types", [("ngram-simple",), ("ngram-cache",), ("ngram-simple", "ngram-cache")])
def test_ngram_types_end_to_end(tiny, types: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    model, tok, _ = tiny
    params = TaskParams(n_predict=60, ignore_eos=True, sampling=SamplingParams(temperature=0.0))
    prompt = ["the cat sat on the mat and the dog ran to the cat " * 8]
    plain, _ = _run(model, tok, prompt, params)
    # small n-grams so that the tiny model's own repetitions are found
    spec, eng = _run(model, tok, prompt, params, SpecConfig(types=types, ngram_size_n=1, ngram_size_m=6))
    assert spec[0].tokens == plain[0].tokens
    assert spec[0].timings.draft_n > 0
    assert eng.metrics.spec_draft_tokens_total == spec[0].timings.draft_n


def test_draft_model_same_weights_accepts_everything(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model, tok, path = tiny
    params = TaskParams(n_predict=30, ignore_eos=True, sampling=SamplingParams(temperature=0.0))
    plain, _ = _run(model, tok, PROMPTS, params, n_parallel=3)
    draft, _, _ = load_model(path, numerics="ggml")
    spec, eng = _run(model, tok, PROMPTS, params, SpecConfig(types=("draft-simple",), draft=DraftParams(n_max=4)), n_parallel=3,
                     draft_model=draft)
    assert [f.tokens for f in spec] == [f.tokens for f in plain]
    for f in spec:  # the draft model is the target: its greedy tokens are the target's
        assert f.timings.draft_n > 0 and f.timings.draft_n_accepted == f.timings.draft_n
    # a request's own bound (llama-server's speculative.n_max): one token per verification
    one = TaskParams(n_predict=30, ignore_eos=True, sampling=SamplingParams(temperature=0.0),
                     speculative=DraftParams(n_max=1))
    spec1, eng1 = _run(model, tok, PROMPTS[:1], one, SpecConfig(types=("draft-simple",)), draft_model=draft)
    assert spec1[0].tokens == plain[0].tokens
    assert spec1[0].timings.draft_n == eng1.metrics.spec_drafts_total == spec1[0].timings.draft_n_accepted
    # another model with the same vocabulary: same output, whatever it accepts
    other_path = write_tiny_model("gemma3", "F16", tmp_path / "other.gguf")
    other, g2, _ = load_model(other_path, numerics="ggml")
    check_compatible(tok.vocab, load_tokenizer(g2.metadata).vocab, str(other_path))
    spec2, _ = _run(model, tok, PROMPTS, params, SpecConfig(types=("draft-simple",), draft=DraftParams(n_max=3, p_min=0.5)),
                    n_parallel=3, draft_model=other)
    assert [f.tokens for f in spec2] == [f.tokens for f in plain]


def test_draft_model_needs_the_same_vocabulary_and_a_type(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    model, tok, _ = tiny
    qpath = write_tiny_model("qwen2", "F32", tmp_path / "q.gguf")
    _, gq, _ = load_model(qpath, numerics="ggml")
    with pytest.raises(ModelLoadError, match="vocabulary type"):
        check_compatible(tok.vocab, load_tokenizer(gq.metadata).vocab, str(qpath))
    with pytest.raises(InvalidRequest, match="needs a draft model"):
        Engine(model, tok, EngineConfig(n_ctx=256, speculative=SpecConfig(types=("draft-simple",))))
    with pytest.raises(InvalidRequest, match="does not include draft-simple"):
        Engine(model, tok, EngineConfig(n_ctx=256, speculative=SpecConfig(types=("ngram-simple",))), draft_model=model)
