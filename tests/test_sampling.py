"""The sampler chain against llama.cpp's own samplers (fixtures from
tests/fixtures/sampling/make_fixtures.py), plus properties of the Sampler API."""

from __future__ import annotations

import base64
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from llamacli.core.errors import InvalidRequest
from llamacli.core.sampling import (
    DEFAULT_SEED,
    Candidates,
    DryVocab,
    Mt19937,
    Sampler,
    SamplingParams,
    build_chain,
    parse_samplers,
    resolve_logit_bias,
)
from llamacli.core.sampling.dry import Dry
from llamacli.core.sampling.filters import (
    MinP,
    Temperature,
    TemperatureExt,
    TopK,
    TopNSigma,
    TopP,
    Typical,
    Xtc,
)
from llamacli.core.sampling.logit_bias import LogitBias
from llamacli.core.sampling.penalties import Penalties
from llamacli.core.sampling.selectors import AdaptiveP, Dist, Mirostat, MirostatV2
from llamacli.core.sampling.step import Step

FIXTURES = json.loads(
    (Path(__file__).parent / "fixtures" / "sampling" / "samplers.json").read_text()
)
CASES = {c["name"]: c for c in FIXTURES["cases"]}


def _arr(s: str | None, dtype: type) -> np.ndarray | None:
    return None if s is None else np.frombuffer(base64.b64decode(s), dtype=dtype)


def _dry_vocab(case: dict) -> DryVocab:
    pieces = {int(t): base64.b64decode(v) for t, v in case["pieces"].items()}
    tails = {k.encode("latin-1"): v for k, v in case["tails"].items()}
    return DryVocab(pieces, lambda b: list(tails[b]))


def _step(spec: dict, case: dict) -> Step:
    t = spec["type"]
    if t == "top_k":
        return TopK(spec["k"])
    if t == "top_p":
        return TopP(spec["p"], spec["min_keep"])
    if t == "min_p":
        return MinP(spec["p"], spec["min_keep"])
    if t == "typical":
        return Typical(spec["p"], spec["min_keep"])
    if t == "temp":
        return Temperature(spec["t"])
    if t == "temp_ext":
        return TemperatureExt(spec["t"], spec["delta"], spec["exponent"])
    if t == "top_n_sigma":
        return TopNSigma(spec["n"])
    if t == "xtc":
        return Xtc(spec["p"], spec["t"], spec["min_keep"], spec["seed"])
    if t == "penalties":
        return Penalties(spec["last_n"], spec["repeat"], spec["freq"], spec["present"])
    if t == "dry":
        breakers = (
            _dry_vocab(case).breakers(spec["breakers"]) if spec["breakers"] else {}
        )
        return Dry(
            spec["multiplier"],
            spec["base"],
            spec["allowed_length"],
            spec["last_n"],
            breakers,
        )
    if t == "logit_bias":
        return LogitBias([(tok, b) for tok, b in spec["biases"]])
    if t == "dist":
        return Dist(spec["seed"])
    if t == "mirostat":
        return Mirostat(
            spec["n_vocab"], spec["seed"], spec["tau"], spec["eta"], spec["m"]
        )
    if t == "mirostat_v2":
        return MirostatV2(spec["seed"], spec["tau"], spec["eta"])
    if t == "adaptive_p":
        return AdaptiveP(spec["target"], spec["decay"], spec["seed"])
    raise AssertionError(t)


def _input(op: dict) -> Candidates:
    logits = _arr(op["logits"], np.float32)
    assert logits is not None
    ids = _arr(op["ids"], np.int32)
    if ids is None:
        ids = np.arange(logits.shape[0], dtype=np.int32)
    return Candidates.from_arrays(ids, logits, sorted=op["sorted"])


