"""The sampling options of `chat`, `complete` and `serve`, declared once (llama.cpp's names,
defaults and parsing) and turned into one SamplingParams.

A command takes `sampling: SamplingParams` and decorates itself with `@sampling_options`:
the decorator shows the options below in place of that parameter and builds the value.
`-s -1` (the default) means a random seed (llama.cpp's LLAMA_DEFAULT_SEED, 0xFFFFFFFF).
"""

from __future__ import annotations

import re
from typing import Any, Optional

import typer

from llamacli.core.sampling import DEFAULT_SEED, SamplingParams
from llamacli.options.groups import SAMPLING, Opt, in_panel, option_group

_D = SamplingParams()
OPTIONS: list[Opt] = in_panel(SAMPLING, [
    Opt("temperature", float, _D.temperature, ("--temp", "--temperature"), "Temperature; 0 = greedy."),
    Opt("top_k", int, _D.top_k, ("--top-k",), "Top-k (0 = off)."),
    Opt("top_p", float, _D.top_p, ("--top-p",), "Top-p (1.0 = off)."),
    Opt("min_p", float, _D.min_p, ("--min-p",), "Min-p (0.0 = off)."),
    Opt("typical_p", float, _D.typical_p, ("--typical", "--typical-p"), "Locally typical p (1.0 = off)."),
    Opt("top_n_sigma", float, _D.top_n_sigma, ("--top-nsigma", "--top-n-sigma"), "Top-n-sigma (-1 = off)."),
    Opt("xtc_probability", float, _D.xtc_probability, ("--xtc-probability",), "XTC probability (0 = off)."),
    Opt("xtc_threshold", float, _D.xtc_threshold, ("--xtc-threshold",), "XTC threshold."),
    Opt("repeat_last_n", int, _D.repeat_last_n, ("--repeat-last-n",), "Tokens the penalties look back (0 = off, -1 = context)."),
    Opt("repeat_penalty", float, _D.repeat_penalty, ("--repeat-penalty",), "Repetition penalty (1.0 = off)."),
    Opt("presence_penalty", float, _D.presence_penalty, ("--presence-penalty",), "Presence penalty (0 = off)."),
    Opt("frequency_penalty", float, _D.frequency_penalty, ("--frequency-penalty",), "Frequency penalty (0 = off)."),
    Opt("dry_multiplier", float, _D.dry_multiplier, ("--dry-multiplier",), "DRY multiplier (0 = off)."),
    Opt("dry_base", float, _D.dry_base, ("--dry-base",), "DRY base."),
    Opt("dry_allowed_length", int, _D.dry_allowed_length, ("--dry-allowed-length",), "DRY allowed length."),
    Opt("dry_penalty_last_n", int, _D.dry_penalty_last_n, ("--dry-penalty-last-n",), "DRY look-back (0 = off, -1 = context)."),
    Opt("dry_sequence_breakers", list[str], [], ("--dry-sequence-breaker",), "DRY sequence breaker (repeatable; 'none' for none)."),
    Opt("dynatemp_range", float, _D.dynatemp_range, ("--dynatemp-range",), "Dynamic temperature range (0 = off)."),
    Opt("dynatemp_exponent", float, _D.dynatemp_exponent, ("--dynatemp-exp",), "Dynamic temperature exponent."),
    Opt("mirostat", int, _D.mirostat, ("--mirostat",), "Mirostat (0 = off, 1, 2)."),
    Opt("mirostat_eta", float, _D.mirostat_eta, ("--mirostat-lr",), "Mirostat learning rate (eta)."),
    Opt("mirostat_tau", float, _D.mirostat_tau, ("--mirostat-ent",), "Mirostat target entropy (tau)."),
    Opt("samplers", Optional[str], None, ("--samplers",), "Sampler order, names separated by ';'."),
    Opt("sampling_seq", Optional[str], None, ("--sampling-seq", "--sampler-seq"), "Sampler order as letters (e.g. edskypmxt)."),
    Opt("logit_bias", list[str], [], ("-l", "--logit-bias"), "TOKEN_ID(+/-)BIAS, e.g. 15043+1 (repeatable)."),
    Opt("ignore_eos", bool, False, ("--ignore-eos",), "Keep generating past end-of-generation tokens."),
    Opt("seed", int, -1, ("-s", "--seed"), "RNG seed (-1: random)."),
])


def parse_logit_bias(items: list[str]) -> list[tuple[int, float]]:
    out = []
    for it in items:
        m = re.fullmatch(r"\s*(\d+)\s*([+-]\s*[0-9.eE+-]+|[+-]inf)\s*", it)
        if not m:
            raise typer.BadParameter(f"--logit-bias {it!r}: expected TOKEN_ID(+/-)BIAS, e.g. 15043+1")
        out.append((int(m.group(1)), float(m.group(2).replace(" ", ""))))
    return out


def build(values: dict[str, Any]) -> SamplingParams:
    """SamplingParams from the options' values (keyed by Opt.field); validated."""
    kw = {k: v for k, v in values.items() if k not in ("samplers", "sampling_seq", "dry_sequence_breakers", "logit_bias", "seed")}
    if values.get("samplers"):
        kw["samplers"] = tuple(s.strip() for s in values["samplers"].split(";") if s.strip())
    elif values.get("sampling_seq"):
        kw["samplers"] = values["sampling_seq"]
    breakers = values.get("dry_sequence_breakers") or []
    if breakers:
        kw["dry_sequence_breakers"] = () if breakers == ["none"] else tuple(breakers)
    kw["logit_bias"] = parse_logit_bias(values.get("logit_bias") or [])
    seed = values.get("seed", -1)
    if seed < -1:
        raise typer.BadParameter(f"--seed must be -1 (random) or a number >= 0, got {seed}")
    kw["seed"] = DEFAULT_SEED if seed == -1 else seed
    sp = SamplingParams(**kw)
    sp.validate()
    return sp


# Replace fn's `sampling` parameter with the OPTIONS; call fn with the built SamplingParams.
sampling_options = option_group("sampling", OPTIONS, build)
