"""GET /openapi.json: an OpenAPI 3.1 document of the JSON API, generated from the app itself.

Paths and methods come from the app's URL map (every alias included); request bodies are the
`request_models` the handlers validate with; success bodies and statuses are declared per
endpoint below. Error responses are llama-server's error JSON. The chat page's files and
/cors-proxy are not part of the JSON API and are left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from llamacli.http import request_models as rm
from llamacli.http.request_models import RequestModel, Schema

ERROR: Schema = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {"code": {"type": "integer"}, "message": {"type": "string"}, "type": {"type": "string"}},
            "required": ["code", "message", "type"],
        }
    },
    "required": ["error"],
}


def _obj(*required: str, **props: Schema) -> Schema:
    return {"type": "object", "properties": props, "required": list(required)}


_INT: Schema = {"type": "integer"}
_STR: Schema = {"type": "string"}
_ARR: Schema = {"type": "array"}
_USAGE = _obj("prompt_tokens", "completion_tokens", "total_tokens", prompt_tokens=_INT, completion_tokens=_INT,
              total_tokens=_INT)
_COMPLETION_ONE = _obj("content", "stop", "tokens_predicted", "tokens_evaluated", content=_STR,
                       stop={"type": "boolean"}, tokens_predicted=_INT, tokens_evaluated=_INT)
# with response_fields only the chosen fields are left, so the shape is open
_COMPLETION: Schema = {"anyOf": [{"type": "object"}, {"type": "array", "items": {"type": "object"}}]}
# one server-sent event: `data:` is JSON text (or [DONE]); Anthropic streams name their events
SSE_EVENT: Schema = {"type": "object", "properties": {"data": _STR, "event": _STR}}
_INPUT_TOKENS = _obj("input_tokens", input_tokens=_INT)


@dataclass(frozen=True)
class Op:
    """One endpoint (all its paths): what it takes and what it answers."""

    summary: str
    body: RequestModel | None = None
    ok: Schema | None = None  # the 200 JSON body
    stream: bool = False  # 200 may also be text/event-stream (with "stream": true)
    text: bool = False  # 200 is text/plain
    errors: tuple[int, ...] = (400,)


OPS: dict[str, Op] = {
    "admin.health": Op("Health check", ok=_obj("status", status=_STR), errors=()),
    "admin.models": Op("The served model (OpenAI list)", ok=_obj("object", "data", object=_STR, data=_ARR), errors=()),
    "admin.props": Op("Server properties", ok=_obj("default_generation_settings", "total_slots", "model_path",
                                                   default_generation_settings={"type": "object"},
                                                   total_slots=_INT, model_path=_STR), errors=()),
    "admin.set_props": Op("Change the default generation settings (--props)", rm.PROPS,
                          _obj("success", success={"type": "boolean"}), errors=(400, 501)),
    "admin.slots": Op("Slot states", ok={"type": "array", "items": _obj("id", "n_ctx", "is_processing", id=_INT,
                                                                          n_ctx=_INT, is_processing={"type": "boolean"})},
                      errors=(501,)),
    "admin.slot_action": Op("Save, restore or erase a slot's cache (--slot-save-path)", rm.SLOT_FILE,
                            _obj("id_slot", id_slot=_INT), errors=(400, 404, 409, 501)),
    "admin.metrics": Op("Prometheus metrics (--metrics)", text=True, errors=(501,)),
    "admin.openapi": Op("This document", ok=_obj("openapi", "paths", openapi=_STR, paths={"type": "object"}), errors=()),
    "native.completion": Op("llama-server's completion", rm.COMPLETION, _COMPLETION, stream=True),
    "native.infill": Op("Fill in the middle (code models with FIM tokens)", rm.INFILL, _COMPLETION, stream=True,
                        errors=(400, 501)),
    "native.tokenize": Op("Text to tokens", rm.TOKENIZE, _obj("tokens", tokens=_ARR)),
    "native.detokenize": Op("Tokens to text", rm.DETOKENIZE, _obj("content", content=_STR)),
    "native.apply_template": Op("Render a chat through the template", rm.APPLY_TEMPLATE, _obj("prompt", prompt=_STR),
                                errors=(400, 501)),
    "native.embedding": Op("llama-server's embeddings (--embeddings)", rm.EMBEDDING,
                           {"type": "array", "items": _obj("index", "embedding", index=_INT, embedding=_ARR)},
                           errors=(400, 501)),
    "oai.chat_completions": Op("OpenAI chat completion", rm.CHAT, _obj(
        "id", "object", "created", "model", "choices", "usage", id=_STR, object={"const": "chat.completion"},
        created=_INT, model=_STR, choices={"type": "array", "items": _obj("index", "message", "finish_reason")},
        usage=_USAGE), stream=True, errors=(400, 501)),
    "oai.chat_input_tokens": Op("Token count of a chat request", rm.CHAT, _INPUT_TOKENS, errors=(400, 501)),
    "oai.responses_input_tokens": Op("Token count of a Responses request", rm.RESPONSES_INPUT_TOKENS, _INPUT_TOKENS),
    "oai.completions": Op("OpenAI text completion", rm.V1_COMPLETION, _obj(
        "id", "object", "created", "model", "choices", "usage", id=_STR, object={"const": "text_completion"},
        created=_INT, model=_STR, choices={"type": "array", "items": _obj("index", "text", "finish_reason")},
        usage=_USAGE), stream=True, errors=(400, 501)),
    "oai.v1_embeddings": Op("OpenAI embeddings (--embeddings)", rm.V1_EMBEDDINGS, _obj(
        "object", "data", "model", "usage", object={"const": "list"}, model=_STR, usage={"type": "object"},
        data={"type": "array", "items": _obj("object", "index", "embedding", index=_INT)}), errors=(400, 501)),
    "anthropic.messages": Op("Anthropic Messages", rm.MESSAGES, _obj(
        "id", "type", "role", "content", "stop_reason", "usage", id=_STR, type={"const": "message"},
        role={"const": "assistant"}, content={"type": "array", "items": _obj("type", type=_STR)},
        stop_reason=_STR, usage={"type": "object"}), stream=True, errors=(400, 501)),
    "anthropic.count_tokens": Op("Anthropic token count", rm.COUNT_TOKENS, _INPUT_TOKENS, errors=(400, 501)),
    "oai.chat_control": Op("End a running completion's reasoning (reasoning_control: true)", rm.CHAT_CONTROL,
                           _obj("success", success={"type": "boolean"}, message=_STR)),
    "responses.create_response": Op("OpenAI Responses (as a chat completion)", rm.RESPONSES, _obj(
        "id", "object", "status", "output", id=_STR, object={"const": "response"}, status=_STR, output=_ARR),
        stream=True, errors=(400, 501)),
    "responses.responses_input_tokens": Op("Token count of a Responses request", rm.RESPONSES_INPUT_TOKENS,
                                           _INPUT_TOKENS, errors=(400, 501)),
    "rerank.rerank": Op("Rerank documents by a query (--rerank)", rm.RERANK,
                        {"anyOf": [_obj("results", results={"type": "array", "items": _obj("index", "relevance_score")}),
                                   {"type": "array", "items": _obj("index", "score")}]}, errors=(400, 501)),
    "tools.list_tools": Op("The server's tools (--tools, MCP servers; 403 without any)", ok={"type": "array", "items": _obj(
        "tool", "display_name", "type", "permissions", "definition", tool=_STR, display_name=_STR, type=_STR,
        permissions=_obj("write", write={"type": "boolean"}), definition={"type": "object"})}, errors=(403,)),
    "tools.call_tool": Op("Call one of the server's tools (its result; SSE with stream: true)", rm.TOOL_INVOCATION,
                          {"type": "object"}, stream=True, errors=(400, 403, 404, 501)),
    "lora.get_lora_adapters": Op("The loaded LoRA adapters and their scales",
                                 ok={"type": "array", "items": _obj("id", "path", "scale", id=_INT, path=_STR)}, errors=()),
    "lora.post_lora_adapters": Op("Set the LoRA adapters' global scales", rm.LORA_ADAPTERS,
                                  _obj("success", success={"type": "boolean"})),
}
LEFT_OUT = ("ui.", "ui_assets.", "proxy.", "static")
# Every request may also be refused for its size, its key, while the model loads, or by the
# HTTP layer (an unknown method on a known path).
COMMON_ERRORS = (401, 405, 413, 503)
_STATUS_TEXT = {400: "Invalid request", 401: "Invalid API key", 403: "The feature is disabled", 404: "No such route or tool", 405: "Method not allowed",
                409: "The slot is busy", 413: "The body is larger than --max-body-size", 501: "Not supported by this server",
                503: "The model is loading, or no slot is free"}
_PARAMS: dict[str, list[dict[str, Any]]] = {
    "admin.slots": [{"name": "fail_on_no_slot", "in": "query", "schema": {"type": "string"},
                     "description": "1 or true: 503 when every slot is busy"}],
    "admin.slot_action": [{"name": "action", "in": "query", "required": True,
                           "schema": {"type": "string", "enum": ["save", "restore", "erase"]}}],
}


def openapi_document(app: Any, title: str = "llama serve", version: str = "0.1.0") -> dict[str, Any]:
    """The document for `app` (a Quart app from create_app)."""
    paths: dict[str, dict[str, Any]] = {}
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        if rule.endpoint.startswith(LEFT_OUT):
            continue
        op = OPS.get(rule.endpoint, Op(rule.endpoint))
        path = re.sub(r"<(?:(\w+):)?(\w+)>", r"{\2}", rule.rule)
        body = None
        if rule.endpoint == "tools.call_tool" and app.extensions["llama"].tools:
            body = rm.tool_invocations(app.extensions["llama"].tools.listing())
        for method in sorted(m for m in rule.methods or () if m in ("GET", "POST")):
            item = _operation(rule, op, method, body)
            paths.setdefault(path, {})[method.lower()] = item
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version,
                 "description": "llama-server's HTTP API as `llama serve` implements it (docs/http-api.md)."},
        "paths": paths,
        "components": {"schemas": {"Error": ERROR}},
    }


def _operation(rule: Any, op: Op, method: str, body: Schema | None = None) -> dict[str, Any]:
    """One operation; `body` replaces the request model's schema (the server's own tools)."""
    alias = rule.rule.strip("/").replace("/", "_").replace("-", "_").replace("<", "").replace(">", "").replace(":", "_")
    item: dict[str, Any] = {"summary": op.summary, "operationId": f"{method.lower()}_{alias or 'root'}"}
    params = [dict(p) for p in _PARAMS.get(rule.endpoint, [])]
    for conv, name in re.findall(r"<(?:(\w+):)?(\w+)>", rule.rule):
        params.append({"name": name, "in": "path", "required": True,
                       "schema": {"type": "integer", "minimum": 0} if conv == "int" else {"type": "string"}})
    if params:
        item["parameters"] = params
    if method == "POST" and op.body is not None:
        schema = body if body is not None else op.body.json_schema()
        item["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
    ok: dict[str, Any] = {}
    if op.text:
        ok["text/plain"] = {"schema": {"type": "string"}}
    else:
        ok["application/json"] = {"schema": op.ok or {}}
    if op.stream:
        ok["text/event-stream"] = {"schema": SSE_EVENT}
    responses: dict[str, Any] = {"200": {"description": "OK", "content": ok}}
    err = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for code in sorted(set(op.errors) | set(COMMON_ERRORS)):
        responses[str(code)] = {"description": _STATUS_TEXT.get(code, "Error"), "content": err}
    item["responses"] = responses
    return item
