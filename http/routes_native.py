"""llama-server's native endpoints: /completion, /infill, /tokenize, /detokenize,
/apply-template, /embedding(s). Handlers parse -> submit -> answer or stream."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response

from llamacli.core.multimodal.prompt import MediaSpan
from llamacli.core.model.loaded import ModelInfo
from llamacli.core.runtime.tasks import Final, Task, TaskParams
from llamacli.http import native, oai, stream
from llamacli.http import request_models as rm
from llamacli.http.context import current_state, request_json
from llamacli.http.errors import bad_request, not_supported
from llamacli.http.state import ServerState
from llamacli.http.limits import check_count, check_text
from llamacli.http.media import url_media
from llamacli.http.params import Body, check_token_ids
from llamacli.http.sse import data, json_response
from llamacli.http.stream import Done, Events, Failed, Frames, Piece, Ping

bp = Blueprint("native", __name__)


# ---- /completion and /infill -------------------------------------------------------------------


async def completion_response(
    st: ServerState, model: ModelInfo, body: Body, token_lists: list[list[int]], params: TaskParams,
    media: list[tuple[MediaSpan, ...]] | None = None,
) -> Response:
    """Run one task per prompt (times n_cmpl) and answer in /completion's shape; `media`: each
    prompt's images."""
    n_cmpl = body.int("n_cmpl", 1)
    streamed = body.bool("stream", False)
    return_tokens = body.bool("return_tokens", False)
    fields = body.str_list("response_fields", [])
    spans = media or [()] * len(token_lists)
    tasks = await st.submit([Task(toks, params, media=m) for toks, m in zip(token_lists, spans) for _ in range(n_cmpl)])
    engine, _ = st.require()
    common = {"model": st.model_id, "tokenizer": model.tokenizer, "params": params, "n_ctx": engine.n_ctx_slot}

    if not streamed:
        results = await st.collect(tasks)
        out = [
            native.completion_json(f, parts, index=i, return_tokens=return_tokens, **common)
            for i, (parts, f) in enumerate(results)
        ]
        if fields:
            out = [native.select_fields(d, fields) for d in out]
        return json_response(out[0] if len(out) == 1 else out)

    async def frames(events: Events) -> Frames:
        n_decoded = [0] * len(tasks)
        async for ev in events:
            match ev:
                case Ping() | Failed():
                    yield stream.server_frame(ev)
                case Done(i, final):
                    yield data(native.completion_json(final, [], index=i, return_tokens=False, stream=True, **common))
                case Piece(i, r):
                    n_decoded[i] += len(r.tokens)
                    if r.content or r.tokens or r.progress is not None:
                        yield data(native.completion_chunk(
                            r, index=i, id_slot=params.id_slot, n_decoded=n_decoded[i],
                            n_prompt=len(tasks[i].prompt_tokens), tokenizer=model.tokenizer, params=params,
                        ))

    return stream.response(st, tasks, st.ping_interval(body), frames)


@bp.post("/completion")
@bp.post("/completions")
async def completion() -> Response:
    st = current_state()
    _, model = st.require()
    req = await request_json()
    body = rm.COMPLETION.parse(req)
    prompts = native.split_prompts(body.raw("prompt"))
    check_count(len(prompts) * body.int("n_cmpl", 1), st.config.max_prompts, "completions (prompts x n_cmpl)",
                "--max-prompts")
    params = await st.task_params(body)
    check_text(sum(native.prompt_chars(p) for p in prompts), st.text_limit(), "prompt")
    done = await st.blocking(
        lambda: [native.media_prompt(model.tokenizer, p, model.n_vocab, st.mtmd, st.media_limits) for p in prompts]
    )
    return await completion_response(st, model, body, [t for t, _ in done], params, [m for _, m in done])


@bp.post("/infill")
async def infill() -> Response:
    st = current_state()
    engine, model = st.require()
    req = await request_json()
    body = rm.INFILL.parse(req)
    prefix = body.str("input_prefix", "")
    suffix = body.str("input_suffix", "")
    extra = body.list("input_extra", [])
    for i, chunk in enumerate(extra):
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text", ""), str):
            raise bad_request(f"'input_extra[{i}]' must be an object with filename and text")
    prompt = body.raw("prompt", "")
    params = await st.task_params(body)
    n_chars = len(prefix) + len(suffix) + native.prompt_chars(prompt)
    check_text(n_chars + sum(len(c.get("text", "")) for c in extra), st.text_limit(), "prompt")

    def build() -> list[int]:
        toks = native.tokenize_prompt(model.tokenizer, prompt, model.n_vocab, add_special=False) if prompt else []
        return native.format_infill(
            model.tokenizer, prefix, suffix, extra, toks, st.config.n_batch, engine.n_ctx_slot, st.config.spm_infill
        )

    tokens = await st.blocking(build)
    return await completion_response(st, model, body, [tokens], params)


