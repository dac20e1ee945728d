"""The request bodies of every POST endpoint, declared once: the handlers validate with them
(`RequestModel.parse`) and /openapi.json describes them (`RequestModel.json_schema`).

A `Field` is one top-level field: its JSON Schema and the `Body` reader that checks it (a wrong
type or a value out of range is a 400 naming the field). Scalar fields are checked here, before
the handler reads anything. Structured fields (`messages`, `prompt`, `tools`, ...) are checked
by the translation function that reads them (oai.chat_messages, native.split_prompts, ...): their
schema here describes what that function accepts. Unknown fields pass (llama.cpp's own fields
ride along with OpenAI and Anthropic requests) unless the model is `closed` (POST /props).

Sampling fields are derived from `SamplingParams` (params.SAMPLING_FIELDS), so a field the
sampling package adds is accepted and documented without changes here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llamacli.core.text.reasoning import REASONING_FORMATS
from llamacli.http.errors import bad_request
from llamacli.http.limits import check_strings
from llamacli.http.params import INT32_MAX, INT32_MIN, SAMPLING_FIELDS, Body

Schema = dict[str, Any]


@dataclass(frozen=True)
class Field:
    """One top-level field of a request body."""

    name: str
    schema: Schema
    check: Callable[[Body, str], Any] | None = None  # None: the handler's translation checks it
    required: bool = False


def integer(name: str, lo: int = INT32_MIN, hi: int = INT32_MAX, doc: str = "", required: bool = False) -> Field:
    return Field(name, _doc({"type": "integer", "minimum": lo, "maximum": hi}, doc),
                 lambda b, k: b.int(k, lo=lo, hi=hi), required)


def number(name: str, doc: str = "", lo: float | None = None, hi: float | None = None) -> Field:
    s: Schema = {"type": "number"}
    if lo is not None:
        s["minimum"] = lo
    if hi is not None:
        s["maximum"] = hi

    def check(b: Body, k: str) -> float:
        v = b.float(k)
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise bad_request(f"'{k}' must be between {lo} and {hi}, got {v}")
        return v

    return Field(name, _doc(s, doc), check)


def boolean(name: str, doc: str = "") -> Field:
    return Field(name, _doc({"type": "boolean"}, doc), lambda b, k: b.bool(k))


def string(name: str, doc: str = "", enum: tuple[str, ...] = (), required: bool = False) -> Field:
    s: Schema = {"type": "string"}
    if enum:
        s["enum"] = list(enum)

    def check(b: Body, k: str) -> str:
        v = b.str(k)
        if enum and v not in enum:
            raise bad_request(f"'{k}' must be one of {', '.join(enum)}, got {v!r}")
        return v

    return Field(name, _doc(s, doc), check, required)


def strings(name: str, doc: str = "", allow_str: bool = False, max_items: int | None = None,
            max_len: int | None = None) -> Field:
    item: Schema = {"type": "string"} if max_len is None else {"type": "string", "maxLength": max_len}
    arr: Schema = {"type": "array", "items": item}
    if max_items is not None:
        arr["maxItems"] = max_items
    s = {"anyOf": [item, arr]} if allow_str else arr

    def check(b: Body, k: str) -> list[str]:
        v: list[str] = b.str_list(k, allow_str=allow_str)
        check_strings(v, k, max_items, max_len)
        return v

    return Field(name, _doc(s, doc), check)


def obj(name: str, doc: str = "", schema: Schema | None = None) -> Field:
    return Field(name, _doc(schema or {"type": "object"}, doc), lambda b, k: b.obj(k))


def shaped(name: str, schema: Schema, doc: str = "", required: bool = False) -> Field:
    """A structured field: the handler's translation function checks it."""
    return Field(name, _doc(schema, doc), None, required)


def _doc(schema: Schema, doc: str) -> Schema:
    return {**schema, "description": doc} if doc else schema