def _check(c: Candidates, op: dict, where: str) -> None:
    want_ids = _arr(op["out_ids"], np.int32)
    np.testing.assert_array_equal(
        c.ids, want_ids, err_msg=f"{where}: candidate ids/order"
    )
    want_logits = _arr(op["out_logits"], np.float32)
    if want_logits is None:
        inp = _input(op)
        by_id = dict(zip(inp.ids.tolist(), inp.logits.tolist()))
        want_logits = np.array([by_id[i] for i in want_ids.tolist()], dtype=np.float32)
    np.testing.assert_allclose(
        c.logits, want_logits, rtol=2e-6, atol=0, err_msg=f"{where}: logits"
    )
    np.testing.assert_allclose(
        c.p, _arr(op["out_p"], np.float32), rtol=2e-5, atol=1e-9, err_msg=f"{where}: p"
    )
    assert c.sorted == op["out_sorted"], f"{where}: sorted flag"
    if op["selected"] >= 0:
        assert c.selected == op["selected"], f"{where}: selected token"


def _run_case(case: dict, steps: list[Step]) -> None:
    for k, op in enumerate(case["ops"]):
        if op["op"] == "accept":
            for tok in op["tokens"]:
                for s in steps:
                    s.accept(tok)
            continue
        c = _input(op)
        for s in steps:
            s.apply(c)
        _check(c, op, f"{case['name']} op {k}")
        if case.get("accept_selected") and c.selected >= 0:
            for s in steps:
                s.accept(int(c.ids[c.selected]))


@pytest.mark.parametrize("name", [n for n in CASES if not n.startswith("chain_")])
def test_sampler_matches_llama_cpp(name: str) -> None:
    case = CASES[name]
    _run_case(case, [_step(spec, case) for spec in case["chain"]])


def _params_for(case: dict) -> SamplingParams:
    o = case["options"]
    return SamplingParams(
        temperature=o.get("temp", 0.8),
        dynatemp_range=o.get("delta", 0.0),
        dynatemp_exponent=o.get("exp", 1.0),
        top_k=int(o.get("top_k", 40)),
        top_p=o.get("top_p", 0.95),
        min_p=o.get("min_p", 0.05),
        typical_p=o.get("typical", 1.0),
        top_n_sigma=o.get("sigma", -1.0),
        xtc_probability=o.get("xtc_p", 0.0),
        xtc_threshold=o.get("xtc_t", 0.1),
        repeat_last_n=int(o.get("last_n", 64)),
        repeat_penalty=o.get("repeat", 1.0),
        frequency_penalty=o.get("freq", 0.0),
        presence_penalty=o.get("present", 0.0),
        min_keep=int(o.get("min_keep", 0)),
        samplers=(
            "penalties",
            "top_n_sigma",
            "top_k",
            "typ_p",
            "top_p",
            "min_p",
            "xtc",
            "temperature",
        ),
        seed=case["seed"],
    )


@pytest.mark.parametrize("name", [n for n in CASES if n.startswith("chain_")])
def test_chain_matches_llama_cpp(name: str) -> None:
    """build_chain from SamplingParams reproduces common_sampler_init's chain, step by step
    with history and seeded draws (the chosen token of each step included)."""
    case = CASES[name]
    p = _params_for(case)
    p.validate()
    _run_case(case, build_chain(p, case["seed"], n_vocab=case["n_vocab"]))


def test_sampler_class_matches_llama_cpp_chain() -> None:
    """The Sampler API over the same steps picks the same tokens as llama.cpp."""
    case = CASES["chain_penalised"]
    s = Sampler(_params_for(case), n_vocab=case["n_vocab"])
    picked, want = [], []
    for op in case["ops"]:
        if op["op"] == "accept":
            s.accept_prompt(op["tokens"])
            continue
        logits = _arr(op["logits"], np.float32)
        tok = s.sample(logits)
        s.accept(tok)
        picked.append(tok)
        want.append(int(_arr(op["out_ids"], np.int32)[op["selected"]]))
    assert picked == want


# ---- RNG ------------------------------------------------------------------------------------


def test_mt19937_reference_values() -> None:
    """std::mt19937 default-seeded (5489): the 10000th output is 4123659995 (C++ standard)."""
    r = Mt19937(5489)
    for _ in range(9999):
        r.next_u32()
    assert r.next_u32() == 4123659995


