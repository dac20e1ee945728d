"""Per-turn generation settings (sampling + n_predict + stop strings) and `/set` parsing."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from llamacli.core.errors import InvalidRequest
from llamacli.core.text.grammar.spec import GrammarSpec
from llamacli.core.sampling import SamplingParams
from llamacli.core.runtime.tasks import TaskParams

# /set names that are not SamplingParams field names (llama-cli flag spellings)
ALIASES = {
    "temp": "temperature",
    "n": "n_predict",
    "predict": "n_predict",
    "typical": "typical_p",
    "top_nsigma": "top_n_sigma",
    "mirostat_lr": "mirostat_eta",
    "mirostat_ent": "mirostat_tau",
    "dynatemp_exp": "dynatemp_exponent",
    "reverse_prompt": "stop",
    "sampling_seq": "samplers",
    "sampler_seq": "samplers",
}
# SamplingParams fields /set does not offer (structured values, or per-request output options)
HIDDEN = {"logit_bias", "dry_sequence_breakers", "n_probs", "post_sampling_probs", "ignore_eos", "min_keep"}
SHOWN = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "seed")
_SAMPLING_FIELDS = {f.name: f for f in dataclasses.fields(SamplingParams)}
_TRUE = {"1", "true", "on", "yes"}
_FALSE = {"0", "false", "off", "no"}


def param_names() -> list[str]:
    """Names /set accepts (for completion and /help)."""
    names = {"n_predict", "stop", "ignore_eos", *(n for n in _SAMPLING_FIELDS if n not in HIDDEN), *ALIASES}
    return sorted(names)


@dataclass
class ChatSettings:
    sampling: SamplingParams = field(default_factory=SamplingParams)
    n_predict: int = -1
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    grammar: GrammarSpec | None = None  # --grammar / --json-schema: every answer follows it
    reasoning_budget: int = -1  # --reasoning-budget: thinking tokens before the end tag is forced
    reasoning_budget_message: str = ""  # written before the forced end tag

    def task_params(self) -> TaskParams:
        return TaskParams(
            n_predict=self.n_predict,
            sampling=dataclasses.replace(self.sampling),
            stop=list(self.stop),
            ignore_eos=self.ignore_eos,
            grammar=self.grammar,
        )

    def set(self, name: str, value: str) -> tuple[str, Any]:
        """`/set NAME VALUE`: parse VALUE for NAME, validate, apply. Returns (canonical name,
        new value); raises InvalidRequest (and changes nothing) when either is wrong."""
        key = name.strip().lower().replace("-", "_")
        key = ALIASES.get(key, key)
        value = value.strip()
        if key == "n_predict":
            n = _parse_int(key, value)
            if n < -1:
                raise InvalidRequest(f"n_predict must be -1 (no limit) or more, got {n}")
            self.n_predict = n
            return key, n
        if key == "stop":
            self.stop = [] if value.lower() in ("", "none", "[]") else [s.encode().decode("unicode_escape") for s in value.split("|")]
            return key, list(self.stop)
        if key == "ignore_eos":
            self.ignore_eos = _parse_bool(key, value)
            return key, self.ignore_eos
        if key not in _SAMPLING_FIELDS or key in HIDDEN:
            raise InvalidRequest(f"unknown setting {name!r} (settable: {', '.join(param_names())})")
        default = _SAMPLING_FIELDS[key].default
        parsed: Any
        if key == "samplers":
            parsed = value if ";" not in value else value.split(";")
        elif isinstance(default, bool):
            parsed = _parse_bool(key, value)
        elif isinstance(default, int):
            parsed = _parse_int(key, value)
        else:
            parsed = _parse_float(key, value)
        candidate = dataclasses.replace(self.sampling, **{key: parsed})
        candidate.validate()
        self.sampling = candidate
        return key, parsed

    def summary(self) -> dict[str, Any]:
        """The usual settings, plus every sampling field changed from llama.cpp's default."""
        out: dict[str, Any] = {"n_predict": self.n_predict}
        base = SamplingParams()
        for name in _SAMPLING_FIELDS:
            if name in SHOWN or (name not in ("samplers",) and getattr(self.sampling, name) != getattr(base, name)):
                out[name] = getattr(self.sampling, name)
        if tuple(self.sampling.sampler_names()) != tuple(base.sampler_names()):
            out["samplers"] = ";".join(self.sampling.sampler_names())
        if out.get("seed") == 0xFFFFFFFF:
            out["seed"] = -1
        if self.stop:
            out["stop"] = list(self.stop)
        if self.ignore_eos:
            out["ignore_eos"] = True
        return out

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in dataclasses.asdict(self.sampling).items() if k not in ("logit_bias",)}
        d["dry_sequence_breakers"] = list(self.sampling.dry_sequence_breakers)
        d["samplers"] = list(self.sampling.sampler_names())
        return {"n_predict": self.n_predict, "stop": list(self.stop), "ignore_eos": self.ignore_eos, "sampling": d}


def _parse_int(name: str, value: str) -> int:
    try:
        return int(value, 0)
    except ValueError:
        raise InvalidRequest(f"{name} takes an integer, got {value!r}") from None


def _parse_float(name: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise InvalidRequest(f"{name} takes a number, got {value!r}") from None


def _parse_bool(name: str, value: str) -> bool:
    v = value.lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise InvalidRequest(f"{name} takes on/off, got {value!r}")
