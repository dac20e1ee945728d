"""Request bodies -> engine parameters, with type checks that name the bad field.

`Body` wraps a decoded JSON object and reads typed fields (a wrong type is a 400 naming the
field). `task_params` turns llama-server's /completion fields (every llama.cpp sampling field,
n_predict, stop, n_probs, ...) into a `TaskParams`, starting from the server's defaults. The
OpenAI and Anthropic modules rename their fields into these names first.

Sampling fields are read generically from `SamplingParams`' dataclass fields, so a field the
sampling package adds later is accepted here without changes. `grammar`, `json_schema` and
`response_format` become the task's grammar spec (core/text/grammar) when the build has it.
"""

from __future__ import annotations

import builtins
import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llamacli.core.sampling import DEFAULT_SAMPLING_LIMITS, SamplingLimits, SamplingParams, resolve_logit_bias
from llamacli.core.speculative.config import DraftParams
from llamacli.core.runtime.tasks import TaskParams
from llamacli.http.errors import ApiError, bad_request
from llamacli.http.limits import DEFAULT_STOP_LIMITS, StopLimits, check_stop_strings

_MISSING: Any = object()
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json_body(raw: bytes) -> dict[str, Any]:
    """Decode a request body that must be one JSON object (400 otherwise)."""
    data = parse_json(raw)
    if not isinstance(data, dict):
        raise bad_request(f"the request body must be a JSON object, got {_json_type(data)}")
    return data


