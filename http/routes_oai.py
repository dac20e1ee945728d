"""OpenAI-compatible endpoints: /v1/chat/completions, /v1/completions, /v1/embeddings,
/v1/models, /v1/chat/completions/input_tokens, /v1/chat/completions/control. Translation
lives in oai.py."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from quart import Blueprint, Response

from llamacli.core.multimodal.prompt import MediaSpan
from llamacli.core.runtime.tasks import Final, Partial, Task, TaskParams, Timings
from llamacli.http import logprobs, native, oai, stream
from llamacli.http import request_models as rm
from llamacli.http.context import current_state, request_json
from llamacli.http.errors import bad_request
from llamacli.http.limits import check_count, check_text
from llamacli.http.media import tokens_with_media
from llamacli.http.params import Body, grammar_spec
from llamacli.http.routes_native import embed, embeddings_enabled
from llamacli.http.sse import DONE, data, json_response
from llamacli.http.stream import Done, Events, Failed, Frames, Piece, Ping

if TYPE_CHECKING:
    from llamacli.core.text.tool_calls import ChatSetup

bp = Blueprint("oai", __name__)


def _stream_options(body: Body) -> bool:
    opts = body.obj("stream_options", {})
    v = opts.get("include_usage", False)
    if not isinstance(v, bool):
        raise bad_request("'stream_options.include_usage' must be a boolean")
    return v


async def _chat_setup(
    req: dict[str, Any], grammar: Any = None, reasoning_format: str = "none"
) -> tuple[ChatSetup, list[int], tuple[MediaSpan, ...]]:
    """The request's ChatSetup (prompt, grammar, tool-call format), its prompt tokens and its
    images (image_url parts become `<__media__>` markers in the rendered prompt)."""
    st = current_state()
    _, model = st.require()
    msgs, urls = oai.take_media(oai.chat_messages(req, st.modalities))
    kwargs = oai.chat_template_kwargs(req, st.config.chat_template_kwargs)
    opts = oai.prompt_options(req, st.config.prefill_assistant)

    limit = st.text_limit()

    def build() -> tuple[ChatSetup, list[int], tuple[MediaSpan, ...]]:
        setup = oai.chat_setup(model.template, msgs, req, grammar, model.tokenizer, kwargs, opts, reasoning_format)
        check_text(len(setup.prompt), limit, "prompt")
        return setup, *tokens_with_media(setup.prompt, urls, st.mtmd, model.tokenizer, st.media_limits,
                                             st.config.media_path)

    return await st.blocking(build)


async def chat_task(
    req: dict[str, Any], body: Body
) -> tuple[ChatSetup, list[int], TaskParams, oai.ReasoningOptions, tuple[MediaSpan, ...]]:
    """A chat request made ready for the engine: its ChatSetup, prompt tokens, TaskParams
    (grammar, preserved tokens, reasoning budget), reasoning options and images."""
    st = current_state()
    params = await st.task_params(body)
    ropts = oai.reasoning_options(req, st.config)
    setup, prompt, media = await _chat_setup(req, params.grammar, ropts.format)
    params = dataclasses.replace(params, grammar=setup.grammar, preserved_tokens=tuple(setup.preserved_tokens),
                                 reasoning=setup.budget(ropts.budget, ropts.message, ropts.control))
    return setup, prompt, params, ropts, media


def _meta(prefix: str) -> dict[str, Any]:
    """What every object of one answer repeats: its id, creation time, model and fingerprint."""
    st = current_state()
    return {"id": oai.new_id(prefix), "created": int(time.time()), "model": st.model_id,
            "fingerprint": st.config.build_info}


def _timings(timings: Timings | None) -> dict[str, Any]:
    """A chunk's `timings` field, when there are timings to send (timings_per_token)."""
    return {"timings": timings.to_dict()} if timings is not None else {}


def _with_verbose(out: dict[str, Any], body: Body, results: list[tuple[list[Partial], Final]],
                  params: TaskParams) -> dict[str, Any]:
    """With --verbose or `"verbose": true`, llama-server's `__verbose`: the native /completion
    answer of the first choice, the rendered prompt included."""
    st = current_state()
    if not body.bool("verbose", st.config.verbose):
        return out
    engine, model = st.require()
    parts, final = results[0]
    out["__verbose"] = native.completion_json(final, parts, index=0, model=st.model_id, tokenizer=model.tokenizer,
                                              params=params, n_ctx=engine.n_ctx_slot, return_tokens=False)
    return out


