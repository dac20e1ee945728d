"""OpenAI's Responses API: POST /v1/responses (plain and streamed) and
/v1/responses/input_tokens, each a chat completion underneath (responses.chat_request)."""

from __future__ import annotations

from quart import Blueprint, Response

from llamacli.core.runtime.tasks import Task
from llamacli.http import request_models as rm
from llamacli.http import oai, responses, stream
from llamacli.http.context import current_state, request_json
from llamacli.http.params import Body, grammar_spec
from llamacli.http.routes_oai import _chat_setup, chat_task
from llamacli.http.sse import PING_COMMENT, event, json_response
from llamacli.http.stream import Done, Events, Failed, Frames, Piece, Ping

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
    streamed = body.bool("stream", False)
    ping = st.ping_interval(body)
    setup, prompt, params, _, media = await chat_task(chat, body)
    (task,) = await st.submit([Task(prompt, params, media=media)])
    ev = responses.ResponseEvents(req, st.model_id)
    st.control(ev.ids.response, [task])

    if not streamed:
        ((_, final),) = await st.collect([task])
        output = responses.output_items(oai.parse_answer(setup, final).message, ev.ids)
        return json_response(responses.response_json(req, id=ev.ids.response, model=st.model_id, created=ev.created,
                                                      output=output, final=final))

    async def frames(events: Events) -> Frames:
        parser = setup.parser()
        for name, payload in ev.start():
            yield event(name, payload)
        async for e in events:
            match e:
                case Ping():
                    yield PING_COMMENT
                    continue
                case Failed(_, err):
                    yield event("error", {"type": "error", "code": err.type, "message": err.message,
                                          "param": None, "sequence_number": ev.seq})
                    return
                case Done(_, final):
                    out = ev.feed(oai.finish_answer(parser, final)) + ev.finish(final)
                    out[-1][1]["timings"] = final.timings.to_dict()
                case Piece(_, r):
                    out = ev.progress(r.progress) if r.progress is not None else []
                    out += ev.feed(parser.feed(r.content)) if r.content else []
                    if out and r.timings is not None:  # timings_per_token, as llama-server: on the last event
                        out[-1][1]["timings"] = r.timings.to_dict()
            for name, payload in out:
                yield event(name, payload)

    return stream.response(st, [task], ping, frames)


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
    _, prompt, _ = await _chat_setup(chat, grammar_spec(chat))
    return json_response({"object": "response.input_tokens", "input_tokens": len(prompt)})
