"""core/text/grammar/limits.py and worker.py: what a grammar may be (size, rules, nesting, compile
time), compilation on threads whose stack a deep grammar cannot overflow, errors without
llguidance's native backtrace, and matchers copied per task instead of recompiled."""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llamacli.core.model.weights.gguf_file import read_metadata
from llamacli.core.text.grammar import (
    GrammarConstraint,
    GrammarError,
    GrammarLimits,
    GrammarSpec,
    check_limits,
    compile_grammar,
    compile_grammar_future,
)
from llamacli.core.text.grammar.limits import bracket_depth, json_depth
from llamacli.core.text.grammar.matcher import clean_message, panics_as_errors
from llamacli.core.text.tokenizer import load_tokenizer
from tests.http_server import ROOT
from tests.tiny_models import write_tiny_model


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path = write_tiny_model("gemma3", "Q8_0", tmp_path_factory.mktemp("limits") / "g.gguf")
    return load_tokenizer(read_metadata(path))


def gbnf_chain(n: int) -> str:
    """root -> r0 -> r1 -> ... -> r{n}: n + 2 rules, each naming the next."""
    return "\n".join(["root ::= r0", *(f'r{i} ::= "a" r{i + 1}' for i in range(n)), f'r{n} ::= "b"'])


def lark_chain(n: int) -> str:
    return "\n".join(["start: r0", *(f'r{i}: "a" r{i + 1}' for i in range(n)), f'r{n}: "b"'])


def ref_chain(n: int) -> dict:  # type: ignore[type-arg]
    """A schema whose $defs form a chain of n $refs ending in a string."""
    defs: dict = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(n)}  # type: ignore[type-arg]
    defs[f"d{n}"] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


# ---- the bounds, checked before llguidance sees the grammar --------------------------------------
def test_size_rules_and_nesting_are_bounded() -> None:
    lim = GrammarLimits(max_bytes=1000, max_rules=10, max_depth=5)
    check_limits(GrammarSpec.gbnf(gbnf_chain(8)), lim)  # 10 rules
    with pytest.raises(GrammarError, match="defines 11 rules; at most 10"):
        check_limits(GrammarSpec.gbnf(gbnf_chain(9)), lim)
    with pytest.raises(GrammarError, match="defines 11 rules"):
        check_limits(GrammarSpec.lark(lark_chain(9)), lim)
    with pytest.raises(GrammarError, match="defines 11 rules"):  # Lark text in the grammar field
        check_limits(GrammarSpec.gbnf(lark_chain(9)), lim)
    with pytest.raises(GrammarError, match=r"is 1\d{3} bytes; at most 1000"):
        check_limits(GrammarSpec.gbnf("root ::= " + " | ".join(f'"w{i}"' for i in range(200))), lim)
    with pytest.raises(GrammarError, match="nests brackets 6 levels deep; at most 5"):
        check_limits(GrammarSpec.gbnf("root ::= " + "(" * 6 + '"a"' + ")" * 6), lim)
    with pytest.raises(GrammarError, match="nested 6 levels deep"):
        check_limits(GrammarSpec.json_schema(functools.reduce(lambda s, _: {"items": s}, range(5), {})), lim)
    check_limits(GrammarSpec.json_schema(functools.reduce(lambda s, _: {"items": s}, range(4), {})), lim)


def test_brackets_in_strings_classes_and_comments_do_not_nest() -> None:
    lim = GrammarLimits(max_depth=2)
    check_limits(GrammarSpec.gbnf('root ::= ("((((" [(((] x) # (((((\nx ::= "\\"(((("'), lim)
    check_limits(GrammarSpec.lark('start: ("((((" | /(a)(b)/) // ((((('), lim)
    check_limits(GrammarSpec.regex(r"\(\(\([(((]"), lim)
    assert bracket_depth("(a[b{c}])) ((") == 3
    assert json_depth({"a": [1, {"b": []}]}) == 4 and json_depth(3) == 0


def test_a_grammar_over_a_bound_is_refused_before_compiling(tok) -> None:  # type: ignore[no-untyped-def]
    """The issue's 4,000-rule chain: a clean error at once (the GBNF converter alone would
    take minutes on it, and llguidance overflows an 8 MiB stack on it)."""
    with pytest.raises(GrammarError, match="4002 rules; at most 1000"):
        compile_grammar_future(tok, GrammarSpec.gbnf(gbnf_chain(4000)))
    alternatives = GrammarSpec.gbnf("root ::= " + " | ".join(f'"w{i}"' for i in range(100_000)))
    with pytest.raises(GrammarError, match="bytes; at most 262144") as e:
        compile_grammar(tok, alternatives)
    assert "<backtrace>" not in str(e.value)


def test_deeply_nested_schema_is_a_clean_error() -> None:
    deep = functools.reduce(lambda s, _: {"type": "array", "items": s}, range(5000), {"type": "string"})
    with pytest.raises(GrammarError, match="nested too deeply"):
        GrammarSpec.json_schema(deep)


