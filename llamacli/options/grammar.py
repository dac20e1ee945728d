"""llama.cpp's grammar flags (``--grammar``, ``--grammar-file``, ``-j/--json-schema``,
``-jf/--json-schema-file``) turned into the core's `GrammarSpec` for `llama chat` and
`llama complete`."""

from __future__ import annotations

from pathlib import Path

from llamacli.core.text.grammar import GrammarError, GrammarSpec


def grammar_from_cli(
    grammar: str | None = None,
    grammar_file: str | Path | None = None,
    json_schema: str | None = None,
    json_schema_file: str | Path | None = None,
) -> GrammarSpec | None:
    """The spec for llama.cpp's flags ``--grammar TEXT``, ``--grammar-file FILE``,
    ``-j/--json-schema SCHEMA`` (JSON text, or ``@file.json``) and ``-jf/--json-schema-file
    FILE``. At most one of them; None when none is given."""
    flags = (
        ("--grammar", grammar),
        ("--grammar-file", grammar_file),
        ("--json-schema", json_schema),
        ("--json-schema-file", json_schema_file),
    )
    given = [n for n, v in flags if v]
    if len(given) > 1:
        raise GrammarError(f"use only one of {', '.join(given)}")
    if grammar_file:
        return GrammarSpec.gbnf(_read(grammar_file, "grammar file"))
    if grammar:
        return GrammarSpec.gbnf(grammar)
    if json_schema_file:
        return GrammarSpec.json_schema(_read(json_schema_file, "JSON schema file"))
    if json_schema:
        text = _read(json_schema[1:], "JSON schema file") if json_schema.startswith("@") else json_schema
        return GrammarSpec.json_schema(text)
    return None


def _read(path: str | Path, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise GrammarError(f"cannot read the {what} {path}: {e.strerror if isinstance(e, OSError) else e}") from None