def test_uniform_double_uses_two_draws() -> None:
    a, b = Mt19937(7), Mt19937(7)
    lo, hi = b.next_u32(), b.next_u32()
    assert a.uniform_double() == (lo + hi * 2.0**32) / 2.0**64


# ---- properties of the Sampler ------------------------------------------------------------


def _logits(n: int = 1000, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(n) * 3).astype(np.float32)


def test_defaults_match_llama_server() -> None:
    p = SamplingParams()
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.typical_p) == (
        0.8,
        40,
        0.95,
        0.05,
        1.0,
    )
    assert (p.repeat_last_n, p.repeat_penalty, p.dry_base, p.dry_allowed_length) == (
        64,
        1.0,
        1.75,
        2,
    )
    assert p.sampler_names() == (
        "penalties",
        "dry",
        "top_n_sigma",
        "top_k",
        "typ_p",
        "top_p",
        "min_p",
        "xtc",
        "temperature",
    )
    assert p.seed == DEFAULT_SEED
    p.validate()


def test_greedy_when_temperature_zero() -> None:
    lg = _logits()
    for temp in (0.0, -1.0):
        for seed in (1, 2, 3):
            s = Sampler(SamplingParams(temperature=temp, seed=seed))
            assert s.sample(lg) == int(np.argmax(lg))
            # llama-server still reports the plain softmax for n_probs
            probs = s.last_probs(3)
            assert probs[0][0] == int(np.argmax(lg))
            assert 0 < probs[0][1] < 1
            assert s.last_probs(3, post_sampling=True) == [(int(np.argmax(lg)), 1.0)]


def test_same_seed_same_tokens() -> None:
    def run(seed: int) -> list[int]:
        s = Sampler(
            SamplingParams(seed=seed, temperature=1.5, top_k=0, top_p=1.0, min_p=0.0)
        )
        return [s.sample(_logits(seed=i)) for i in range(30)]

    assert run(123) == run(123)
    assert run(123) != run(124)


def test_random_seed_is_reported() -> None:
    s = Sampler(SamplingParams(seed=-1))
    assert 0 <= s.seed < 2**32
    s2 = Sampler(
        SamplingParams(seed=s.seed, temperature=2.0, top_k=0, top_p=1.0, min_p=0.0)
    )
    s.params = SamplingParams(
        seed=s.seed, temperature=2.0, top_k=0, top_p=1.0, min_p=0.0
    )
    s.reset()
    assert [s.sample(_logits(seed=i)) for i in range(10)] == [
        s2.sample(_logits(seed=i)) for i in range(10)
    ]


def test_min_keep_respected() -> None:
    lg = _logits()
    lg[7] = 50.0  # one dominant token: every filter would keep only it
    for p in (
        SamplingParams(
            top_k=0, top_p=0.1, min_p=0.0, min_keep=9, post_sampling_probs=True, seed=1
        ),
        SamplingParams(
            top_k=0, top_p=1.0, min_p=0.9, min_keep=9, post_sampling_probs=True, seed=1
        ),
        SamplingParams(
            top_k=0, top_p=1.0, min_p=0.0, typical_p=0.1, min_keep=9, seed=1
        ),
    ):
        s = Sampler(p)
        s.sample(lg)
        assert s._last is not None and len(s._last) >= 9


def test_penalties_only_on_last_n() -> None:
    lg = np.zeros(50, dtype=np.float32)
    lg[:5] = 2.0
    p = SamplingParams(
        repeat_last_n=3,
        repeat_penalty=2.0,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        min_p=0.0,
        seed=3,
    )
    s = Sampler(p)
    s.accept_prompt([0, 1, 2, 3, 4])  # only 2, 3, 4 are within the last 3
    s.sample(lg)
    out = dict(zip(s._last.ids.tolist(), s._last.logits.tolist()))
    assert out[0] == out[1] == 2.0
    assert out[2] == out[3] == out[4] == 1.0


