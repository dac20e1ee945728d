"""Sampling options: llama-server's /completion field names, llama.cpp's defaults
(common_params_sampling), the sampler-order names and their validation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from llamacli.core.errors import InvalidRequest
from llamacli.core.sampling.limits import DEFAULT_SAMPLING_LIMITS, SamplingLimits
from llamacli.core.sampling.rng import DEFAULT_SEED

# common_sampler_type_to_str / _to_chr
SAMPLER_CHARS: dict[str, str] = {
    "d": "dry",
    "k": "top_k",
    "y": "typ_p",
    "p": "top_p",
    "s": "top_n_sigma",
    "m": "min_p",
    "t": "temperature",
    "x": "xtc",
    "i": "infill",
    "e": "penalties",
    "a": "adaptive_p",
}
CANONICAL_SAMPLERS = frozenset(SAMPLER_CHARS.values())
UNSUPPORTED_SAMPLERS = frozenset(
    {"infill"}
)  # needs the FIM vocabulary logic of llama.cpp


def _aliases() -> dict[str, str]:
    """common_sampler_types_from_names: canonical names, kebab-case, no-underscore, misc."""
    out: dict[str, str] = {}
    for name in CANONICAL_SAMPLERS:
        out[name] = name
        if "_" in name:
            out[name.replace("_", "-")] = name
            out[name.replace("_", "")] = name
    out.update({"nucleus": "top_p", "temp": "temperature", "typ": "typ_p"})
    return out


SAMPLER_ALIASES = _aliases()

DEFAULT_SAMPLERS: tuple[str, ...] = (
    "penalties",
    "dry",
    "top_n_sigma",
    "top_k",
    "typ_p",
    "top_p",
    "min_p",
    "xtc",
    "temperature",
)
DEFAULT_DRY_BREAKERS: tuple[str, ...] = ("\n", ":", '"', "*")


def parse_samplers(value: str | Sequence[str]) -> tuple[str, ...]:
    """The sampler order from a list of names (aliases, any case) or a string of letters
    ("edskypmxt"), as canonical names. Unknown names raise (llama.cpp skips them)."""
    if isinstance(value, str):
        out = []
        for ch in value:
            if ch not in SAMPLER_CHARS:
                raise InvalidRequest(
                    f"unknown sampler letter {ch!r} in samplers {value!r} "
                    f"(known: {''.join(SAMPLER_CHARS)})"
                )
            out.append(SAMPLER_CHARS[ch])
    else:
        out = []
        for name in value:
            if not isinstance(name, str) or name.lower() not in SAMPLER_ALIASES:
                raise InvalidRequest(
                    f"unknown sampler {name!r} (known: {', '.join(sorted(CANONICAL_SAMPLERS))})"
                )
            out.append(SAMPLER_ALIASES[name.lower()])
    for name in out:
        if name in UNSUPPORTED_SAMPLERS:
            raise InvalidRequest(f"the {name!r} sampler is not supported")
    return tuple(out)


@dataclass
class SamplingParams:
    """One request's sampling options; names and defaults as llama-server's /completion.

    logit_bias: (token id, bias) pairs, applied in order and summed per token; a bias of
    -inf (or False) bans the token. String keys are resolved by the caller
    (`logit_bias.resolve_logit_bias`). seed: -1 or 0xFFFFFFFF draws a random seed.
    repeat_last_n / dry_penalty_last_n: -1 means the context size.
    """

    temperature: float = 0.8
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    top_n_sigma: float = -1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    repeat_last_n: int = 64
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64
    dry_sequence_breakers: Sequence[str] = DEFAULT_DRY_BREAKERS
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    adaptive_target: float = -1.0
    adaptive_decay: float = 0.9
    logit_bias: Sequence[tuple[int, float]] = field(default_factory=list)
    n_probs: int = 0
    post_sampling_probs: bool = False
    min_keep: int = 0
    samplers: str | Sequence[str] = DEFAULT_SAMPLERS
    seed: int = DEFAULT_SEED
    ignore_eos: bool = False

    def sampler_names(self) -> tuple[str, ...]:
        """The sampler order as canonical names (raises InvalidRequest on unknown names)."""
        return parse_samplers(self.samplers)

    def validate(self, limits: SamplingLimits = DEFAULT_SAMPLING_LIMITS) -> None:
        """Raise InvalidRequest naming the first option whose value is out of range or over
        one of the server's `limits`."""
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, float) and math.isnan(v):
                raise InvalidRequest(f"{f.name} must be a number, got NaN")
        _finite(
            self,
            "temperature",
            "dynatemp_range",
            "dynatemp_exponent",
            "top_p",
            "min_p",
            "typical_p",
            "top_n_sigma",
            "xtc_probability",
            "xtc_threshold",
            "repeat_penalty",
            "presence_penalty",
            "frequency_penalty",
            "dry_multiplier",
            "dry_base",
            "mirostat_tau",
            "mirostat_eta",
            "adaptive_target",
            "adaptive_decay",
        )
        _int_at_least(self, -1, "top_k", "repeat_last_n", "dry_penalty_last_n")
        _int_at_least(self, 0, "dry_allowed_length", "n_probs", "min_keep")
        _within(self, 0.0, 1.0, "top_p", "min_p", "xtc_probability", "xtc_threshold")
        _within(self, 0.0, 0.99, "adaptive_decay")
        if self.dynatemp_range < 0:
            raise InvalidRequest(
                f"dynatemp_range must be >= 0, got {self.dynatemp_range}"
            )
        if self.typical_p < 0:
            raise InvalidRequest(f"typical_p must be >= 0, got {self.typical_p}")
        if self.repeat_penalty <= 0:
            raise InvalidRequest(
                f"repeat_penalty must be greater than 0, got {self.repeat_penalty}"
            )
        if self.mirostat not in (0, 1, 2):
            raise InvalidRequest(f"mirostat must be 0, 1 or 2, got {self.mirostat!r}")
        if not isinstance(self.seed, int) or not -(2**31) <= self.seed <= 0xFFFFFFFF:
            raise InvalidRequest(
                f"seed must be a 32-bit integer (-1: random), got {self.seed!r}"
            )
        breakers = self.dry_sequence_breakers
        if isinstance(breakers, str) or not all(isinstance(b, str) for b in breakers):
            raise InvalidRequest("dry_sequence_breakers must be a list of strings")
        if len(breakers) > limits.max_dry_breakers:
            raise InvalidRequest(
                f"dry_sequence_breakers has {len(breakers)} entries; at most {limits.max_dry_breakers} are accepted"
            )
        if len(self.logit_bias) > limits.max_logit_bias:
            raise InvalidRequest(
                f"logit_bias has {len(self.logit_bias)} entries; at most {limits.max_logit_bias} are accepted"
            )
        if self.n_probs > limits.max_n_probs:
            raise InvalidRequest(
                f"n_probs is {self.n_probs}; this server returns at most {limits.max_n_probs} probabilities "
                "per token (--max-n-probs)"
            )
        for item in self.logit_bias:
            if (
                not isinstance(item, (tuple, list))
                or len(item) != 2
                or isinstance(item[0], bool)
                or not isinstance(item[0], int)
                or item[0] < 0
            ):
                raise InvalidRequest(
                    f"logit_bias entries must be (token id, bias) pairs, got {item!r}"
                )
            if (
                item[1] is True
                or not isinstance(item[1], (int, float))
                or math.isnan(float(item[1]))
            ):
                raise InvalidRequest(
                    f"logit_bias for token {item[0]} must be a number, got {item[1]!r}"
                )
        self.sampler_names()


def _finite(p: SamplingParams, *names: str) -> None:
    for name in names:
        v = getattr(p, name)
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float))
            or not math.isfinite(v)
        ):
            raise InvalidRequest(f"{name} must be a finite number, got {v!r}")


def _int_at_least(p: SamplingParams, low: int, *names: str) -> None:
    for name in names:
        v = getattr(p, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise InvalidRequest(f"{name} must be an integer >= {low}, got {v!r}")


def _within(p: SamplingParams, low: float, high: float, *names: str) -> None:
    for name in names:
        v = getattr(p, name)
        if not low <= v <= high:
            raise InvalidRequest(f"{name} must be between {low} and {high}, got {v}")
