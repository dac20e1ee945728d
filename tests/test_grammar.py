"""core/text/grammar: request fields -> GrammarSpec, compiling with llguidance over our tokenizers,
the mask in the engine, llama.cpp's grammars, invalid input rejected at submit. The demo-model
corpus run (every constrained output parses and validates) is in test_grammar_corpus.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from llamacli.core.runtime.engine import Engine, EngineConfig
from llamacli.core.errors import InvalidRequest
from llamacli.core.model.weights.gguf_file import read_metadata
from llamacli.core.text.grammar import (
    GrammarConstraint,
    GrammarError,
    GrammarSpec,
    compile_grammar,
    grammar_from_request,
)
from llamacli.core.text.grammar.spec import bound_numbers
from llamacli.core.model.load import load_model
from llamacli.core.sampling import SamplingParams
from llamacli.core.runtime.tasks import Final, Task, TaskParams
from llamacli.core.text.tokenizer import load_tokenizer

from tests.sdist_cache import llama_cpp_path
from tests.tiny_models import fixture_tokens, write_tiny_model

CORPUS = json.loads((Path(__file__).parent / "fixtures" / "grammar" / "schemas.json").read_text())


@pytest.fixture(scope="module")
def demo_tok(demo_model: str):  # type: ignore[no-untyped-def]
    return load_tokenizer(read_metadata(demo_model))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path = write_tiny_model("gemma3", "Q8_0", tmp_path_factory.mktemp("gram") / "g.gguf")
    model, g, _ = load_model(path, numerics="ggml")
    return model, load_tokenizer(g.metadata)


def matches(tok, spec: GrammarSpec, text: str) -> tuple[bool, bool]:  # type: ignore[no-untyped-def]
    """(every token of text accepted, the grammar may end there)."""
    c = GrammarConstraint(compile_grammar(tok, spec))
    ok = all(c.accept(t) for t in tok.tokenize(text, add_special=False))
    return ok, ok and c.is_accepting


# ---- request fields -> spec ----------------------------------------------------------------
def test_request_fields() -> None:
    assert grammar_from_request({}) is None
    assert grammar_from_request({"grammar": ""}) is None
    assert grammar_from_request({"grammar": 'root ::= "a"'}) == GrammarSpec("gbnf", 'root ::= "a"')
    s = grammar_from_request({"json_schema": {"type": "object", "properties": {"b": {}, "a": {}}}})
    assert s is not None and s.kind == "json_schema" and list(s.schema["properties"]) == ["b", "a"]  # order kept
    assert grammar_from_request({"json_schema": '{"type": "string"}'}) == GrammarSpec.json_schema({"type": "string"})
    obj = grammar_from_request({"response_format": {"type": "json_object"}})
    assert obj is not None and obj.schema == {"type": "object"}
    with_schema = grammar_from_request({"response_format": {"type": "json_object", "schema": {"type": "integer"}}})
    assert with_schema is not None and with_schema.schema == {"type": "integer"}
    oai = {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {"type": "array"}}}
    s2 = grammar_from_request({"response_format": oai})
    assert s2 is not None and s2.schema == {"type": "array"}
    s3 = grammar_from_request({"response_format": {"type": "json_schema", "schema": {"type": "null"}}})
    assert s3 is not None and s3.schema == {"type": "null"}
    assert grammar_from_request({"response_format": {"type": "text"}}) is None


@pytest.mark.parametrize(
    "body, needle",
    [
        ({"grammar": 'root ::= "a"', "json_schema": {}}, "not \"grammar\" and \"json_schema\""),
        ({"json_schema": {}, "response_format": {"type": "json_object"}}, "response_format"),
        ({"response_format": {"type": "yaml"}}, "must be one of"),
        ({"response_format": "json"}, "must be an object"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "needs"),
        ({"json_schema": "{not json"}, "not valid JSON"),
        ({"json_schema": [1, 2]}, "object or a boolean"),
        ({"grammar": 12}, "must be a string"),
    ],
)
def test_request_field_errors(body: dict, needle: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(GrammarError, match=None) as e:
        grammar_from_request(body)
    assert needle in str(e.value)
    assert isinstance(e.value, InvalidRequest)


def test_bound_numbers_only_narrows() -> None:
    b = bound_numbers(
        {
            "type": "object",
            "properties": {"n": {"type": "number"}, "i": {"type": "integer", "minimum": 3}, "enum": {"type": "number"}},
            "const": {"type": "number"},
        }
    )
    assert b["properties"]["n"] == {"type": "number", "minimum": -(10**16 - 1), "maximum": 10**16 - 1, "multipleOf": 1e-10}
    assert b["properties"]["i"] == {"type": "integer", "minimum": 3, "maximum": 10**16 - 1}
    assert b["properties"]["enum"]["maximum"] == 10**16 - 1  # a property named like a keyword is still a schema
    assert b["const"] == {"type": "number"}  # values are not schemas
    assert bound_numbers({"type": "integer", "minimum": 1e17}) == {"type": "integer", "minimum": 1e17}


# ---- compiling and matching ----------------------------------------------------------------
def test_llama_cpp_grammars_compile(demo_tok) -> None:  # type: ignore[no-untyped-def]
    folder = llama_cpp_path("grammars")
    files = sorted(folder.glob("*.gbnf"))
    assert len(files) >= 8
    for f in files:
        c = GrammarConstraint(compile_grammar(demo_tok, GrammarSpec.gbnf(f.read_text())))
        assert c.allowed().any(), f.name


def test_llama_cpp_grammars_accept_samples(demo_tok) -> None:  # type: ignore[no-untyped-def]
    folder = llama_cpp_path("grammars")
    samples = {
        "json.gbnf": ['{"a": [1, 2.5, "x"], "b": {"c": null}}'],
        "json_arr.gbnf": ['[\n{"a": 1},\n{"b": "c"}]'],
        "list.gbnf": ["- one\n- two\n"],
        "chess.gbnf": ["1. e4 e5\n2. Nf3 Nc6\n"],
        "arithmetic.gbnf": ["(a+b)*3=(c)\n"],
    }
    for name, texts in samples.items():
        spec = GrammarSpec.gbnf((folder / name).read_text())
        for text in texts:
            assert matches(demo_tok, spec, text) == (True, True), (name, text)


def test_gbnf_difference_greedy_lexemes(demo_tok) -> None:  # type: ignore[no-untyped-def]
    """Documented in docs/structured-output.md: llguidance turns rules made only of
    characters into greedy lexemes, so in arithmetic.gbnf `num ::= [0-9]+ ws` with
    `ws ::= [ \\t\\n]*` swallows the newline that llama.cpp leaves to the `"\\n"` ending a line,
    and a `ws` lexeme that has started with a space does the same."""
    spec = GrammarSpec.gbnf((llama_cpp_path("grammars") / "arithmetic.gbnf").read_text())
    assert matches(demo_tok, spec, "a=1\n") == (True, False)  # llama.cpp: a complete line
    assert matches(demo_tok, spec, "a=(1) \n") == (True, False)  # llama.cpp: complete
    assert matches(demo_tok, spec, "a=(1)\n") == (True, True)  # both


def test_json_schema_matching(demo_tok) -> None:  # type: ignore[no-untyped-def]
    spec = GrammarSpec.json_schema(
        {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "y"]}}, "required": ["a"]}
    )
    assert matches(demo_tok, spec, '{"a": 5, "b": "y"}') == (True, True)
    assert matches(demo_tok, spec, '{"a":5}') == (True, True)
    assert matches(demo_tok, spec, '{"a": "5"}')[0] is False
    assert matches(demo_tok, spec, '{"b": "y"}')[0] is False  # a is required, and comes first
    assert matches(demo_tok, spec, '{"a": 5, "b": "z"}')[0] is False
    # whitespace is bounded as llama.cpp's (one space, or newlines and up to 20 indents)
    assert matches(demo_tok, spec, '{\n  "a": 5\n}') == (True, True)
    assert matches(demo_tok, spec, '{"a":     5}')[0] is False
    num = GrammarSpec.json_schema({"type": "number"})
    assert matches(demo_tok, num, "0.1234567891") == (True, True)
    assert matches(demo_tok, num, "0.12345678912")[0] is False  # at most 10 decimals
    compact = GrammarSpec.json_schema({"x-guidance": {"whitespace_flexible": False}, "type": "array"})
    assert matches(demo_tok, compact, "[1,2]") == (True, True)
    assert matches(demo_tok, compact, "[1, 2]")[0] is False


@pytest.mark.parametrize("entry", CORPUS["schemas"], ids=lambda e: e["name"])
def test_corpus_schema_compiles(demo_tok, entry: dict) -> None:  # type: ignore[no-untyped-def,type-arg]
    c = GrammarConstraint(compile_grammar(demo_tok, GrammarSpec.json_schema(entry["schema"])))
    assert c.allowed().any() and not c.is_stopped


@pytest.mark.parametrize("entry", CORPUS["invalid"], ids=lambda e: e["name"])
def test_invalid_schema_rejected(demo_tok, entry: dict) -> None:  # type: ignore[no-untyped-def,type-arg]
    with pytest.raises(GrammarError, match="invalid JSON schema") as e:
        compile_grammar(demo_tok, GrammarSpec.json_schema(entry["schema"]))
    assert entry["error"] in str(e.value)


@pytest.mark.parametrize(
    "spec, needle",
    [
        (GrammarSpec.gbnf("root ::= foo"), "Rule 'foo' not found"),
        (GrammarSpec.gbnf('root ::= "a'), "failed to parse grammar"),
        (GrammarSpec.gbnf("   "), "the grammar is empty"),
        (GrammarSpec.gbnf('rot ::= "a"'), "No 'root' rule"),
        (GrammarSpec.lark("start: foo"), "unknown name"),
        (GrammarSpec.regex("(a"), "failed to parse regex"),
    ],
)
def test_invalid_grammar_rejected(demo_tok, spec: GrammarSpec, needle: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(GrammarError) as e:
        compile_grammar(demo_tok, spec)
    assert needle in str(e.value)


def test_mask_sets_forbidden_logits(demo_tok) -> None:  # type: ignore[no-untyped-def]
    c = GrammarConstraint(compile_grammar(demo_tok, GrammarSpec.gbnf('root ::= "yes" | "no"')))
    n = demo_tok.n_vocab
    logits = np.zeros(n + 64, np.float32)  # a padded output layer
    c.apply(logits)
    ok = np.isfinite(logits)
    assert not ok[n:].any()
    pieces = {demo_tok.token_to_piece(int(i)) for i in np.flatnonzero(ok)}
    assert pieces and all(b"yes".startswith(p) or b"no".startswith(p) for p in pieces)
    assert not any(ok[t] for t in demo_tok.vocab.eog_ids)  # nothing may end an empty answer
    for t in demo_tok.tokenize("yes", add_special=False):
        assert c.accept(t)
    assert c.is_stopped
    final = np.zeros(n, np.float32)
    c.apply(final)
    assert set(np.flatnonzero(np.isfinite(final))) <= set(demo_tok.vocab.eog_ids)


def test_spm_space_prefix_tokenizer(tiny) -> None:  # type: ignore[no-untyped-def]
    """Forced text is tokenized without SPM's leading space (llguidance needs exact spelling)."""
    _, tok = tiny
    spec = GrammarSpec.gbnf('root ::= "the cat" [0-9]')
    assert matches(tok, spec, "the cat7") == (True, True)
    assert matches(tok, spec, " the cat7")[0] is False