def test_penalties_history_length_minus_one_is_context() -> None:
    p = SamplingParams(repeat_last_n=-1, repeat_penalty=2.0)
    s = Sampler(p, n_ctx=6)
    s.accept_prompt(list(range(10)))
    pen = next(st for st in s.steps if isinstance(st, Penalties))
    assert list(pen.history) == [4, 5, 6, 7, 8, 9]


def test_logit_bias_bans_and_ignore_eos() -> None:
    lg = _logits(100)
    top = int(np.argmax(lg))
    s = Sampler(SamplingParams(temperature=0, logit_bias=[(top, False)], seed=1))
    assert s.sample(lg) != top
    second = s.sample(lg)
    s = Sampler(
        SamplingParams(temperature=0, ignore_eos=True, seed=1), eog_ids={top, second}
    )
    assert s.sample(lg) not in (top, second)
    s = Sampler(SamplingParams(temperature=0, ignore_eos=False, seed=1), eog_ids={top})
    assert s.sample(lg) == top


def test_n_vocab_cuts_padded_logits() -> None:
    lg = np.concatenate([_logits(100), np.full(28, 99.0, dtype=np.float32)])
    s = Sampler(SamplingParams(temperature=0, seed=1), n_vocab=100)
    assert s.sample(lg) < 100


def test_pre_sampling_probs_are_the_plain_softmax() -> None:
    lg = _logits(500)
    s = Sampler(SamplingParams(seed=5))
    tok = s.sample(lg)
    e = np.exp(lg.astype(np.float64) - lg.max())
    sm = e / e.sum()
    order = np.argsort(-sm)[:5]
    got = s.last_probs(5)
    assert [t for t, _ in got] == order.tolist()
    np.testing.assert_allclose([p for _, p in got], sm[order], rtol=1e-5)
    assert s.last_chosen_prob() == pytest.approx(sm[tok], rel=1e-5)


def test_post_sampling_probs_sum_to_one() -> None:
    s = Sampler(SamplingParams(seed=5, post_sampling_probs=True))
    tok = s.sample(_logits(500))
    got = s.last_probs(100)
    assert 1 <= len(got) <= 40
    assert sum(p for _, p in got) == pytest.approx(1.0, rel=1e-5)
    assert tok in [t for t, _ in got]
    assert s.last_chosen_prob() == dict(got)[tok]


def test_mirostat_updates_mu_and_reset_restores() -> None:
    s = Sampler(SamplingParams(mirostat=2, seed=4))
    st = s.steps[-1]
    assert isinstance(st, MirostatV2) and st.mu == pytest.approx(10.0)
    first = [s.sample(_logits(seed=i)) for i in range(5)]
    assert st.mu != pytest.approx(10.0)
    s.reset()
    assert [s.sample(_logits(seed=i)) for i in range(5)] == first


def test_dry_penalises_repeat_continuation() -> None:
    # history "1 2 3 1 2": emitting 3 would extend the repeat "1 2" -> penalised
    dry = Dry(1.0, 2.0, 1, 10, {})
    for t in (1, 2, 3, 1, 2):
        dry.accept(t)
    c = Candidates.from_logits(np.zeros(5, dtype=np.float32))
    dry.apply(c)
    assert c.logits[3] == pytest.approx(-2.0)  # multiplier * base^(2 - 1)
    assert np.count_nonzero(c.logits) == 1


def test_dry_vocab_breakers_from_pieces() -> None:
    pieces = [b"a", b"b:", b"x", b" sa", b"t on", b"sat"]
    vocab = DryVocab(pieces, lambda b: {b"at": [5], b"t": [9]}.get(b, [0]))
    br = vocab.breakers([":", " sat"])
    assert br[1] == [()]  # contains ':'
    assert br[3] == [
        (9,)
    ]  # " sa" ends with a prefix of " sat": the rest, "t", tokenized
    assert 4 not in br and 5 not in br
    assert vocab.breakers([":", " sat"]) is br  # cached


