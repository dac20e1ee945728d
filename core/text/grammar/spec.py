"""What a request asks the output to look like, as one value the engine takes: `GrammarSpec`.

Pure functions turn the request fields of llama-server and OpenAI (``grammar``, ``json_schema``,
``response_format``) and the CLI flags (``--grammar``, ``--grammar-file``, ``--json-schema``)
into a spec, or raise `GrammarError` (an `InvalidRequest`: HTTP 400, exit code 1) with a
message that says what is wrong. Nothing here needs a model; compiling the spec against a
vocabulary happens in `llamacli.core.text.grammar.matcher`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from llamacli.core.errors import InvalidRequest

GrammarKind = Literal["gbnf", "lark", "json_schema", "regex", "llguidance"]
KINDS: tuple[str, ...] = ("gbnf", "lark", "json_schema", "regex", "llguidance")

# llama.cpp's json-schema-to-grammar SPACE_RULE (`| " " | "\n"{1,2} [ \t]{0,20}`): whitespace
# between JSON tokens is bounded, so a small model cannot pad an answer with endless newlines.
JSON_WHITESPACE = r"(?: |\n{1,2}[ \t]{0,20})?"

# Numbers as llama.cpp's JSON grammar bounds them (at most 16 integral digits), so that a
# sampled number cannot run on for the whole n_predict; llguidance caps decimals through
# multipleOf, at most 10 places (llama.cpp: 16).
_INT_LIMIT = 10**16 - 1
_DECIMALS = 1e-10
_NO_WALK = frozenset(("const", "enum", "default", "examples", "x-guidance", "title", "description"))
_SCHEMA_MAPS = frozenset(("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"))

# `{"type": "json_object"}` without a schema: OpenAI's meaning, a JSON object (llama.cpp
# takes any JSON value there).
JSON_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}


class GrammarError(InvalidRequest):
    """A grammar or JSON schema that cannot be used (a 400 for the HTTP adapter)."""


@dataclass(frozen=True)
class GrammarSpec:
    """One output constraint. ``source`` is GBNF or Lark text, a regex, llguidance's JSON
    grammar, or (kind ``json_schema``) the schema as canonical JSON text. Hashable, so that
    compiled grammars can be cached per spec."""

    kind: GrammarKind
    source: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise GrammarError(f"unknown grammar kind {self.kind!r} (one of: {', '.join(KINDS)})")
        if not isinstance(self.source, str):
            raise GrammarError(f"a {self.kind} grammar must be text")

    # ---- constructors ----------------------------------------------------------------------
    @classmethod
    def gbnf(cls, text: str) -> GrammarSpec:
        """llama.cpp GBNF text (a grammar that starts with `%llguidance` or `start:` is Lark)."""
        if not isinstance(text, str):
            raise GrammarError("\"grammar\" must be a string (GBNF text)")
        return cls("gbnf", text)

    @classmethod
    def lark(cls, text: str) -> GrammarSpec:
        return cls("lark", text)

    @classmethod
    def regex(cls, pattern: str) -> GrammarSpec:
        return cls("regex", pattern)

    @classmethod
    def json_schema(cls, schema: Any) -> GrammarSpec:
        """A JSON schema: a dict, True/False, or its JSON text."""
        if isinstance(schema, (str, bytes)):
            try:
                schema = json.loads(schema)
            except ValueError as e:
                raise GrammarError(f"the JSON schema is not valid JSON: {e}") from None
        if not isinstance(schema, (dict, bool)):
            raise GrammarError(f"a JSON schema must be an object or a boolean, not {type(schema).__name__}")
        try:
            text = json.dumps(schema, sort_keys=False, ensure_ascii=False, separators=(",", ":"))
        except RecursionError:
            raise GrammarError("the JSON schema is nested too deeply") from None
        return cls("json_schema", text)

    @property
    def schema(self) -> Any:
        """The JSON schema (kind json_schema only)."""
        if self.kind != "json_schema":
            raise ValueError("not a JSON-schema grammar")
        return json.loads(self.source)

    def to_llguidance(self) -> str:
        """The grammar in llguidance's serialized form (checked later, against a tokenizer)."""
        import llguidance
        from llguidance.gbnf_to_lark import any_to_lark

        L = llguidance.LLMatcher
        if self.kind == "gbnf":
            if not self.source.strip():
                raise GrammarError("failed to parse grammar: the grammar is empty")
            try:
                lark = any_to_lark(self.source)
            except Exception as e:  # noqa: BLE001 - the converter raises plain Exceptions
                raise GrammarError(f"failed to parse grammar: {e}") from None
            return L.grammar_from_lark(lark)
        if self.kind == "lark":
            return L.grammar_from_lark(self.source)
        if self.kind == "regex":
            return L.grammar_from_regex(self.source)
        if self.kind == "json_schema":
            try:
                schema = closed_objects(bound_numbers(json.loads(self.source)))
                xg = schema.get("x-guidance") if isinstance(schema, dict) else None
                own_ws = isinstance(xg, dict) and ("whitespace_flexible" in xg or "whitespace_pattern" in xg)
                defaults = None if own_ws else {"whitespace_pattern": JSON_WHITESPACE}
                return L.grammar_from_json_schema(schema, defaults=defaults)  # type: ignore[arg-type]
            except ValueError as e:
                raise GrammarError(f"invalid JSON schema: {e}") from None
        return self.source  # llguidance: already serialized

    def describe(self) -> str:
        return {"gbnf": "grammar", "lark": "Lark grammar", "regex": "regex", "json_schema": "JSON schema"}.get(
            self.kind, "grammar"
        )


