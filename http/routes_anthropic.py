"""Anthropic-compatible endpoints: /v1/messages (stream and not), /v1/messages/count_tokens."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

from quart import Blueprint, Response

from llamacli.core.tasks import Final, Task
from llamacli.http import anthropic, oai
from llamacli.http.context import current_state, request_json
from llamacli.http.errors import to_api_error
from llamacli.http.params import Body
from llamacli.http.sse import event, json_response, stream_response

bp = Blueprint("anthropic", __name__)


async def _prompt(req: dict[str, Any]) -> list[int]:
    st = current_state()
    _, model = st.require()
    msgs = anthropic.chat_messages(req)
    tools = anthropic.tools(req)
    kwargs = dict(st.config.chat_template_kwargs)

    def build() -> list[int]:
        text = oai.render_chat(model.template, msgs, tools, kwargs, st.config.prefill_assistant)
        return list(model.tokenizer.tokenize(text, True, True))

    return await st.blocking(build)


@bp.post("/v1/messages")
async def messages() -> Response:
    st = current_state()
    st.require()
    req = await request_json()
    st.check_model(req.get("model"))
    body = Body(anthropic.native_fields(req))
    params = st.task_params(body)
    stream = body.bool("stream", False)
    ping = st.ping_interval(body)
    prompt = await _prompt(req)
    (task,) = st.submit([Task(prompt, params)])
    msg_id = oai.new_id("msg_")

    if not stream:
        ((_, final),) = await st.collect([task])
        return json_response(anthropic.message_json(final, id=msg_id, model=st.model_id))

    async def events() -> Any:
        yield event("message_start", anthropic.message_start(id=msg_id, model=st.model_id, n_prompt=len(prompt)))
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
                    yield event("content_block_stop", {"type": "content_block_stop", "index": 0})
                    yield event("message_delta", anthropic.message_delta(r))
                    yield event("message_stop", {"type": "message_stop"})
                elif r.content:
                    yield event("content_block_delta", anthropic.text_delta(r.content))

    return stream_response(events())


@bp.post("/v1/messages/count_tokens")
async def count_tokens() -> Response:
    st = current_state()
    st.require()
    req = await request_json()
    st.check_model(req.get("model"))
    prompt = await _prompt(req)
    return json_response({"input_tokens": len(prompt)})