def _llama_cpp_breakers(
    breakers: list[str], pieces: list[bytes], tokenize: Callable[[bytes], list[int]]
) -> dict:  # type: ignore[type-arg]
    """llama.cpp's get_overlapping_token_sequences, a pass over the vocabulary per breaker."""
    out: dict = {}  # type: ignore[type-arg]
    for b in dict.fromkeys(x.encode()[:40] for x in breakers):
        for tok, word in enumerate(pieces):
            if not b or b[:1] not in word:
                continue
            if b in word:
                out.setdefault(tok, []).append(())
                continue
            pos = word.find(b[:1])
            while pos != -1:
                if b.startswith(word[pos:]):
                    seq = tuple(tokenize(b[len(word) - pos:])[:20])
                    if seq not in out.setdefault(tok, []):
                        out[tok].append(seq)
                pos = word.find(b[:1], pos + 1)
    return out


def test_dry_breakers_resolve_as_llama_cpp() -> None:
    rng = np.random.default_rng(5)
    alphabet = list("ab: \n")
    pieces = [bytes("".join(rng.choice(alphabet, rng.integers(1, 6))), "ascii") for _ in range(300)]

    def tokenize(b: bytes) -> list[int]:
        return [len(b), b[0]]

    for _ in range(20):
        breakers = ["".join(rng.choice(alphabet, rng.integers(0, 5))) for _ in range(int(rng.integers(1, 6)))]
        got = DryVocab(pieces, tokenize).breakers(breakers)
        assert dict(got) == _llama_cpp_breakers(breakers, pieces, tokenize), breakers


def test_dry_breakers_cost_no_pass_over_the_vocabulary() -> None:
    """A request's breakers are resolved for the tokens DRY meets, never for every token of
    the vocabulary (10,000 breakers used to block the engine for minutes on a 262k vocabulary)."""
    seen: list[int] = []

    def piece(t: int) -> bytes:
        seen.append(t)
        return b"ab:"[t % 3 :]

    vocab = DryVocab(piece, lambda b: [7] * len(b), n_vocab=262_144)
    params = SamplingParams(dry_multiplier=0.8, dry_sequence_breakers=[f"{i}:" for i in range(1000)], seed=1)
    s = Sampler(params, n_vocab=262_144, dry_vocab=vocab)
    s.accept_prompt([1, 2, 3, 1, 2, 3, 1, 2])
    s.sample(_logits(262_144, seed=3))
    assert 0 < len(set(seen)) <= 3 and len(seen) == len(set(seen))  # each token text read once


def test_sampling_lists_are_bounded() -> None:
    with pytest.raises(InvalidRequest, match="dry_sequence_breakers has 1001 entries; at most 1000"):
        SamplingParams(dry_sequence_breakers=["x"] * 1001).validate()
    SamplingParams(dry_sequence_breakers=["x"] * 1000).validate()
    with pytest.raises(InvalidRequest, match="logit_bias has 65537 entries"):
        resolve_logit_bias([[1, 1.0]] * 65537, _Tok(), 100)
    with pytest.raises(InvalidRequest, match="string keys of logit_bias hold more than 65536"):
        resolve_logit_bias({"a" * 40000: 1.0, "b" * 30000: 1.0}, _Tok(), 100)
    with pytest.raises(InvalidRequest, match="logit_bias has 65537 entries"):
        SamplingParams(logit_bias=[(1, 1.0)] * 65537).validate()
    assert len(resolve_logit_bias([[1, 1.0]] * 65536, _Tok(), 100)) == 65536


class _Tok:
    def tokenize(self, text: str, add_special: bool = False, parse_special: bool = False) -> list[int]:
        return [ord(c) % 100 for c in text]


def test_dry_breakers_without_vocabulary_is_a_clear_error() -> None:
    with pytest.raises(InvalidRequest, match="vocabulary"):
        Sampler(SamplingParams(dry_multiplier=0.8))
    Sampler(
        SamplingParams(dry_multiplier=0.8, dry_sequence_breakers=[])
    )  # none to resolve


