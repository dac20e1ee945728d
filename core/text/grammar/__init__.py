"""Structured output: grammar (GBNF/Lark), JSON schema and OpenAI response_format constraints,
applied as a token mask before the sampler chain (llguidance does the matching).

Drivers build one `GrammarSpec` from a request (`grammar_from_request`; the CLI's flags in llamacli/options/grammar.py)
and put it in `TaskParams.grammar`; the engine checks it at submit (`GrammarError`, an
`InvalidRequest`) and masks every sampling step with a `GrammarConstraint`.
"""

from llamacli.core.text.grammar.matcher import (
    CompiledGrammar,
    GrammarConstraint,
    compile_grammar,
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
    "JSON_OBJECT_SCHEMA",
    "CompiledGrammar",
    "GrammarConstraint",
    "GrammarError",
    "GrammarSpec",
    "compile_grammar",
    "grammar_from_options",
    "grammar_from_request",
    "llg_tokenizer",
    "response_format_spec",
]