def parse_json(raw: bytes) -> Any:
    """Decode a JSON request body of any type (400 when it is empty or not JSON)."""
    if not raw.strip():
        raise bad_request("the request body is empty; send a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise bad_request("the request body is not valid UTF-8") from None
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        raise bad_request(f"invalid JSON in the request body: {e}") from None
    return data


class Body:
    """Typed access to a JSON object's fields; `prefix` names nested objects in messages."""

    def __init__(self, data: Mapping[str, Any], prefix: str = "") -> None:
        self.data = data
        self.prefix = prefix

    def __contains__(self, key: str) -> bool:
        return key in self.data and self.data[key] is not None

    def raw(self, key: str, default: Any = None) -> Any:
        v = self.data.get(key)
        return default if v is None else v

    def _bad(self, key: str, want: str, v: Any) -> ApiError:
        return bad_request(f"'{self.prefix}{key}' must be {want}, got {_json_type(v)} {json.dumps(v)[:60]}")

    def int(self, key: str, default: Any = _MISSING, lo: int | None = INT32_MIN, hi: int | None = INT32_MAX) -> Any:
        """An integer field (a float with no fraction counts); llama.cpp's integer fields are
        32-bit, so that is the range unless the caller gives another."""
        if key not in self:
            return self._default(key, default)
        v = self.data[key]
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self._bad(key, "an integer", v)
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            rng = f">= {lo}" if hi is None else (f"<= {hi}" if lo is None else f"between {lo} and {hi}")
            raise bad_request(f"'{self.prefix}{key}' must be {rng}, got {v}")
        return v

    def float(self, key: str, default: Any = _MISSING) -> Any:
        if key not in self:
            return self._default(key, default)
        v = self.data[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self._bad(key, "a number", v)
        return float(v)

    def bool(self, key: str, default: Any = _MISSING) -> Any:
        if key not in self:
            return self._default(key, default)
        v = self.data[key]
        if not isinstance(v, bool):
            raise self._bad(key, "a boolean", v)
        return v

    def str(self, key: str, default: Any = _MISSING) -> Any:
        if key not in self:
            return self._default(key, default)
        v = self.data[key]
        if not isinstance(v, str):
            raise self._bad(key, "a string", v)
        return v

    # below the methods named str and bool, the builtins are spelt builtins.str, builtins.bool
    def str_list(self, key: builtins.str, default: Any = _MISSING, allow_str: builtins.bool = False) -> Any:
        """A list of strings (or, with allow_str, one string meaning a list of one)."""
        if key not in self:
            return self._default(key, default)
        v = self.data[key]
        if allow_str and isinstance(v, str):
            return [v]
        if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
            raise self._bad(key, "an array of strings" + (" or a string" if allow_str else ""), v)
        return list(v)

    def list(self, key: builtins.str, default: Any = _MISSING) -> Any:
        if key not in self:
            return self._default(key, default)
        v = self.data[key]
        if not isinstance(v, list):
            raise self._bad(key, "an array", v)
        return v

    def obj(self, key: builtins.str, default: Any = _MISSING) -> Any:
        if key not in self:
            return self._default(key, default)
        v = self.data[key]
        if not isinstance(v, dict):
            raise self._bad(key, "an object", v)
        return v

    def _default(self, key: builtins.str, default: Any) -> Any:
        if default is _MISSING:
            raise bad_request(f"'{self.prefix}{key}' is required")
        return default


# ---- sampling and task parameters -------------------------------------------------------------

# Fields handled specially (not by their default's type).
_SPECIAL = {"logit_bias", "samplers", "dry_sequence_breakers", "seed"}


def _load_grammar_from_request() -> Callable[[Mapping[str, Any]], Any] | None:
    """core/text/grammar's request reader; None when constrained decoding is absent from a build
    (then such requests are refused)."""
    try:
        from llamacli.core.text.grammar.spec import grammar_from_request
    except ImportError:  # pragma: no cover - depends on the build
        return None
    return grammar_from_request


_grammar_from_request = _load_grammar_from_request()


def _field_default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


SAMPLING_FIELDS: dict[str, Any] = {f.name: _field_default(f) for f in dataclasses.fields(SamplingParams)}


def sampling_params(
    body: Body, defaults: SamplingParams, tokenizer: Any, n_vocab: int, limits: SamplingLimits = DEFAULT_SAMPLING_LIMITS
) -> SamplingParams:
    """The request's sampling options over the server defaults (llama-server's field names)."""
    kw: dict[str, Any] = {}
    for name, default in SAMPLING_FIELDS.items():
        if name not in body:
            continue
        if name in _SPECIAL:
            continue
        if isinstance(default, bool):
            kw[name] = body.bool(name)
        elif isinstance(default, int):
            kw[name] = body.int(name)
        elif isinstance(default, float):
            kw[name] = body.float(name)
        elif isinstance(default, str):
            kw[name] = body.str(name)
        else:
            kw[name] = body.raw(name)
    if "seed" in body:
        seed = body.int("seed", hi=0xFFFFFFFF)
        kw["seed"] = 0xFFFFFFFF if seed == -1 else seed
    if "samplers" in body:
        v = body.raw("samplers")
        if not isinstance(v, str) and not (isinstance(v, list) and all(isinstance(s, str) for s in v)):
            raise bad_request("'samplers' must be an array of sampler names or a string of sampler letters")
        kw["samplers"] = v if isinstance(v, str) else tuple(v)
    if "dry_sequence_breakers" in body:
        kw["dry_sequence_breakers"] = tuple(body.str_list("dry_sequence_breakers"))
    if "logit_bias" in body:
        raw = body.raw("logit_bias")
        if not isinstance(raw, (list, dict)):
            raise bad_request("'logit_bias' must be an array of [token, bias] pairs or an object")
        kw["logit_bias"] = resolve_logit_bias(raw, tokenizer, n_vocab, limits)
    return dataclasses.replace(defaults, **kw)


_TASK_FIELDS = {f.name for f in dataclasses.fields(TaskParams)}


def grammar_spec(data: Mapping[str, Any]) -> Any:
    """The output constraint a request asks for (`grammar`, `json_schema`, `response_format`),
    or None. Without grammar support such a request is a 400, never an unconstrained answer."""
    if _grammar_from_request is not None and "grammar" in _TASK_FIELDS:
        return _grammar_from_request(data)
    rf = data.get("response_format")
    if (
        data.get("grammar") not in (None, "")
        or data.get("json_schema") is not None
        or (rf is not None and not (isinstance(rf, dict) and rf.get("type", "text") == "text"))
    ):
        raise bad_request(
            "constrained decoding (grammar, json_schema, response_format) is not available in this build; "
            "the request is refused rather than answered unconstrained"
        )
    return None


def task_params(
    body: Body, base: TaskParams, tokenizer: Any, n_vocab: int,
    sampling_limits: SamplingLimits = DEFAULT_SAMPLING_LIMITS, stop_limits: StopLimits = DEFAULT_STOP_LIMITS,
) -> TaskParams:
    """llama-server's /completion options (n_predict, stop, n_probs, ...) plus sampling, over
    the server's defaults `base`, within the server's limits."""
    sp = sampling_params(body, base.sampling, tokenizer, n_vocab, sampling_limits)
    n_predict = body.int("n_predict", base.n_predict)
    if n_predict < -1:
        raise bad_request(f"'n_predict' must be -1 (no limit) or a number of tokens >= 0, got {n_predict}")
    if n_predict == -1:
        # llama-server: a request's -1 means the server's -n; -n is a default, not a cap
        n_predict = base.n_predict
    n_probs = body.int("n_probs", sp.n_probs, lo=0)
    post = body.bool("post_sampling_probs", sp.post_sampling_probs)
    ignore_eos = body.bool("ignore_eos", sp.ignore_eos)
    sp = dataclasses.replace(sp, n_probs=n_probs, post_sampling_probs=post, ignore_eos=ignore_eos)
    if ignore_eos:
        # llama-server appends a -inf bias per end-of-generation token (its generation settings
        # show them); the sampler bans them for ignore_eos anyway, so this changes no output.
        eog = sorted(getattr(getattr(tokenizer, "vocab", None), "eog_ids", ()) or ())
        have = set(sp.logit_bias)
        extra_bias = [(t, float("-inf")) for t in eog if (t, float("-inf")) not in have]
        if extra_bias:
            biases = list(sp.logit_bias) + extra_bias
            sp = dataclasses.replace(sp, logit_bias=tuple(biases) if isinstance(sp.logit_bias, tuple) else biases)
    extra: dict[str, Any] = {}
    spec = grammar_spec(body.data)
    if spec is not None:
        extra["grammar"] = spec
    stop = body.str_list("stop", list(base.stop), allow_str=True)
    check_stop_strings(stop, stop_limits)
    return TaskParams(
        **extra,
        n_predict=n_predict,
        sampling=sp,
        stop=stop,
        cache_prompt=body.bool("cache_prompt", base.cache_prompt),
        n_keep=body.int("n_keep", base.n_keep, lo=-1),
        n_probs=n_probs,
        post_sampling_probs=post,
        ignore_eos=ignore_eos,
        id_slot=body.int("id_slot", -1, lo=-1),
        t_max_predict_ms=body.float("t_max_predict_ms", 0.0),
        timings_per_token=body.bool("timings_per_token", False),
        # progress chunks only exist in a stream (llama-server sends them only then)
        return_progress=body.bool("return_progress", False) and body.bool("stream", False),
        speculative=speculative_params(body, base.speculative),
    )


def lora_scales(entries: Any, n_adapters: int, what: str = "lora") -> tuple[float, ...]:
    """[{"id": i, "scale": s}, ...] -> one scale per adapter (0 where not listed)."""
    if not isinstance(entries, list):
        raise bad_request(f"'{what}' must be an array of objects with 'id' and 'scale' fields")
    scales = [0.0] * n_adapters
    for e in entries:
        if not isinstance(e, dict):
            raise bad_request(f"'{what}' must be an array of objects with 'id' and 'scale' fields")
        i, s = e.get("id"), e.get("scale", 0.0)
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_adapters:
            raise bad_request(f"'{what}': invalid adapter id {i!r} (loaded adapters: {n_adapters})")
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
            raise bad_request(f"'{what}': the scale of adapter {i} must be a number")
        scales[i] = float(s)
    return tuple(scales)


def speculative_params(body: Body, base: DraftParams | None) -> DraftParams | None:
    """llama-server's per-request `speculative.n_max` / `.n_min` / `.p_min` (n_min clamped to
    n_max, as llama-server does); None when the server does not speculate."""
    if base is None:
        return None
    n_max = body.int("speculative.n_max", base.n_max, lo=0)
    n_min = min(body.int("speculative.n_min", base.n_min, lo=0), n_max)
    p_min = body.float("speculative.p_min", base.p_min)
    if not 0.0 <= p_min <= 1.0:
        raise bad_request(f"'speculative.p_min' must be between 0 and 1, got {p_min}")
    return DraftParams(n_max, n_min, p_min)


def check_token_ids(tokens: Sequence[Any], n_vocab: int, what: str = "prompt") -> list[int]:
    out = []
    for t in tokens:
        if isinstance(t, bool) or not isinstance(t, int):
            raise bad_request(f"the {what} holds {json.dumps(t)[:40]}, which is not a token id")
        if not 0 <= t < n_vocab:
            raise bad_request(f"the {what} holds token id {t}, outside the vocabulary (0..{n_vocab - 1})")
        out.append(t)
    return out