def test_sampler_order_names_and_letters() -> None:
    assert parse_samplers("edskypmxt") == SamplingParams().sampler_names()
    assert parse_samplers(["Top-K", "nucleus", "temp", "minp"]) == (
        "top_k",
        "top_p",
        "temperature",
        "min_p",
    )
    with pytest.raises(InvalidRequest, match="unknown sampler"):
        parse_samplers(["top_k", "bogus"])
    with pytest.raises(InvalidRequest, match="letter"):
        parse_samplers("kz")
    s = Sampler(SamplingParams(samplers=["top_k", "top_k"], top_k=3, seed=1))
    assert sum(isinstance(st, TopK) for st in s.steps) == 2


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("top_k", -2),
        ("top_p", 1.5),
        ("top_p", -0.1),
        ("min_p", 2.0),
        ("mirostat", 3),
        ("repeat_penalty", 0.0),
        ("repeat_last_n", -2),
        ("n_probs", -1),
        ("min_keep", -1),
        ("temperature", math.nan),
        ("temperature", math.inf),
        ("xtc_probability", 1.2),
        ("samplers", ["top_k", "nope"]),
        ("samplers", ["infill"]),
        ("seed", 2**33),
        ("logit_bias", [(-1, 1.0)]),
        ("logit_bias", [(1, "x")]),
        ("logit_bias", [(1, True)]),
        ("dry_sequence_breakers", "\n"),
    ],
)
def test_validate_rejects(field: str, value: object) -> None:
    p = SamplingParams(**{field: value})  # type: ignore[arg-type]
    with pytest.raises(
        InvalidRequest, match=field if field != "samplers" else "sampler"
    ):
        p.validate()


def test_resolve_logit_bias_forms() -> None:
    class Tok:
        def tokenize(
            self, text: str, add_special: bool = True, parse_special: bool = False
        ) -> list[int]:
            assert not add_special and not parse_special
            return [ord(ch) for ch in text]

    assert resolve_logit_bias(
        [[5, 1.5], ["ab", False], [999, 1.0], [1, True], "junk"], Tok(), 200
    ) == [
        (5, 1.5),
        (97, -math.inf),
        (98, -math.inf),
    ]
    assert resolve_logit_bias({"7": -2, "c": 0.5, "": 1}, Tok(), 200) == [
        (7, -2.0),
        (99, 0.5),
        (0, 1.0),
    ]
    with pytest.raises(InvalidRequest):
        resolve_logit_bias("nope", Tok(), 10)


def test_default_chain_is_fast_on_a_large_vocab() -> None:
    lg = (np.random.default_rng(0).standard_normal(262144) * 3).astype(np.float32)
    s = Sampler(SamplingParams(seed=1))
    s.sample(lg)
    t0 = time.process_time()  # CPU time: not stretched by other processes
    for _ in range(10):
        s.accept(s.sample(lg))
    per_call = (time.process_time() - t0) / 10
    assert per_call < 0.02  # ~1 ms on a laptop core


def test_dry_vocab_from_our_tokenizer_matches_llama_cpp() -> None:
    """DryVocab.from_tokenizer reads the token texts and tail tokenizations llama.cpp's DRY
    uses (detokenize of one token with special text, leading space dropped; no BOS)."""
    from llamacli.core.model.weights.gguf_file import read_metadata
    from llamacli.core.text.tokenizer import load_tokenizer
    from test_tokenizer_vectors import vocab_dir  # the shared ggml-vocab download

    tok = load_tokenizer(read_metadata(vocab_dir() / "ggml-vocab-llama-spm.gguf"))
    vocab = DryVocab.from_tokenizer(tok)
    case = CASES["dry_0.8_1.75_2_64_4"]
    for t, v in case["pieces"].items():
        assert vocab.piece(int(t)) == base64.b64decode(v), t
    for other in (c for c in CASES.values() if c["name"].startswith("dry_")):
        for tail, ids in other["tails"].items():
            assert vocab.tokenize(tail.encode("latin-1")) == ids, tail