def _openai_stream(head: list[bytes], frame: Callable[[Piece | Done], Iterable[bytes]],
                   usage: Callable[[list[Final]], bytes] | None) -> Callable[[Events], Frames]:
    """An OpenAI stream around a route's `frame` (the chunks of a piece, or of a task's end):
    the opening chunks, pings and in-stream errors as llama-server sends them, then (with
    stream_options.include_usage) the usage chunk over every finished task, then [DONE]."""

    async def frames(events: Events) -> Frames:
        finals: list[Final] = []
        for b in head:
            yield b
        async for ev in events:
            if isinstance(ev, (Ping, Failed)):
                yield stream.server_frame(ev)
                continue
            if isinstance(ev, Done):
                finals.append(ev.final)
            for b in frame(ev):
                yield b
        if usage is not None:
            yield usage(finals)
        yield DONE

    return frames


@bp.post("/v1/chat/completions")
@bp.post("/chat/completions")
async def chat_completions() -> Response:
    st = current_state()
    _, model = st.require()
    req = await request_json()
    rm.CHAT.parse(req)
    body = Body(oai.native_fields(req, chat=True))
    n = oai.n_choices(req)
    streamed = body.bool("stream", False)
    include_usage = _stream_options(body) if streamed else False
    n_top = body.int("top_logprobs", 0) if body.bool("logprobs", False) else None
    ping = st.ping_interval(body)
    setup, prompt, params, ropts, media = await chat_task(req, body)
    tasks = await st.submit([Task(prompt, params, media=media) for _ in range(n)])
    meta = _meta("chatcmpl-")
    st.control(meta["id"], tasks)

    if not streamed:
        results = await st.collect(tasks)
        out = oai.chat_json(results, tokenizer=model.tokenizer, n_top=n_top, setup=setup, **meta)
        return json_response(_with_verbose(out, body, results, params))

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return data(oai.chat_chunk(choices=choices, **extra, **meta))

    parsers = [setup.parser() for _ in range(n)]

    def frame(ev: Piece | Done) -> Iterator[bytes]:
        match ev:
            case Done(i, final):
                for d in oai.finish_answer(parsers[i], final):
                    yield chunk([oai.chat_delta(i, d.to_openai())])
                finish = parsers[i].finish_reason(oai.finish_reason(final))
                yield chunk([oai.chat_delta(i, {}, finish)], timings=final.timings.to_dict())
            case Piece(i, r) if r.content:  # no text (an end token, a held-back one): no chunk, as llama-server
                deltas = [d.to_openai() for d in parsers[i].feed(r.content)]
                lp = logprobs.chat_logprobs(model.tokenizer, [r], n_top) if n_top is not None else None
                for k, delta in enumerate(deltas):
                    yield chunk([oai.chat_delta(i, delta, None, lp if k == 0 else None)], **_timings(r.timings))
            case Piece(i, r) if r.progress is not None:  # return_progress: llama-server's progress chunk
                yield chunk([oai.chat_delta(i, {"role": "assistant", "content": None})],
                            prompt_progress=dict(r.progress), **_timings(r.timings))

    def usage(finals: list[Final]) -> bytes:
        return chunk([], usage=oai.usage_json(finals), **_timings(finals[-1].timings if finals else None))

    head = [chunk([oai.chat_delta(i, {"role": "assistant", "content": None}) for i in range(n)])]
    return stream.response(st, tasks, ping, _openai_stream(head, frame, usage if include_usage else None))


@bp.post("/v1/chat/completions/input_tokens")
@bp.post("/chat/completions/input_tokens")
async def chat_input_tokens() -> Response:
    st = current_state()
    st.require()
    req = await request_json()
    rm.CHAT.parse(req)
    _, prompt, _ = await _chat_setup(req, grammar_spec(req))
    return json_response({"object": "response.input_tokens", "input_tokens": len(prompt)})