# ---- the engine ------------------------------------------------------------------------------
def _run(eng: Engine, params: TaskParams, prompt: list[int]) -> Final:
    return eng.run(Task(prompt, params))


def test_engine_rejects_invalid_grammar_at_submit(tiny) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    with Engine(model, tok, EngineConfig(n_ctx=128)) as eng:
        for spec in (GrammarSpec.gbnf("root ::= nope"), GrammarSpec.json_schema({"type": "array", "uniqueItems": True})):
            with pytest.raises(InvalidRequest):
                eng.submit(Task(fixture_tokens("gemma3", 8), TaskParams(n_predict=4, grammar=spec)))
        assert eng.n_queued == 0


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_engine_output_follows_grammar(tiny, temperature: float) -> None:  # type: ignore[no-untyped-def]
    model, tok = tiny
    prompt = fixture_tokens("gemma3", 8)
    with Engine(model, tok, EngineConfig(n_ctx=256, n_parallel=2)) as eng:
        sp = SamplingParams(temperature=temperature, seed=3)
        f = _run(eng, TaskParams(n_predict=40, sampling=sp, grammar=GrammarSpec.gbnf('root ::= ("ab" | "cd"){2} "!"')), prompt)
        assert f.content in {"abab!", "abcd!", "cdab!", "cdcd!"} and f.stop_type == "eos"
        # a random model loves whitespace: ask for compact JSON (llguidance's x-guidance option)
        schema = {"x-guidance": {"whitespace_flexible": False}, "type": "object",
                  "properties": {"k": {"enum": ["u", "v"]}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
                  "required": ["k", "n"], "additionalProperties": False}
        f = _run(eng, TaskParams(n_predict=60, sampling=sp, grammar=GrammarSpec.json_schema(schema)), prompt)
        v = json.loads(f.content)
        assert v["k"] in ("u", "v") and 0 <= v["n"] <= 9 and f.stop_type == "eos"
        # a later task on the same slot runs unconstrained again
        free = _run(eng, TaskParams(n_predict=5, sampling=SamplingParams(temperature=0.0)), prompt)
        assert len(free.tokens) == 5


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the sampler sees only -inf logits
def test_engine_grammar_with_banned_tokens_fails_loudly(tiny) -> None:  # type: ignore[no-untyped-def]
    """logit_bias that removes every token the grammar allows: an error, not free text."""
    model, tok = tiny
    ids = sorted(set(tok.tokenize("a", add_special=False)) | {t for t in range(tok.n_vocab) if tok.token_to_piece(t).startswith(b"a")})
    sp = SamplingParams(temperature=0.0, logit_bias=[(t, False) for t in ids])
    with Engine(model, tok, EngineConfig(n_ctx=128)) as eng:
        task = eng.submit(Task(fixture_tokens("gemma3", 8), TaskParams(n_predict=4, sampling=sp, grammar=GrammarSpec.gbnf('root ::= "a"+'))))
        final = next(r for r in task.results if isinstance(r, Final))
    assert final.stop_type == "error" and isinstance(final.error, GrammarError)


def test_json_schema_rules_of_llama_cpp(demo_tok) -> None:  # type: ignore[no-untyped-def]
    """grammars-README's rules: objects with properties allow no other keys unless
    `"additionalProperties": true` (nested objects too); the other rules as measured here
    (docs/structured-output.md lists where we differ)."""
    props = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    closed = GrammarSpec.json_schema(props)
    assert matches(demo_tok, closed, '{"a": 5}') == (True, True)
    assert matches(demo_tok, closed, '{"a": 5, "b": 1}')[0] is False
    opened = GrammarSpec.json_schema({**props, "additionalProperties": True})
    assert matches(demo_tok, opened, '{"a": 5, "b": 1}') == (True, True)
    nested = GrammarSpec.json_schema({"type": "object", "properties": {"o": props}, "required": ["o"]})
    assert matches(demo_tok, nested, '{"o": {"a": 1}}') == (True, True)
    assert matches(demo_tok, nested, '{"o": {"a": 1, "z": 2}}')[0] is False
    assert matches(demo_tok, GrammarSpec.json_schema({"type": "object"}), '{"any": 1}') == (True, True)
    # bounds hold for numbers too (llama.cpp: integers only)
    num = GrammarSpec.json_schema({"type": "number", "minimum": 0, "maximum": 10})
    assert matches(demo_tok, num, "5.5") == (True, True) and matches(demo_tok, num, "11")[0] is False
    # an anchored pattern matches the whole string; an unanchored one is a search, as JSON
    # Schema defines it (llama.cpp requires ^...$)
    anchored = GrammarSpec.json_schema({"type": "string", "pattern": "^ab+$"})
    assert matches(demo_tok, anchored, '"abbb"') == (True, True) and matches(demo_tok, anchored, '"xabb"')[0] is False
    search = GrammarSpec.json_schema({"type": "string", "pattern": "ab+"})
    assert matches(demo_tok, search, '"xabbx"') == (True, True) and matches(demo_tok, search, '"xyz"')[0] is False
    # allOf members merge their properties (llama.cpp merges them): they are not closed apart
    merged = GrammarSpec.json_schema({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                                {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]})
    assert matches(demo_tok, merged, '{"a": 1, "b": 2}') == (True, True)
