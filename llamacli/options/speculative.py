"""The speculative decoding options of `chat`, `complete` and `serve` (llama-server's names and
defaults), declared once and turned into one SpecOptions.

A command takes `speculative: SpecOptions` and decorates itself with `@speculative_options`.
`-md FILE` alone means `--spec-type draft-simple`; the n-gram types need no second model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from llamacli.core.errors import InvalidRequest
from llamacli.core.speculative.config import SUPPORTED_TYPES, DraftParams, SpecConfig, parse_types
from llamacli.options.groups import SPECULATIVE, Opt, in_panel, option_group

_D = SpecConfig()

OPTIONS: list[Opt] = in_panel(SPECULATIVE, [
    Opt("types", Optional[str], None, ("--spec-type",),
        f"Comma-separated drafters: {', '.join(SUPPORTED_TYPES)} (default: none; draft-simple when -md is given)."),
    Opt("model", Optional[str], None, ("-md", "--model-draft", "--spec-draft-model"),
        "Draft model for draft-simple (a GGUF with the target's vocabulary)."),
    Opt("n_max", int, _D.draft.n_max, ("--spec-draft-n-max",), "Most tokens the draft model drafts per step."),
    Opt("n_min", int, _D.draft.n_min, ("--spec-draft-n-min",), "Fewest draft-model tokens worth verifying."),
    Opt("p_min", float, _D.draft.p_min, ("--spec-draft-p-min", "--draft-p-min"),
        "Stop drafting after a token the draft model gives less than this probability."),
    Opt("size_n", int, _D.ngram_size_n, ("--spec-ngram-simple-size-n",), "ngram-simple: length of the looked-up n-gram."),
    Opt("size_m", int, _D.ngram_size_m, ("--spec-ngram-simple-size-m",), "ngram-simple: most tokens drafted after a match."),
])


@dataclass(frozen=True)
class SpecOptions:
    config: SpecConfig
    draft_model: str | None  # path given to -md (resolved and loaded by the command)


def build(values: dict[str, Any]) -> SpecOptions:
    """SpecOptions from the options' values; validated (InvalidRequest on a bad value)."""
    model = values["model"]
    cfg = SpecConfig(
        types=parse_types(values["types"], model is not None),
        draft=DraftParams(values["n_max"], values["n_min"], values["p_min"]),
        ngram_size_n=values["size_n"],
        ngram_size_m=values["size_m"],
    )
    cfg.validate()
    if cfg.uses_draft_model and model is None:
        raise InvalidRequest("--spec-type draft-simple needs a draft model (-md FILE)")
    if model is not None and not cfg.uses_draft_model:
        raise InvalidRequest("-md: the draft model is used by --spec-type draft-simple, which --spec-type leaves out")
    return SpecOptions(cfg, model)


speculative_options = option_group("speculative", OPTIONS, build)