# ---- tokens and templates ----------------------------------------------------------------------


@bp.post("/tokenize")
async def tokenize() -> Response:
    st = current_state()
    _, model = st.require()
    body = rm.TOKENIZE.parse(await request_json())
    content = body.raw("content")
    add_special = body.bool("add_special", False)
    parse_special = body.bool("parse_special", True)
    with_pieces = body.bool("with_pieces", False)
    if content is None:
        raise bad_request("'content' is required")
    check_text(native.prompt_chars(content), st.text_limit(), "content")
    if isinstance(content, str):
        tokens = await st.blocking(lambda: model.tokenizer.tokenize(content, add_special, parse_special))
    elif isinstance(content, list):  # llama-server also takes mixed token/string arrays
        tokens = await st.blocking(lambda: native.tokenize_mixed(model.tokenizer, content, model.n_vocab, add_special))
    else:
        raise bad_request("'content' must be a string")
    return json_response(native.tokenize_json(model.tokenizer, tokens, with_pieces))


@bp.post("/detokenize")
async def detokenize() -> Response:
    st = current_state()
    _, model = st.require()
    body = rm.DETOKENIZE.parse(await request_json())
    tokens = check_token_ids(body.list("tokens", []), model.n_vocab, "'tokens' array")
    return json_response({"content": model.tokenizer.detokenize(tokens, False, True)})


@bp.post("/apply-template")
async def apply_template() -> Response:
    st = current_state()
    _, model = st.require()
    req = await request_json()
    rm.APPLY_TEMPLATE.parse(req)
    # media parts become <__media__> markers, their data read as a chat request would (llama-server)
    msgs, urls = oai.take_media(oai.chat_messages(req, st.modalities))
    kwargs = oai.chat_template_kwargs(req, st.config.chat_template_kwargs)
    tools = Body(req).list("tools", None)
    opts = oai.prompt_options(req, st.config.prefill_assistant)

    def render() -> str:
        for url in urls:
            url_media(url, st.media_limits, st.config.media_path)
        return oai.render_chat(model.template, msgs, tools, kwargs, opts)

    return json_response({"prompt": await st.blocking(render)})


# ---- embeddings --------------------------------------------------------------------------------


def embeddings_enabled(st: ServerState) -> str:
    """The pooling to use; 501 when the server was started without --embeddings."""
    if not st.config.embeddings:
        raise not_supported("This server does not support embeddings. Start it with `--embeddings`")
    assert st.model is not None
    return st.config.pooling or st.model.pooling


async def embed(st: ServerState, model: ModelInfo, inputs: list[Any], pooling: str) -> list[Final]:
    check_count(len(inputs), st.config.max_embd_inputs, "inputs", "--max-embd-inputs")
    check_text(sum(len(x) for x in inputs if isinstance(x, str)), st.text_limit(), "input")
    def tok(x: Any) -> list[int]:
        if isinstance(x, str):
            return list(model.tokenizer.tokenize(x, True, True))
        return check_token_ids(x, model.n_vocab, "input")

    token_lists = await st.blocking(lambda: [tok(x) for x in inputs])
    for toks in token_lists:
        if not toks:
            raise bad_request("an input to embed is empty")
    tasks = await st.submit([Task(toks, kind="embedding", pooling=pooling) for toks in token_lists])
    return [f for _, f in await st.collect(tasks)]


@bp.post("/embedding")
@bp.post("/embeddings")
async def embedding() -> Response:
    st = current_state()
    _, model = st.require()
    pooling = embeddings_enabled(st)
    req = await request_json()
    body = rm.EMBEDDING.parse(req)
    key = "content" if "content" in body else "input"
    inputs, _ = oai.embedding_inputs(req, key)
    norm = body.int("embd_normalize", st.config.embd_normalize, lo=-1)
    finals = await embed(st, model, inputs, pooling)
    out = [native.native_embedding_json(i, native.embedding_rows(f, pooling, norm)) for i, f in enumerate(finals)]
    return json_response(out)