@dataclass(frozen=True)
class RequestModel:
    """The JSON object a POST endpoint takes."""

    name: str
    fields: tuple[Field, ...]
    closed: bool = False  # unknown fields are a 400
    doc: str = ""
    by_name: dict[str, Field] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name = {f.name: f for f in self.fields}  # a later field of the same name wins
        object.__setattr__(self, "fields", tuple(by_name.values()))
        object.__setattr__(self, "by_name", by_name)

    def parse(self, data: Mapping[str, Any], prefix: str = "") -> Body:
        """Check every declared field that is present (and the required ones); a Body over data."""
        body = Body(data, prefix)
        if self.closed:
            unknown = sorted(k for k in data if k not in self.by_name)
            if unknown:
                raise bad_request(f"unknown field '{prefix}{unknown[0]}' (accepted: {', '.join(sorted(self.by_name))})")
        for f in self.fields:
            if f.name not in body:
                if f.required:
                    raise bad_request(f"'{prefix}{f.name}' is required")
                continue
            if f.check is not None:
                f.check(body, f.name)
        return body

    def json_schema(self) -> Schema:
        s: Schema = {
            "type": "object",
            "properties": {f.name: f.schema for f in self.fields},
            "additionalProperties": not self.closed,
        }
        req = [f.name for f in self.fields if f.required]
        if req:
            s["required"] = req
        if self.doc:
            s["description"] = self.doc
        return s

    def extend(self, name: str, *fields: Field, drop: tuple[str, ...] = (), doc: str = "") -> RequestModel:
        """This model with more fields (a field of the same name replaces the old one)."""
        names = {f.name for f in fields} | set(drop)
        return RequestModel(name, tuple(f for f in self.fields if f.name not in names) + fields, self.closed,
                            doc or self.doc)


# ---- shared pieces ----------------------------------------------------------------------------

TOKEN_IDS: Schema = {"type": "array", "items": {"type": "integer", "minimum": 0}}
PROMPT_ONE: Schema = {
    "anyOf": [
        {"type": "string"},
        {"type": "array", "items": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"}]}, "minItems": 1},
        {"type": "object", "properties": {"prompt_string": {"type": "string"}, "multimodal_data": {
            "type": "array", "items": {"type": "string"},
            "description": "base64 images or audio (WAV, MP3, FLAC), one per <__media__> marker (needs -mm)"}},
         "required": ["prompt_string"]},
    ]
}
PROMPT: Schema = {"anyOf": [PROMPT_ONE, {"type": "array", "items": PROMPT_ONE, "minItems": 1}]}
TEXT_PART: Schema = {
    "type": "object",
    "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
    "required": ["type", "text"],
}
TOOL_CALL: Schema = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "type": {"const": "function"},
        "function": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "arguments": {"anyOf": [{"type": "string"}, {"type": "object"}]}},
            "required": ["name"],
        },
    },
    "required": ["function"],
}
IMAGE_URL_PART: Schema = {
    "type": "object",
    "properties": {"type": {"const": "image_url"}, "image_url": {
        "type": "object", "properties": {"url": {"type": "string", "description": "a data: URI, base64, an http(s) URL or file://NAME under --media-path (needs -mm)"}},
        "required": ["url"]}},
    "required": ["type", "image_url"],
}
INPUT_AUDIO_PART: Schema = {
    "type": "object",
    "properties": {"type": {"const": "input_audio"}, "input_audio": {
        "type": "object", "properties": {"data": {"type": "string", "description": "base64 WAV, MP3 or FLAC (needs -mm)"},
                                         "format": {"type": "string"}},
        "required": ["data"]}},
    "required": ["type", "input_audio"],
}
CONTENT_PART: Schema = {"anyOf": [TEXT_PART, IMAGE_URL_PART, INPUT_AUDIO_PART]}
CHAT_MESSAGE: Schema = {
    "type": "object",
    "properties": {
        "role": {"type": "string", "enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": {"anyOf": [{"type": "string"}, {"type": "null"}, {"type": "array", "items": CONTENT_PART}]},
        "tool_calls": {"type": "array", "items": TOOL_CALL},
        "tool_call_id": {"type": "string"},
        "name": {"type": "string"},
    },
    "required": ["role"],
}
FUNCTION_TOOL: Schema = {
    "type": "object",
    "properties": {
        "type": {"const": "function"},
        "function": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "description": {"type": "string"}, "parameters": {"type": "object"}},
            "required": ["name"],
        },
    },
    "required": ["type", "function"],
}


