"""OpenAI's Responses API: POST /v1/responses (plain and streamed) and
/v1/responses/input_tokens, each a chat completion underneath (responses.chat_request)."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

from quart import Blueprint, Response

from llamacli.core.runtime.tasks import Final, Task
from llamacli.http import request_models as rm
from llamacli.http import oai, responses
from llamacli.http.context import current_state, request_json
from llamacli.http.errors import to_api_error
from llamacli.http.params import Body, grammar_spec
from llamacli.http.routes_oai import _chat_setup, chat_task
from llamacli.http.sse import PING_COMMENT, event, json_response, stream_response

bp = Blueprint("responses", __name__)


@bp.post("/v1/responses")
@bp.post("/responses")
async def create_response() -> Response:
    st = current_state()
    st.require()
    req = await request_json()
    rm.RESPONSES.parse(req)
    chat = responses.chat_request(req)
    body = Body(oai.native_fields(chat, chat=True))
    stream = body.bool("stream", False)
    ping = st.ping_interval(body)
    setup, prompt, params, _ = await chat_task(chat, body)
    (task,) = st.submit([Task(prompt, params)])
    ev = responses.ResponseEvents(req, st.model_id)
    st.control(ev.ids.response, [task])

    if not stream:
        ((_, final),) = await st.collect([task])
        parser = setup.parser()
        parser.feed(final.content)
        parser.finish(cut=final.stop_type != "eos")
        output = responses.output_items(parser.message, ev.ids)
        return json_response(responses.response_json(req, id=ev.ids.response, model=st.model_id, created=ev.created,
                                                      output=output, final=final))

    async def events() -> Any:
        parser = setup.parser()
        for name, payload in ev.start():
            yield event(name, payload)
        async with aclosing(st.results([task], ping)) as results:
            async for i, r in results:
                if i < 0:
                    yield PING_COMMENT
                    continue
                if isinstance(r, Final):
                    if r.error is not None:
                        err = to_api_error(r.error)
                        yield event("error", {"type": "error", "code": err.type, "message": err.message,
                                              "param": None, "sequence_number": ev.seq})
                        return
                    out = ev.feed(parser.finish(cut=r.stop_type != "eos")) + ev.finish(r)
                    out[-1][1]["timings"] = r.timings.to_dict()
                else:
                    out = ev.progress(r.progress) if r.progress is not None else []
                    out += ev.feed(parser.feed(r.content)) if r.content else []
                    if out and r.timings is not None:  # timings_per_token, as llama-server: on the last event
                        out[-1][1]["timings"] = r.timings.to_dict()
                for name, payload in out:
                    yield event(name, payload)

    return stream_response(events())


@bp.post("/v1/responses/input_tokens")
@bp.post("/responses/input_tokens")
async def responses_input_tokens() -> Response:
    """The Responses API's token count: the request rendered through the chat template like
    the chat request it converts to."""
    st = current_state()
    st.require()
    req = await request_json()
    rm.RESPONSES_INPUT_TOKENS.parse(req)
    chat = responses.chat_request(req)
    _, prompt = await _chat_setup(chat, grammar_spec(chat))
    return json_response({"object": "response.input_tokens", "input_tokens": len(prompt)})
