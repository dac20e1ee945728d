"""`llama serve`'s bounds on what one request may ask for, where llama-server has none: the
size and shape of a grammar or JSON schema (llguidance compiles it in native code, recursively)
and the sampling lists and counts the engine works through for every token. Each option's
default is the bound's own default (core/text/grammar/limits.py, core/sampling/limits.py,
http/limits.py); a request over one is a 400 naming it. They become one RequestBounds."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import typer

from llamacli.core.sampling import DEFAULT_SAMPLING_LIMITS as SL
from llamacli.core.sampling import SamplingLimits
from llamacli.core.text.grammar import DEFAULT_LIMITS as GL
from llamacli.core.text.grammar import GrammarLimits
from llamacli.http.limits import DEFAULT_STOP_LIMITS as STOP
from llamacli.http.limits import StopLimits
from llamacli.options.groups import LIMITS, Opt, in_panel

OPTIONS: list[Opt] = in_panel(LIMITS, [
    Opt("max_grammar_bytes", int, GL.max_bytes, ("--max-grammar-bytes",),
        "Largest grammar or JSON schema (its JSON text) a request may give, in bytes."),
    Opt("max_grammar_rules", int, GL.max_rules, ("--max-grammar-rules",), "Most rules in a request's GBNF or Lark grammar."),
    Opt("max_grammar_depth", int, GL.max_depth, ("--max-grammar-depth",),
        "Deepest bracket nesting of a grammar or regex, or container nesting of a JSON schema."),
    Opt("max_grammar_seconds", float, GL.timeout_s, ("--max-grammar-seconds",),
        "Longest a request's grammar or schema may take to compile (then the request is a 400)."),
    Opt("max_dry_breakers", int, SL.max_dry_breakers, ("--max-dry-breakers",), "Most dry_sequence_breakers in a request."),
    Opt("max_logit_bias", int, SL.max_logit_bias, ("--max-logit-bias",),
        "Most logit_bias entries in a request, and tokens once its text keys are tokenized."),
    Opt("max_logit_bias_chars", int, SL.max_logit_bias_chars, ("--max-logit-bias-chars",),
        "Most characters in a request's logit_bias text keys, all together."),
    Opt("max_n_probs", int, SL.max_n_probs, ("--max-n-probs",),
        "Most probabilities a request may ask for per generated token (n_probs, top_logprobs)."),
    Opt("max_stop_strings", int, STOP.max_strings, ("--max-stop-strings",), "Most stop strings in a request."),
    Opt("max_stop_length", int, STOP.max_chars, ("--max-stop-length",), "Longest stop string, in characters."),
])


@dataclass(frozen=True)
class RequestBounds:
    grammar: GrammarLimits
    sampling: SamplingLimits
    stop: StopLimits


def build(values: dict[str, Any]) -> RequestBounds:
    """RequestBounds from the options' values; each must be positive."""
    for o in OPTIONS:
        if values[o.field] <= 0:
            raise typer.BadParameter(f"{o.names[0]} must be positive, got {values[o.field]}")
    v = values
    grammar = GrammarLimits(max_bytes=v["max_grammar_bytes"], max_rules=v["max_grammar_rules"],
                            max_depth=v["max_grammar_depth"], timeout_s=v["max_grammar_seconds"])
    sampling = SamplingLimits(**{f.name: v[f.name] for f in fields(SamplingLimits)})
    return RequestBounds(grammar, sampling, StopLimits(max_strings=v["max_stop_strings"], max_chars=v["max_stop_length"]))