def _sampling_fields() -> tuple[Field, ...]:
    """llama.cpp's sampling fields, typed from SamplingParams' defaults (ranges: its validate())."""
    special = {
        "seed": integer("seed", -1, 0xFFFFFFFF, "RNG seed; -1: random"),
        "samplers": shaped("samplers", {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
                           "sampler order: names, or a string of sampler letters"),
        "dry_sequence_breakers": strings("dry_sequence_breakers", "at most --max-dry-breakers of them"),
        "logit_bias": shaped("logit_bias", {"anyOf": [{"type": "array"}, {"type": "object"}]},
                             "[[token or text, bias or false], ...] or {token or text: bias}; at most --max-logit-bias"),
    }
    out = []
    for name, default in SAMPLING_FIELDS.items():
        if name in special:
            out.append(special[name])
        elif isinstance(default, bool):
            out.append(boolean(name))
        elif isinstance(default, int):
            out.append(integer(name))
        elif isinstance(default, float):
            out.append(number(name))
        elif isinstance(default, str):
            out.append(string(name))
    return tuple(out)


SAMPLING = _sampling_fields()

# What task_params reads (llama-server's /completion options), checked before it runs.
GENERATION = RequestModel("Generation", SAMPLING + (
    integer("n_predict", -1, doc="tokens to generate (-1: the server's -n)"),
    strings("stop", "at most --max-stop-strings, each at most --max-stop-length characters", allow_str=True),
    boolean("stream"),
    boolean("cache_prompt"),
    integer("n_keep", -1),
    integer("n_probs", 0, doc="top tokens' probabilities per generated token (at most --max-n-probs)"),
    boolean("post_sampling_probs"),
    boolean("ignore_eos"),
    integer("id_slot", -1),
    number("t_max_predict_ms"),
    boolean("timings_per_token"),
    boolean("return_progress"),
    number("sse_ping_interval", "seconds of stream silence before a ping; <= 0: none"),
    boolean("verbose"),
    shaped("grammar", {"type": "string"}, "GBNF or Lark grammar (bounded by --max-grammar-bytes, -rules, -depth)"),
    shaped("json_schema", {"type": "object"}),
    shaped("response_format", {"type": "object", "properties": {"type": {"type": "string"}}}),
    shaped("lora", {"type": "array", "items": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 0}, "scale": {"type": "number"}}, "required": ["id"]}},
        "scales of the loaded LoRA adapters for this request"),
    shaped("speculative", {"type": "object", "properties": {
        "n_max": {"type": "integer", "minimum": 0}, "n_min": {"type": "integer", "minimum": 0},
        "p_min": {"type": "number"}}}, "draft bounds (speculative decoding on)"),
))

# Reasoning models (core/text/reasoning): where thoughts go and the thinking budget
REASONING_FIELDS = (
    string("reasoning_format", enum=REASONING_FORMATS),
    integer("reasoning_budget_tokens", -1, doc="-1: the server's --reasoning-budget"),
    integer("thinking_budget_tokens", -1, doc="an alias of reasoning_budget_tokens"),
    string("reasoning_budget_message"),
)

COMPLETION = GENERATION.extend(
    "Completion",
    shaped("prompt", PROMPT, "one prompt (text, token ids, mixed) or several", required=True),
    integer("n_cmpl", 1, 16, "completions per prompt"),
    boolean("return_tokens"),
    strings("response_fields"),
)

INFILL = COMPLETION.extend(
    "Infill",
    string("input_prefix"),
    string("input_suffix"),
    shaped("input_extra", {"type": "array", "items": {"type": "object", "properties": {
        "filename": {"type": "string"}, "text": {"type": "string"}}}}),
    shaped("prompt", PROMPT_ONE),
)

TOKENIZE = RequestModel("Tokenize", (
    shaped("content", {"anyOf": [{"type": "string"}, {"type": "array", "items": {
        "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string"}]}}]}, required=True),
    boolean("add_special"),
    boolean("parse_special"),
    boolean("with_pieces"),
))

