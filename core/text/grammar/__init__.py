"""Structured output: grammar (GBNF/Lark), JSON schema and OpenAI response_format constraints,
applied as a token mask before the sampler chain (llguidance does the matching).

Drivers build one `GrammarSpec` from a request (`grammar_from_request`; the CLI's flags in llamacli/options/grammar.py)
and put it in `TaskParams.grammar`; the engine checks it at submit (`GrammarError`, an
`InvalidRequest`) and masks every sampling step with a `GrammarConstraint`. What a spec may
be (size, rules, nesting, compile time) is bounded (`limits.py`), and llguidance compiles on
threads with a large stack (`worker.py`): no request can overflow a stack.
"""

from llamacli.core.text.grammar.limits import DEFAULT_LIMITS, GrammarLimits, check_limits
from llamacli.core.text.grammar.matcher import (
    CompiledGrammar,
    GrammarConstraint,
    compile_grammar,
    compile_grammar_future,
    llg_tokenizer,
)
from llamacli.core.text.grammar.spec import (
    JSON_OBJECT_SCHEMA,
    GrammarError,
    GrammarSpec,
    grammar_from_options,
    grammar_from_request,
    response_format_spec,
)

__all__ = [
    "DEFAULT_LIMITS",
    "JSON_OBJECT_SCHEMA",
    "CompiledGrammar",
    "GrammarConstraint",
    "GrammarError",
    "GrammarLimits",
    "GrammarSpec",
    "check_limits",
    "compile_grammar",
    "compile_grammar_future",
    "grammar_from_options",
    "grammar_from_request",
    "llg_tokenizer",
    "response_format_spec",
]
