"""llamacli/options/grammar.py: llama.cpp's grammar flags -> GrammarSpec, with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from llamacli.core.text.grammar import GrammarError, GrammarSpec
from llamacli.options.grammar import grammar_from_cli


def test_grammar_flags(tmp_path: Path) -> None:
    f = tmp_path / "g.gbnf"
    f.write_text('root ::= "x"')
    assert grammar_from_cli(grammar_file=str(f)) == GrammarSpec.gbnf('root ::= "x"')
    assert grammar_from_cli(grammar='root ::= "y"') == GrammarSpec.gbnf('root ::= "y"')
    assert grammar_from_cli(json_schema='{"type": "string"}') == GrammarSpec.json_schema({"type": "string"})
    s = tmp_path / "s.json"
    s.write_text('{"type": "integer"}')
    assert grammar_from_cli(json_schema=f"@{s}") == GrammarSpec.json_schema({"type": "integer"})
    assert grammar_from_cli(json_schema_file=str(s)) == GrammarSpec.json_schema({"type": "integer"})
    assert grammar_from_cli() is None
    with pytest.raises(GrammarError, match="only one of --grammar, --json-schema"):
        grammar_from_cli(grammar="a", json_schema="{}")
    with pytest.raises(GrammarError, match="cannot read the grammar file"):
        grammar_from_cli(grammar_file=str(tmp_path / "missing.gbnf"))