DETOKENIZE = RequestModel("Detokenize", (shaped("tokens", TOKEN_IDS),))

_CHAT_PROMPT = (
    shaped("messages", {"type": "array", "items": CHAT_MESSAGE, "minItems": 1}, required=True),
    shaped("tools", {"type": "array", "items": FUNCTION_TOOL}),
    shaped("tool_choice", {"anyOf": [{"type": "string", "enum": ["none", "auto", "required"]}, {"type": "object"}]}),
    boolean("parallel_tool_calls"),
    obj("chat_template_kwargs", "extra template variables (not messages, tools, add_generation_prompt, ...)"),
    string("reasoning_effort"),
    boolean("add_generation_prompt"),
    boolean("continue_final_message"),
)

APPLY_TEMPLATE = RequestModel("ApplyTemplate", _CHAT_PROMPT)

CHAT = GENERATION.extend(
    "ChatCompletion",
    *_CHAT_PROMPT,
    string("model"),
    integer("max_tokens", -1),
    integer("max_completion_tokens", -1),
    boolean("logprobs"),
    integer("top_logprobs", 0, 20),
    integer("n", 1, 16, "choices"),
    obj("stream_options", schema={"type": "object", "properties": {"include_usage": {"type": "boolean"}}}),
    *REASONING_FIELDS,
    boolean("reasoning_control", "arm POST /v1/chat/completions/control for this completion"),
)

# id and action are checked by the handler, with llama-server's messages ("missing completion id")
CHAT_CONTROL = RequestModel("ChatControl", (
    string("id", "the completion's id (chatcmpl-..., resp_...); required"),
    string("action", "reasoning_end; required"),
))

# POST /v1/responses: converted to a chat completion (http/responses.py); the sampling fields pass through
RESPONSES = GENERATION.extend(
    "Responses",
    shaped("input", {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}]},
           "a user message, or message / function_call / function_call_output / reasoning items", required=True),
    shaped("instructions", {"anyOf": [{"type": "string"}, {"type": "null"}]}),
    string("model"),
    shaped("tools", {"type": "array", "items": {"type": "object"}}),
    shaped("tool_choice", {"anyOf": [{"type": "string"}, {"type": "object"}]}),
    integer("max_output_tokens", 1),
    obj("reasoning", schema={"type": "object", "properties": {"effort": {"type": "string"}}}),
    obj("text", schema={"type": "object", "properties": {"format": {"type": "object"}}}),
    *REASONING_FIELDS,
    boolean("reasoning_control"),
)

V1_COMPLETION = COMPLETION.extend(
    "TextCompletion",
    string("model"),
    integer("max_tokens", -1),
    boolean("echo"),
    integer("logprobs", 0, 20),
    integer("n", 1, 16, "choices"),
    obj("stream_options", schema={"type": "object", "properties": {"include_usage": {"type": "boolean"}}}),
    drop=("n_cmpl", "return_tokens", "response_fields"),
)

RESPONSES_INPUT_TOKENS = RESPONSES.extend("ResponsesInputTokens", drop=("stream",))

EMBEDDING_INPUT: Schema = {"anyOf": [
    {"type": "string"},
    TOKEN_IDS,
    {"type": "array", "items": {"anyOf": [{"type": "string"}, TOKEN_IDS]}, "minItems": 1},
]}

V1_EMBEDDINGS = RequestModel("Embeddings", (
    shaped("input", EMBEDDING_INPUT, required=True),
    string("model"),
    string("encoding_format", enum=("float", "base64")),
))

EMBEDDING = RequestModel("NativeEmbedding", (
    shaped("content", EMBEDDING_INPUT),
    shaped("input", EMBEDDING_INPUT),
    integer("embd_normalize", -1),
), doc="`content` or `input` is required")

ANTHROPIC_BLOCKS: Schema = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object", "properties": {
    "type": {"type": "string", "enum": ["text", "tool_use", "tool_result", "thinking", "image"]},
    "source": {"type": "object", "description": "an image block's source: {type: base64, media_type, data} or {type: url, url}",
               "properties": {"type": {"type": "string", "enum": ["base64", "url"]}, "media_type": {"type": "string"},
                              "data": {"type": "string"}, "url": {"type": "string"}}}}, "required": ["type"]}}]}