# ---- compilation: its own threads, time-bounded, errors without native backtraces ----------------
DEEP = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from llamacli.core.model.weights.gguf_file import read_metadata
    from llamacli.core.text.grammar import GrammarConstraint, GrammarLimits, GrammarSpec, compile_grammar
    from llamacli.core.text.tokenizer import load_tokenizer
    from tests.test_grammar_limits import lark_chain, ref_chain
    tok = load_tokenizer(read_metadata({model!r}))
    roomy = GrammarLimits(max_rules=10_000)
    for spec in (GrammarSpec.lark(lark_chain(4000)), GrammarSpec.json_schema(ref_chain(3000))):
        c = GrammarConstraint(compile_grammar(tok, spec, roomy))  # compiled on a compile thread
        assert c.allowed().any()  # masks on this thread's ordinary stack
    print("compiled")
""")


def test_deep_grammars_compile_without_overflowing_a_stack(tmp_path: Path) -> None:
    """A 4,000-rule chain and a 3,000-link $ref chain overflow an 8 MiB stack inside
    llguidance (SIGSEGV: the process dies). On the compile threads both compile, and the
    matcher copied from them masks on an ordinary thread. In a child process: a crash
    fails this test instead of ending the test run."""
    model = write_tiny_model("gemma3", "Q8_0", tmp_path / "g.gguf")
    run = subprocess.run([sys.executable, "-c", DEEP.format(root=str(ROOT), model=str(model))],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "compiled" in run.stdout, (run.returncode, run.stderr[-2000:])


def test_a_compilation_past_its_time_limit_is_a_clean_error(tok) -> None:  # type: ignore[no-untyped-def]
    big = GrammarSpec.gbnf("root ::= " + " | ".join(f'"w{i}"' for i in range(20_000)))
    with pytest.raises(GrammarError, match="did not compile within 0.001 s"):
        compile_grammar(tok, big, GrammarLimits(timeout_s=0.001))


def test_native_backtraces_are_cut_from_messages() -> None:
    msg = "panic: assertion failed: grammar.symbols.len() < u16::MAX\n<backtrace>\n   0: <unknown>\n   1: <unknown>"
    assert clean_message(msg) == "panic: assertion failed: grammar.symbols.len() < u16::MAX"
    assert clean_message("  at 1(3): bad  ") == "at 1(3): bad"


def test_a_rust_panic_becomes_a_grammar_error() -> None:
    """pyo3's PanicException is a BaseException: on the engine's thread it would end the loop."""

    class PanicException(BaseException):
        pass

    with pytest.raises(GrammarError, match="^x: panic: boom$"):
        with panics_as_errors("x"):
            raise PanicException("panic: boom\n<backtrace>\n  0: <unknown>")
    with pytest.raises(KeyboardInterrupt):
        with panics_as_errors("x"):
            raise KeyboardInterrupt


def test_each_task_gets_its_own_copy_of_the_matcher(tok) -> None:  # type: ignore[no-untyped-def]
    g = compile_grammar(tok, GrammarSpec.gbnf('root ::= "ab" | "ac"'))
    assert compile_grammar(tok, GrammarSpec.gbnf('root ::= "ab" | "ac"')) is g  # cached
    one, two = GrammarConstraint(g), GrammarConstraint(g)
    a = tok.tokenize("a", add_special=False)
    assert all(one.accept(t) for t in a)
    assert not two.allowed()[tok.tokenize("b", add_special=False)[0]]  # `two` still at the start
    assert two.allowed()[a[0]]


# ---- llguidance's parser limits, said as such (issue #30 item d) -------------------------------
def _alternatives(n: int, prefix: str = "") -> str:
    return " | ".join(f'"{prefix}w{i}"' for i in range(n))


def test_a_start_rule_over_the_parsers_row_limit_is_refused_when_compiled(tok) -> None:  # type: ignore[no-untyped-def]
    """More than 2,000 alternatives in the start rule fail at the first token whatever it is:
    that is a 400 naming llguidance's limit before any work, not the engine's 'logit_bias or
    ignore_eos removed every allowed token' after the first step."""
    compile_grammar(tok, GrammarSpec.gbnf(f"root ::= {_alternatives(1999)}"))
    with pytest.raises(GrammarError) as e:
        compile_grammar(tok, GrammarSpec.gbnf(f"root ::= {_alternatives(2001)}"))
    msg = str(e.value)
    assert msg.startswith("the grammar cannot start: the parser would hold 2002 items at one point")
    assert "llguidance's limit of 2000 (max_items_in_row)" in msg and "logit_bias" not in msg
    compile_grammar(tok, GrammarSpec.gbnf(f"root ::= word\nword ::= {_alternatives(2001)}"))  # one lexeme: fine


def test_a_row_limit_met_after_some_output_is_named_too(tok) -> None:  # type: ignore[no-untyped-def]
    """When the limit is met on one path only (here on "a", not on "ok") the grammar compiles,
    and the token the mask allowed puts the matcher in error with the limit's explanation
    (the engine's message: tests/test_slot_update.py)."""
    g = compile_grammar(tok, GrammarSpec.gbnf(f'root ::= "ok" | "a" ({_alternatives(2001, "a")})'))
    c = GrammarConstraint(g)
    a = tok.vocab.token_to_id["a"]
    assert c.allowed()[a] and c.allowed_last(a)
    assert not c.accept(a) and c.failed
    assert "over llguidance's limit of 2000 (max_items_in_row)" in c.error()
