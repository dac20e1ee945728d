"""Anthropic-compatible endpoints: /v1/messages (stream and not), /v1/messages/count_tokens."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from quart import Blueprint, Response

from llamacli.core.runtime.tasks import Task
from llamacli.http import anthropic, oai, stream
from llamacli.http import request_models as rm
from llamacli.http.context import current_state, request_json
from llamacli.http.limits import check_text
from llamacli.http.media import tokens_with_media
from llamacli.http.params import Body
from llamacli.http.sse import event, json_response
from llamacli.http.stream import Done, Events, Failed, Frames, Piece, Ping

if TYPE_CHECKING:
    from llamacli.core.multimodal.prompt import MediaSpan
    from llamacli.core.text.tool_calls import ChatSetup

bp = Blueprint("anthropic", __name__)


async def _setup(
    req: dict[str, Any], grammar: Any = None, reasoning_format: str = "none"
) -> tuple[ChatSetup, list[int], tuple[MediaSpan, ...]]:
    """The request's ChatSetup (prompt, grammar, tool-call format), its prompt tokens and its
    images; Anthropic's tools and tool_choice go to prepare_chat as they are."""
    st = current_state()
    _, model = st.require()
    msgs, urls = oai.take_media(anthropic.chat_messages(req, vision="image" in st.modalities))
    kwargs = dict(st.config.chat_template_kwargs)
    tools = Body(req).list("tools", None)
    fields = {"tools": tools, "tool_choice": req.get("tool_choice")}

    limit = st.text_limit()

    def build() -> tuple[ChatSetup, list[int], tuple[MediaSpan, ...]]:
        setup = oai.chat_setup(model.template, msgs, fields, grammar, model.tokenizer, kwargs,
                               oai.PromptOptions(continue_final=st.config.prefill_assistant), reasoning_format)
        check_text(len(setup.prompt), limit, "prompt")
        return setup, *tokens_with_media(setup.prompt, urls, st.mtmd, model.tokenizer, st.media_limits,
                                             st.config.media_path)

    return await st.blocking(build)


@bp.post("/v1/messages")
async def messages() -> Response:
    st = current_state()
    st.require()
    req = await request_json()
    rm.MESSAGES.parse(req)
    body = Body(anthropic.native_fields(req))
    params = await st.task_params(body)
    streamed = body.bool("stream", False)
    ping = st.ping_interval(body)
    ropts = oai.reasoning_options(body.data, st.config)
    setup, prompt, media = await _setup(req, params.grammar, ropts.format)
    params = dataclasses.replace(params, grammar=setup.grammar, preserved_tokens=tuple(setup.preserved_tokens),
                                 reasoning=setup.budget(ropts.budget, ropts.message))
    (task,) = await st.submit([Task(prompt, params, media=media)])
    msg_id = oai.new_id("msg_")

    if not streamed:
        ((_, final),) = await st.collect([task])
        message = oai.parse_answer(setup, final).message
        return json_response(anthropic.message_json(final, id=msg_id, model=st.model_id, message=message))

    async def frames(events: Events) -> Frames:
        parser = setup.parser()
        # the text block opens at once unless the answer may start with thoughts
        thinks = setup.splitter() is not None and (setup.template_thinks or setup.thinking_open)
        blocks = anthropic.BlockStream(text_open=setup.format == "content" and not thinks)
        yield event("message_start", anthropic.message_start(id=msg_id, model=st.model_id, n_prompt=len(prompt)))
        if blocks.kind == "text":
            yield event("content_block_start", anthropic.content_block_start())
        yield event("ping", {"type": "ping"})
        async for ev in events:
            match ev:
                case Ping():
                    yield event("ping", {"type": "ping"})
                case Failed(_, err):
                    yield event("error", {"type": "error", "error": {"type": err.type, "message": err.message}})
                    return
                case Done(_, final):
                    for name, payload in blocks.events(oai.finish_answer(parser, final)) + blocks.close():
                        yield event(name, payload)
                    yield event("message_delta", anthropic.message_delta(final, blocks.calls))
                    yield event("message_stop", {"type": "message_stop"})
                case Piece(_, r) if r.content:
                    for name, payload in blocks.events(parser.feed(r.content)):
                        yield event(name, payload)

    return stream.response(st, [task], ping, frames)


@bp.post("/v1/messages/count_tokens")
async def count_tokens() -> Response:
    st = current_state()
    st.require()
    req = await request_json()
    rm.COUNT_TOKENS.parse(req)
    _, prompt, _ = await _setup(req)
    return json_response({"input_tokens": len(prompt)})