@bp.post("/v1/chat/completions/control")
@bp.post("/chat/completions/control")
async def chat_control() -> Response:
    """Act on a running chat completion by its id: `reasoning_end` forces the end of its
    thinking block (it must have been started with reasoning_control: true)."""
    st = current_state()
    st.require()
    b = rm.CHAT_CONTROL.parse(await request_json())
    cmpl_id = b.str("id", "")
    if not cmpl_id:
        raise bad_request("missing completion id")
    if b.str("action", "") != "reasoning_end":
        raise bad_request("unknown control action")
    tasks = st.running(cmpl_id)
    if not tasks:
        return json_response({"success": False, "message": "no active completion for this id"})
    if not all([t.request_reasoning_end() for t in tasks]):
        return json_response({"success": False, "message": "reasoning control not enabled for this completion"})
    return json_response({"success": True})


@bp.post("/v1/completions")
async def completions() -> Response:
    st = current_state()
    _, model = st.require()
    req = await request_json()
    rm.V1_COMPLETION.parse(req)
    body = Body(oai.native_fields(req, chat=False))
    params = await st.task_params(body)
    n = oai.n_choices(req)
    streamed = body.bool("stream", False)
    if streamed:
        _stream_options(body)  # checked; the last chunk carries the usage either way
    echo = body.bool("echo", False)
    n_top = body.int("logprobs", 0) if "logprobs" in body else None
    ping = st.ping_interval(body)
    prompts = native.split_prompts(body.raw("prompt"))
    check_count(len(prompts) * n, st.config.max_prompts, "completions (prompts x n)", "--max-prompts")
    check_text(sum(native.prompt_chars(p) for p in prompts), st.text_limit(), "prompt")
    token_lists = await st.blocking(
        lambda: [native.tokenize_prompt(model.tokenizer, p, model.n_vocab) for p in prompts]
    )
    tasks = await st.submit([Task(toks, params) for toks in token_lists for _ in range(n)])
    meta = _meta("cmpl-")
    echo_texts = [model.tokenizer.detokenize(t.prompt_tokens, True, False) for t in tasks] if echo else None

    if not streamed:
        results = await st.collect(tasks)
        out = oai.text_completion_json(results, tokenizer=model.tokenizer, n_top=n_top, echo_prompts=echo_texts, **meta)
        return json_response(_with_verbose(out, body, results, params))

    def chunk(index: int, text: str, finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return oai.text_completion_chunk(index=index, text=text, finish=finish, **extra, **meta)

    def frame(ev: Piece | Done) -> Iterator[bytes]:
        match ev:
            case Done(i, final):  # with its usage, include_usage or not, as llama-server's last chunk
                yield data(chunk(i, "", oai.finish_reason(final), usage=oai.usage_json([final]),
                                 timings=final.timings.to_dict()))
            case Piece(i, r) if r.content or r.tokens:  # a chunk per token, as llama-server (an end token's is "")
                lp = logprobs.completion_logprobs(model.tokenizer, [r], n_top) if n_top is not None else None
                yield data(chunk(i, r.content, logprobs=lp, **_timings(r.timings)))
            case Piece(i, r) if r.progress is not None:
                yield data(chunk(i, "", prompt_progress=dict(r.progress), **_timings(r.timings)))

    head = [data(chunk(i, text)) for i, text in enumerate(echo_texts or [])]
    return stream.response(st, tasks, ping, _openai_stream(head, frame, None))


@bp.post("/v1/embeddings")
async def v1_embeddings() -> Response:
    st = current_state()
    _, model = st.require()
    pooling = embeddings_enabled(st)
    if pooling == "none":
        raise bad_request("Pooling type 'none' is not OAI compatible. Please use a different pooling type")
    req = await request_json()
    body = rm.V1_EMBEDDINGS.parse(req)
    encoding = body.str("encoding_format", "float")
    inputs, _ = oai.embedding_inputs(req, "input")
    finals = await embed(st, model, inputs, pooling)
    vectors = [native.embedding_rows(f, pooling, 2)[0] for f in finals]
    n_prompt = sum(len(f.prompt_tokens) for f in finals)
    return json_response(oai.embeddings_json(vectors, n_prompt, st.model_id, encoding))