ANTHROPIC_MESSAGE: Schema = {
    "type": "object",
    "properties": {"role": {"type": "string", "enum": ["user", "assistant"]}, "content": ANTHROPIC_BLOCKS},
    "required": ["role", "content"],
}
_ANTHROPIC_PROMPT = (
    string("model"),
    shaped("messages", {"type": "array", "items": ANTHROPIC_MESSAGE, "minItems": 1}, required=True),
    shaped("system", ANTHROPIC_BLOCKS),
    shaped("tools", {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "description": {"type": "string"}, "input_schema": {"type": "object"}},
        "required": ["name"]}}),
    shaped("tool_choice", {"type": "object", "properties": {"type": {"type": "string"}, "name": {"type": "string"}}}),
)

MESSAGES = GENERATION.extend(
    "Messages",
    *_ANTHROPIC_PROMPT,
    integer("max_tokens", 1, doc="required, as in Anthropic's API", required=True),
    strings("stop_sequences", "at most --max-stop-strings, each at most --max-stop-length characters"),
    obj("metadata"),
)

COUNT_TOKENS = RequestModel("CountTokens", _ANTHROPIC_PROMPT)

# POST /props: the server's default generation settings, nothing else.
PROPS_SETTINGS = RequestModel("PropsSettings", SAMPLING + (
    integer("n_predict", -1),
    integer("n_keep", -1),
    boolean("cache_prompt"),
) + REASONING_FIELDS, closed=True)

# query and documents are checked by the handler, with llama-server's messages
RERANK = RequestModel("Rerank", (
    shaped("query", {"type": "string"}, "required"),
    shaped("documents", {"type": "array", "items": {"type": "string"}}, "Jina's shape: results[{index, relevance_score}]"),
    shaped("texts", {"type": "array", "items": {"type": "string"}}, "TEI's shape: [{index, score, text}]"),
    integer("top_n", 0),
    boolean("return_text"),
    string("model"),
))


class ArrayModel(RequestModel):
    """A POST body that is a JSON array of objects (each checked by the handler)."""

    def parse(self, data: Any, prefix: str = "") -> Body:
        if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
            raise bad_request("Request body must be an array of objects")
        return Body({"items": data}, prefix)

    def json_schema(self) -> Schema:
        item = super().json_schema()
        return {"type": "array", "items": item, **({"description": self.doc} if self.doc else {})}


LORA_ADAPTERS = ArrayModel("LoraAdapters", (
    integer("id", 0, required=True),
    number("scale"),
), doc="[{id, scale}]: the loaded adapters' global scales (unlisted ones: 0)")

PROPS_DGS = RequestModel("PropsDefaultGenerationSettings", (obj("params", schema=PROPS_SETTINGS.json_schema()),),
                         closed=True)
PROPS = RequestModel("SetProps", PROPS_SETTINGS.fields + (
    obj("default_generation_settings", "{\"params\": {...}}: the same fields as at the top level",
        PROPS_DGS.json_schema()),
), closed=True)

SLOT_FILE = RequestModel("SlotFile", (string("filename", "a file name inside --slot-save-path", required=True),))

TOOL_INVOCATION = RequestModel("ToolInvocation", (
    string("tool", "the tool's name, as GET /tools lists it", required=True),
    obj("params", "the tool's arguments (its definition's parameters)"),
    boolean("stream", "stream the output as SSE (exec_shell_command)"),
), doc="A call of one of the server's tools (--tools, MCP servers)")


def tool_invocations(tools: list[dict[str, Any]]) -> Schema:
    """TOOL_INVOCATION for the tools a server has (GET /tools rows): one shape per tool, its
    name and its definition's parameters (what /openapi.json shows, so a client or a fuzzer
    can build real calls)."""
    one = TOOL_INVOCATION.json_schema()
    shapes = [{**one, "properties": {**one["properties"], "tool": {"const": t["tool"]},
                                     "params": t["definition"]["function"]["parameters"]}}
              for t in tools]
    return {"anyOf": shapes, "description": one["description"]} if shapes else one