def closed_objects(schema: Any, close: bool = True) -> Any:
    """A copy of ``schema`` where an object schema with ``properties`` and no
    ``additionalProperties`` allows no other keys, as llama.cpp's converter reads it (JSON
    Schema's own default allows them; a small model then invents keys until max_tokens).
    ``"additionalProperties": true`` keeps allowing them. The members of an ``allOf`` are not
    closed themselves (their properties merge, as llama.cpp merges them)."""
    if isinstance(schema, list):
        return [closed_objects(x, close) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k in _SCHEMA_MAPS and isinstance(v, dict):  # names -> schemas
            out[k] = {name: closed_objects(sub) for name, sub in v.items()}
        elif k == "allOf" and isinstance(v, list):
            out[k] = [closed_objects(sub, close=False) for sub in v]
        else:
            out[k] = v if k in _NO_WALK else closed_objects(v)
    if close and "properties" in out and "additionalProperties" not in out and "unevaluatedProperties" not in out:
        out["additionalProperties"] = False
    return out


def bound_numbers(schema: Any) -> Any:
    """A copy of ``schema`` whose numbers cannot grow without end: integer and number
    subschemas without bounds get +-(10**16 - 1), numbers without multipleOf get 10 decimals
    at most. Every output it allows is valid for the original schema."""
    if isinstance(schema, list):
        return [bound_numbers(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for k, v in schema.items():
        if k in _SCHEMA_MAPS and isinstance(v, dict):  # names -> schemas
            out[k] = {name: bound_numbers(sub) for name, sub in v.items()}
        else:
            out[k] = v if k in _NO_WALK else bound_numbers(v)
    types = out.get("type")
    types = [types] if isinstance(types, str) else types if isinstance(types, list) else []
    if "number" in types or "integer" in types:
        lo = [out[k] for k in ("minimum", "exclusiveMinimum") if isinstance(out.get(k), (int, float))]
        hi = [out[k] for k in ("maximum", "exclusiveMaximum") if isinstance(out.get(k), (int, float))]
        if not lo and not (hi and min(hi) <= -_INT_LIMIT):
            out["minimum"] = -_INT_LIMIT
        if not hi and not (lo and max(lo) >= _INT_LIMIT):
            out["maximum"] = _INT_LIMIT
        if "number" in types and "multipleOf" not in out:
            out["multipleOf"] = _DECIMALS
    return out


# ---- request fields -> spec ---------------------------------------------------------------
def grammar_from_options(
    grammar: Any = None,
    json_schema: Any = None,
    response_format: Any = None,
) -> GrammarSpec | None:
    """The constraint a request asks for, or None. ``grammar`` is GBNF (or Lark) text,
    ``json_schema`` a schema, ``response_format`` OpenAI's object: ``{"type": "text"}``,
    ``{"type": "json_object"}`` (optionally with ``schema``), ``{"type": "json_schema",
    "json_schema": {"schema": ...}}`` (or ``"schema"`` directly). More than one of them is an
    error, as in llama-server (which says: either "json_schema" or "grammar", not both)."""
    specs: list[tuple[str, GrammarSpec]] = []
    if grammar is not None and grammar != "":
        specs.append(("grammar", GrammarSpec.gbnf(grammar)))
    if json_schema is not None:
        specs.append(("json_schema", GrammarSpec.json_schema(json_schema)))
    rf = response_format_spec(response_format)
    if rf is not None:
        specs.append(("response_format", rf))
    if len(specs) > 1:
        names = " and ".join(f'"{n}"' for n, _ in specs)
        raise GrammarError(f"either \"json_schema\", \"grammar\" or \"response_format\" can be specified, not {names}")
    return specs[0][1] if specs else None


def response_format_spec(response_format: Any) -> GrammarSpec | None:
    """OpenAI's ``response_format`` as a spec (None for absent or ``{"type": "text"}``)."""
    if response_format is None:
        return None
    if not isinstance(response_format, Mapping):
        raise GrammarError("\"response_format\" must be an object such as {\"type\": \"json_object\"}")
    kind = response_format.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema")
        return GrammarSpec.json_schema(JSON_OBJECT_SCHEMA if schema is None else schema)
    if kind == "json_schema":
        wrapper = response_format.get("json_schema")
        schema = response_format.get("schema")
        if schema is None and isinstance(wrapper, Mapping):
            schema = wrapper.get("schema")
        if schema is None:
            raise GrammarError("\"response_format\" of type json_schema needs \"json_schema\": {\"schema\": {...}}")
        return GrammarSpec.json_schema(schema)
    raise GrammarError(f"\"response_format\" type must be one of text, json_object, json_schema (got {kind!r})")


def grammar_from_request(body: Mapping[str, Any]) -> GrammarSpec | None:
    """`grammar_from_options` over a request body's ``grammar``/``json_schema``/``response_format``."""
    return grammar_from_options(body.get("grammar"), body.get("json_schema"), body.get("response_format"))
