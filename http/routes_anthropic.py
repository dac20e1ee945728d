"""Anthropic-compatible endpoints: /v1/messages (stream and not), /v1/messages/count_tokens."""

from __future__ import annotations

import dataclasses
from contextlib import aclosing
from typing import Any

from quart import Blueprint, Response

from llamacli.core.runtime.tasks import Final, Task
from llamacli.http import anthropic, oai
from llamacli.http import request_models as rm
from llamacli.http.context import current_state, request_json
from llamacli.http.errors import to_api_error
from llamacli.http.params import Body
from llamacli.http.sse import event, json_response, stream_response

bp = Blueprint("anthropic", __name__)


async def _setup(req: dict[str, Any], grammar: Any = None, reasoning_format: str = "none") -> tuple[Any, list[int]]:
    """The request's ChatSetup (prompt, grammar, tool-call format) and its prompt tokens;
    Anthropic's tools and tool_choice go to prepare_chat as they are."""
    st = current_state()
    _, model = st.require()
    msgs = anthropic.chat_messages(req)
    kwargs = dict(st.config.chat_template_kwargs)
    tools = Body(req).list("tools", None)
    fields = {"tools": tools, "tool_choice": req.get("tool_choice")}

    def build() -> tuple[Any, list[int]]:
        setup = oai.chat_setup(model.template, msgs, fields, grammar, model.tokenizer, kwargs,
                               oai.PromptOptions(continue_final=st.config.prefill_assistant), reasoning_format)
        return setup, list(model.tokenizer.tokenize(setup.prompt, True, True))

    return await st.blocking(build)


@bp.post("/v1/messages")
async def messages() -> Response:
    st = current_state()
    st.require()
    req = await request_json()
    rm.MESSAGES.parse(req)
    body = Body(anthropic.native_fields(req))
    params = st.task_params(body)
    stream = body.bool("stream", False)
    ping = st.ping_interval(body)
    ropts = oai.reasoning_options(body.data, st.config)
    setup, prompt = await _setup(req, params.grammar, ropts.format)
    params = dataclasses.replace(params, grammar=setup.grammar, preserved_tokens=tuple(setup.preserved_tokens),
                                 reasoning=setup.budget(ropts.budget, ropts.message))
    (task,) = st.submit([Task(prompt, params)])
    msg_id = oai.new_id("msg_")

    if not stream:
        ((_, final),) = await st.collect([task])
        parser = setup.parser()
        parser.feed(final.content)
        parser.finish(cut=final.stop_type != "eos")
        return json_response(anthropic.message_json(final, id=msg_id, model=st.model_id, message=parser.message))

    async def events() -> Any:
        parser = setup.parser()
        # the text block opens at once unless the answer may start with thoughts
        thinks = setup.splitter() is not None and (setup.template_thinks or setup.thinking_open)
        blocks = anthropic.BlockStream(text_open=setup.format == "content" and not thinks)
        yield event("message_start", anthropic.message_start(id=msg_id, model=st.model_id, n_prompt=len(prompt)))
        if blocks.kind == "text":
            yield event("content_block_start", anthropic.content_block_start())
        yield event("ping", {"type": "ping"})
        async with aclosing(st.results([task], ping)) as results:
            async for i, r in results:
                if i < 0:
                    yield event("ping", {"type": "ping"})
                    continue
                if isinstance(r, Final):
                    if r.error is not None:
                        err = to_api_error(r.error)
                        yield event("error", {"type": "error", "error": {"type": err.type, "message": err.message}})
                        return
                    for name, ev in blocks.events(parser.finish(cut=r.stop_type != "eos")) + blocks.close():
                        yield event(name, ev)
                    yield event("message_delta", anthropic.message_delta(r, blocks.calls))
                    yield event("message_stop", {"type": "message_stop"})
                elif r.content:
                    for name, ev in blocks.events(parser.feed(r.content)):
                        yield event(name, ev)

    return stream_response(events())


@bp.post("/v1/messages/count_tokens")
async def count_tokens() -> Response:
    st = current_state()
    st.require()
    req = await request_json()
    rm.COUNT_TOKENS.parse(req)
    _, prompt = await _setup(req)
    return json_response({"input_tokens": len(prompt)})
