"""OpenAI's API shapes (/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models):
request fields renamed into llama-server's native ones, results turned into OpenAI objects.
Pure functions; the handlers in routes_oai.py only glue them to the engine."""

from __future__ import annotations

import base64
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from llamacli.core.multimodal.encoder import MEDIA_MARKER
from llamacli.core.runtime.tasks import Final, Partial
from llamacli.http.errors import bad_request, no_multimodal
from llamacli.http.logprobs import chat_logprobs, completion_logprobs, reported
from llamacli.http.params import Body

if TYPE_CHECKING:
    from llamacli.core.text.tool_calls import ChatSetup, Delta, ToolCallParser

FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter")


def new_id(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(24).replace("-", "x").replace("_", "y")[:32]


def finish_reason(final: Final) -> str:
    r = final.finish_reason
    return r if r in FINISH_REASONS else "stop"


# ---- requests ----------------------------------------------------------------------------------


def native_fields(data: Mapping[str, Any], chat: bool) -> dict[str, Any]:
    """The request with OpenAI's names mapped to llama-server's (llama.cpp's own fields, such
    as top_k or n_probs, pass through): max_tokens / max_completion_tokens -> n_predict,
    logprobs / top_logprobs -> n_probs. (`response_format` passes through: params.grammar_spec.)"""
    b = Body(data)
    out = dict(data)
    for name in ("max_completion_tokens", "max_tokens"):
        if name in b:
            out["n_predict"] = b.int(name, lo=-1)
            break
    if chat:
        if b.bool("logprobs", False):
            top = b.int("top_logprobs", 0, lo=0, hi=20)
            out["n_probs"] = max(1, top)
    elif "logprobs" in b:  # 0 still reports the chosen tokens' logprobs
        out["n_probs"] = max(1, b.int("logprobs", lo=0, hi=20))
    return out


def n_choices(data: Mapping[str, Any]) -> int:
    return int(Body(data).int("n", 1, lo=1, hi=16))  # request_models declares the same range


# content part type -> (the medium it carries, the key of its object)
MEDIA_PARTS = {"image_url": ("image", "image_url"), "input_audio": ("audio", "input_audio")}
_NO_MEDIA = "input is not supported - hint: if this is unexpected, you may need to provide the mmproj"


def _part_type(part: Any) -> str | None:
    """A content part's `type` when it is a string (anything else is no known type)."""
    kind = part.get("type") if isinstance(part, dict) else None
    return kind if isinstance(kind, str) else None


def _part_url(part: dict[str, Any]) -> Any:
    """An image_url part's image_url.url (or a bare string), an input_audio part's
    input_audio.data (or .url, as llama-server reads it)."""
    v = part.get(MEDIA_PARTS[part["type"]][1])
    if part["type"] == "input_audio":
        return v.get("data", v.get("url")) if isinstance(v, dict) else None
    return v.get("url") if isinstance(v, dict) else v


def chat_messages(data: Mapping[str, Any], modalities: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """`messages`, checked for shape; text parts, and image_url / input_audio parts when the
    projector takes that medium (`modalities`); other media are refused with llama-server's
    messages."""
    msgs = Body(data).list("messages")
    if not msgs:
        raise bad_request("'messages' must not be empty")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise bad_request(f"'messages[{i}]' must be an object")
        mb = Body(m, f"messages[{i}].")
        mb.str("role")
        if "tool_calls" in mb:
            _check_tool_calls(mb.list("tool_calls"), f"messages[{i}].tool_calls")
        content = m.get("content")
        if content is None or isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise bad_request(f"'messages[{i}].content' must be a string or an array of content parts")
        for part in content:
            kind = _part_type(part)
            if kind in MEDIA_PARTS:
                medium = MEDIA_PARTS[kind][0]
                if medium not in modalities:
                    raise no_multimodal(f"{medium} {_NO_MEDIA}")
                if not isinstance(_part_url(part), str):
                    where = "image_url.url" if kind == "image_url" else "input_audio.data"
                    raise bad_request(f"'messages[{i}].content' {kind} parts need {where} (a string)")
                continue
            if kind in ("input_video", "video_url"):
                raise no_multimodal(f"video {_NO_MEDIA}")
            if kind in ("image", "file"):
                raise no_multimodal(f"'messages[{i}]' has a {kind} part: this server has no multimodal support")
            if kind != "text" or not isinstance(part.get("text"), str):
                raise bad_request(f"'messages[{i}].content' parts must be {{\"type\": \"text\", \"text\": ...}}")
    if len(msgs) >= 2 and msgs[-1].get("role") == "assistant" and msgs[-2].get("role") == "assistant":
        raise bad_request("Cannot have 2 or more assistant messages at the end of the list.")
    return msgs


def take_media(msgs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The messages with each image_url / input_audio part replaced by a `<__media__>` text part
    (as llama-server does before rendering the template) and the media's data, in order."""
    urls: list[str] = []
    out: list[dict[str, Any]] = []
    for m in msgs:
        content = m.get("content")
        if not isinstance(content, list) or not any(_part_type(p) in MEDIA_PARTS for p in content):
            out.append(m)
            continue
        parts = []
        for p in content:
            if _part_type(p) in MEDIA_PARTS:
                urls.append(str(_part_url(p)))  # checked by chat_messages
                parts.append({"type": "text", "text": MEDIA_MARKER})
            else:
                parts.append(p)
        out.append(dict(m, content=parts))
    return out, urls


def _check_tool_calls(calls: list[Any], where: str) -> None:
    """An assistant message's earlier tool calls: objects with a `function` object whose `name`
    is a string and whose `arguments` are JSON text or an object (llama.cpp's
    common_chat_msgs_parse_oaicompat refuses the same with a 400)."""
    for j, c in enumerate(calls):
        cb = Body(c, f"{where}[{j}].") if isinstance(c, dict) else None
        if cb is None:
            raise bad_request(f"'{where}[{j}]' must be an object")
        if cb.str("type", "function") != "function":
            raise bad_request(f"'{where}[{j}].type' must be \"function\"")
        cb.str("id", "")
        fb = Body(cb.obj("function"), f"{where}[{j}].function.")
        fb.str("name")
        args = fb.raw("arguments", "")
        if not isinstance(args, (str, dict)):
            raise bad_request(f"'{where}[{j}].function.arguments' must be a JSON string or an object")


@dataclass(frozen=True)
class PromptOptions:
    """How a chat request's prompt ends: `add_generation_prompt` (the assistant header) and
    whether a final assistant message is continued (`continue_final_message`, vLLM's name for
    llama-server's assistant prefill)."""

    add_generation_prompt: bool = True
    continue_final: bool = True


def prompt_options(data: Mapping[str, Any], prefill_assistant: bool) -> PromptOptions:
    """The request's fields; both true is a 400, as in vLLM and llama-server."""
    b = Body(data)
    agp = b.bool("add_generation_prompt", True)
    if "continue_final_message" in b:
        cont = b.bool("continue_final_message")
        if cont and "add_generation_prompt" in b and agp:
            raise bad_request("Cannot set both add_generation_prompt and continue_final_message to true.")
        if cont:
            return PromptOptions(add_generation_prompt=False, continue_final=True)
        return PromptOptions(agp, continue_final=False)
    return PromptOptions(agp, continue_final=prefill_assistant)


def _continues(messages: list[dict[str, Any]], opts: PromptOptions) -> bool:
    last = messages[-1]
    return opts.continue_final and last.get("role") == "assistant" and not last.get("tool_calls") and len(messages) > 1


def render_chat(
    template: Any,
    messages: list[dict[str, Any]],
    tools: list[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    opts: PromptOptions | None = None,
) -> str:
    """The prompt text. A final assistant message is a prefill: the answer continues it
    (unless `opts.continue_final` is off); otherwise the prompt ends with the assistant header
    when `opts.add_generation_prompt`."""
    opts = opts or PromptOptions()
    kw = dict(kwargs or {})
    if _continues(messages, opts):
        head = template.render(messages[:-1], add_generation_prompt=True, tools=tools, **kw)
        return head + _prefill_text(messages[-1])
    return template.render(messages, add_generation_prompt=opts.add_generation_prompt, tools=tools, **kw)


def _prefill_text(msg: Mapping[str, Any]) -> str:
    """The text a final assistant message leaves for the answer to continue; text parts are
    joined by blank lines, as llama-server joins them."""
    content = msg.get("content") or ""
    if isinstance(content, list):
        content = "\n\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content


@dataclass(frozen=True)
class ReasoningOptions:
    """A chat request's reasoning settings: how thoughts are returned (reasoning_format), the
    thinking budget and the message forced before the end tag, and whether the completion
    may be ended early through /v1/chat/completions/control (reasoning_control)."""

    format: str = "auto"
    budget: int = -1
    message: str = ""
    control: bool = False


def reasoning_options(data: Mapping[str, Any], server: Any) -> ReasoningOptions:
    """The request's fields over the server's --reasoning-format / --reasoning-budget /
    --reasoning-budget-message; `thinking_budget_tokens` is an alias, -1 keeps the server's."""
    from llamacli.core.text.reasoning import REASONING_FORMATS

    b = Body(data)
    fmt = b.str("reasoning_format", server.reasoning_format)
    if fmt not in REASONING_FORMATS:
        raise bad_request(f"'reasoning_format' must be one of: {', '.join(REASONING_FORMATS)}")
    budget = b.int("reasoning_budget_tokens", b.int("thinking_budget_tokens", -1, lo=-1), lo=-1)
    return ReasoningOptions(
        format=fmt,
        budget=server.reasoning_budget if budget == -1 else budget,
        message=b.str("reasoning_budget_message", server.reasoning_budget_message),
        control=b.bool("reasoning_control", False),
    )


def reasoning_json(server: Any) -> dict[str, Any]:
    """The server's reasoning defaults in /props' default_generation_settings.params."""
    return {
        "reasoning_format": server.reasoning_format,
        "reasoning_in_content": server.reasoning_format == "deepseek-legacy",
        "reasoning_budget_tokens": server.reasoning_budget,
        "reasoning_budget_message": server.reasoning_budget_message,
    }


def chat_setup(
    template: Any,
    messages: list[dict[str, Any]],
    data: Mapping[str, Any],
    grammar: Any,
    tokenizer: Any,
    kwargs: Mapping[str, Any] | None = None,
    opts: PromptOptions | None = None,
    reasoning_format: str = "none",
) -> ChatSetup:
    """The chat request's ChatSetup (core/text/tool_calls.prepare_chat): prompt text, grammar,
    preserved tokens and the tool-call parser's format. `tools`, `tool_choice` and
    `parallel_tool_calls` are read from `data` in OpenAI's or Anthropic's shapes. A final
    assistant message is a prefill: the prompt ends with its text."""
    from llamacli.core.text.tool_calls import prepare_chat

    opts = opts or PromptOptions()
    msgs = messages
    prefill = ""
    if _continues(messages, opts):
        msgs, prefill = messages[:-1], _prefill_text(messages[-1])
    setup = prepare_chat(
        template,
        msgs,
        tools=data.get("tools") or None,
        tool_choice=data.get("tool_choice"),
        parallel_tool_calls=data.get("parallel_tool_calls"),
        grammar=grammar,
        tokenizer=tokenizer,
        add_generation_prompt=opts.add_generation_prompt or bool(prefill),
        reasoning_format=reasoning_format,
        **dict(kwargs or {}),
    )
    if prefill:
        thoughts = messages[-1].get("reasoning_content")
        setup.continue_message(prefill, thoughts if isinstance(thoughts, str) else "")
    return setup


def finish_answer(parser: ToolCallParser, final: Final) -> list[Delta]:
    """The parser's last deltas once `final` came; an answer that did not end on its own (a
    token limit, a stop string) is cut: a tool call still being written is dropped."""
    return parser.finish(cut=final.stop_type != "eos")


def parse_answer(setup: ChatSetup, final: Final) -> ToolCallParser:
    """A finished answer read whole (not streamed): `.message` holds its content, tool calls and
    thoughts, `.finish_reason(...)` says "tool_calls" when it ended with calls."""
    parser = setup.parser()
    parser.feed(final.content)
    finish_answer(parser, final)
    return parser


def chat_template_kwargs(data: Mapping[str, Any], server: Mapping[str, Any]) -> dict[str, Any]:
    """The template's extra variables: the server's, then the request's; `reasoning_effort:
    "none"` turns thinking off (enable_thinking=False), other efforts reach the template."""
    kw = dict(server)
    b = Body(data)
    kw.update(b.obj("chat_template_kwargs", {}))
    if "reasoning_effort" in b:
        effort = b.str("reasoning_effort")
        if effort == "none":
            kw["enable_thinking"] = False
        elif effort:
            kw["reasoning_effort"] = effort
    if "enable_thinking" in kw and not isinstance(kw["enable_thinking"], bool):
        raise bad_request('invalid type for "enable_thinking" (expected boolean)')
    from llamacli.core.text.tool_calls.setup import check_template_kwargs

    check_template_kwargs(kw)
    return kw


# ---- responses ---------------------------------------------------------------------------------


def usage_json(finals: Sequence[Final]) -> dict[str, Any]:
    """Usage of one request; with several choices of one prompt the prompt counts once."""
    seen: set[tuple[int, ...]] = set()
    prompt = 0
    cached = 0
    for f in finals:
        key = tuple(f.prompt_tokens)
        if key not in seen:
            seen.add(key)
            prompt += len(f.prompt_tokens)
            cached += f.tokens_cached
    completion = sum(len(f.tokens) for f in finals)
    return {
        "completion_tokens": completion,
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def timings_json(finals: Sequence[Final]) -> dict[str, Any]:
    return finals[0].timings.to_dict() if finals else {}


def _answer(
    obj: str,
    choices: list[dict[str, Any]],
    results: Sequence[tuple[Sequence[Partial], Final]],
    *,
    id: str,
    created: int,
    model: str,
    fingerprint: str,
) -> dict[str, Any]:
    """A whole (non-streamed) answer object around its choices, with usage and timings."""
    finals = [f for _, f in results]
    return {
        "id": id,
        "object": obj,
        "created": created,
        "model": model,
        "system_fingerprint": fingerprint,
        "choices": choices,
        "usage": usage_json(finals),
        "timings": timings_json(finals),
    }


def chat_json(
    results: Sequence[tuple[Sequence[Partial], Final]],
    *,
    model: str,
    id: str,
    created: int,
    tokenizer: Any,
    n_top: int | None,
    fingerprint: str,
    setup: ChatSetup | None = None,
) -> dict[str, Any]:
    """The chat.completion object; with `setup` (a ChatSetup) tool calls are parsed out of
    each answer into `message.tool_calls` (finish_reason "tool_calls")."""
    choices = []
    for i, (parts, final) in enumerate(results):
        message: dict[str, Any] = {"role": "assistant", "content": final.content}
        finish = finish_reason(final)
        if setup is not None:
            parser = parse_answer(setup, final)
            message = parser.message.to_openai()
            finish = parser.finish_reason(finish)
        choices.append(
            {
                "index": i,
                "message": message,
                "finish_reason": finish,
                "logprobs": chat_logprobs(tokenizer, reported(tokenizer, parts, final), n_top) if n_top is not None else None,
            }
        )
    return _answer("chat.completion", choices, results, id=id, created=created, model=model, fingerprint=fingerprint)


def chat_chunk(
    *, id: str, created: int, model: str, fingerprint: str, choices: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    d = {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": fingerprint,
        "choices": choices,
    }
    d.update(extra)
    return d


def chat_delta(index: int, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}


def text_completion_json(
    results: Sequence[tuple[Sequence[Partial], Final]],
    *,
    model: str,
    id: str,
    created: int,
    tokenizer: Any,
    n_top: int | None,
    echo_prompts: Sequence[str] | None,
    fingerprint: str,
) -> dict[str, Any]:
    choices = []
    for i, (parts, final) in enumerate(results):
        prefix = echo_prompts[i] if echo_prompts is not None else ""
        choices.append(
            {
                "index": i,
                "text": prefix + final.content,
                "logprobs": (completion_logprobs(tokenizer, reported(tokenizer, parts, final), n_top, len(prefix))
                             if n_top is not None else None),
                "finish_reason": finish_reason(final),
            }
        )
    return _answer("text_completion", choices, results, id=id, created=created, model=model, fingerprint=fingerprint)


def text_completion_chunk(
    *, id: str, created: int, model: str, fingerprint: str, index: int, text: str, finish: str | None,
    logprobs: Any = None, **extra: Any
) -> dict[str, Any]:
    d = {
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "system_fingerprint": fingerprint,
        "choices": [{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}],
    }
    d.update(extra)
    return d


# ---- embeddings and models ---------------------------------------------------------------------


def embedding_inputs(data: Mapping[str, Any], key: str = "input") -> tuple[list[Any], bool]:
    """The inputs of an embeddings request: strings or token-id lists; (inputs, was_a_list)."""
    raw = data.get(key)
    if raw is None and key == "input":
        raw = data.get("content")
    if raw is None:
        raise bad_request(f"'{key}' is required")
    if isinstance(raw, str):
        return [raw], False
    if isinstance(raw, list):
        if not raw:
            raise bad_request(f"'{key}' must not be empty")
        if all(isinstance(t, int) and not isinstance(t, bool) for t in raw):
            return [raw], False
        for el in raw:
            if isinstance(el, dict):
                raise no_multimodal("multimodal embedding inputs are not supported by this server")
            if not (isinstance(el, str) or (isinstance(el, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in el))):
                raise bad_request(f"'{key}' must be a string, an array of strings, or an array of token-id arrays")
        return list(raw), True
    raise bad_request(f"'{key}' must be a string, an array of strings, or an array of token-id arrays")


def embeddings_json(vectors: Sequence[np.ndarray], n_prompt: int, model: str, encoding: str) -> dict[str, Any]:
    data = []
    for i, v in enumerate(vectors):
        v = np.asarray(v, dtype=np.float32).reshape(-1)
        emb: Any = base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") if encoding == "base64" else v.tolist()
        data.append({"object": "embedding", "index": i, "embedding": emb})
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": n_prompt, "total_tokens": n_prompt},
    }


def models_json(
    model_id: str, aliases: Sequence[str], info: Any | None, tags: Sequence[str] = (), n_ctx: int = 0,
    multimodal: bool = False,
) -> dict[str, Any]:
    """/v1/models: OpenAI's list and Ollama's `models` (capabilities gain "multimodal" with a
    projector, as llama-server's get_res_models)."""
    meta = None
    created = int(time.time())
    if info is not None:
        created = info.created
        meta = {
            "vocab_type": info.vocab_type,
            "n_vocab": info.n_vocab,
            "n_ctx": n_ctx,
            "n_ctx_train": info.n_ctx_train,
            "n_embd": info.n_embd,
            "n_params": info.n_params,
            "size": info.size,
        }
    return {
        "object": "list",
        "data": [
            {
                "id": model_id,
                "object": "model",
                "created": created,
                "owned_by": "llamacpp",
                "aliases": sorted(set(aliases)),
                "tags": sorted(set(tags)),
                "meta": meta,
            }
        ],
        # llama-server also answers in Ollama's shape here
        "models": [{"name": model_id, "model": model_id, "type": "model", "capabilities": ["completion", "multimodal"] if multimodal else ["completion"]}],
    }
