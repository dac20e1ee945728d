"""Server endpoints: /health, /v1/models, /props, /slots, /metrics (the chat page is http/ui.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

from quart import Blueprint, Response, request

from llamacli.core.runtime.tasks import TaskParams
from llamacli.core.multimodal.encoder import MEDIA_MARKER
from llamacli.http import native, oai
from llamacli.http import request_models as rm
from llamacli.http.context import current_state, request_json
from llamacli.http.state import ServerState
from llamacli.http.errors import LOADING, ApiError, bad_request, not_supported
from llamacli.http.metrics import CONTENT_TYPE, START_HEADER, prometheus_text
from llamacli.http.sse import json_response

bp = Blueprint("admin", __name__)


def _asleep(st: ServerState) -> bool:
    return st.sleep is not None and st.sleep.sleeping


@bp.get("/health")
@bp.get("/v1/health")
async def health() -> Response:
    st = current_state()
    if not st.ready and not _asleep(st):
        raise LOADING
    return json_response({"status": "ok"})


@bp.get("/v1/models")
@bp.get("/models")
async def models() -> Response:
    st = current_state()
    if _asleep(st):
        return json_response(st.sleep.snapshot["models"])
    return json_response(_models_json(st))


def _models_json(st: ServerState) -> dict[str, Any]:
    n_ctx = st.engine.n_ctx_slot if st.engine is not None else 0
    return oai.models_json(st.model_id, st.config.aliases, st.model, st.config.tags, n_ctx, multimodal=st.mtmd is not None)


def dormant_snapshot(st: ServerState) -> dict[str, Any]:
    """What /props and /v1/models answer while the model sleeps (http/sleep.py)."""
    props = _props_json(st)
    props["is_sleeping"] = True
    return {"props": props, "models": _models_json(st)}


@bp.get("/openapi.json")
async def openapi() -> Response:
    """The OpenAPI 3.1 document of this API, generated from the routes and request models."""
    from quart import current_app

    from llamacli.http.openapi import openapi_document

    return json_response(openapi_document(current_app, version=current_state().config.build_info))


# ---- /props ------------------------------------------------------------------------------------


@bp.get("/props")
async def props() -> Response:
    st = current_state()
    if _asleep(st):
        return json_response(st.sleep.snapshot["props"])
    return json_response(_props_json(st))


def _props_json(st: ServerState) -> dict[str, Any]:
    engine, model = st.require()
    defaults = st.base_params()
    settings = {
        "id": 0,
        "id_task": -1,
        "n_ctx": engine.n_ctx_slot,
        "speculative": defaults.speculative is not None,
        "is_processing": False,
        "params": {**native.params_json(defaults), **oai.reasoning_json(st.config)},
        "prompt": "",
        "next_token": {"has_next_token": True, "has_new_line": False, "n_remain": -1, "n_decoded": 0},
    }
    tpl = model.template
    caps = tpl.caps if tpl is not None else None
    return {
        "default_generation_settings": settings,
        "total_slots": engine.config.n_parallel,
        "model_alias": st.model_id,
        "model_path": model.path,
        "chat_template": tpl.source if tpl is not None else "",
        "chat_template_caps": dataclasses.asdict(caps) if caps is not None else {},
        "bos_token": model.special.bos_text,
        "eos_token": model.special.eos_text,
        "modalities": {"vision": "image" in st.modalities, "audio": "audio" in st.modalities},
        "media_marker": MEDIA_MARKER,
        "build_info": st.config.build_info,
        "is_sleeping": False,
        "webui": st.config.ui,
        "endpoint_slots": st.config.slots,
        "endpoint_props": st.config.props,
        "endpoint_metrics": st.config.metrics,
    }


@bp.post("/props")
async def set_props() -> Response:
    """With --props: change the server's default generation settings (the fields of
    default_generation_settings.params, or the same fields at the top level); any other field,
    a wrong type or a value out of range is a 400 and nothing is stored."""
    st = current_state()
    st.require()
    if not st.config.props:
        raise not_supported("This server does not support changing global properties. Start it with `--props`")
    req = await request_json()
    body = rm.PROPS.parse(req)
    dgs = body.obj("default_generation_settings", None)
    if dgs is not None:
        if len(req) > 1:
            raise bad_request("send the settings either in default_generation_settings.params or at the top level")
        params = rm.PROPS_DGS.parse(dgs, "default_generation_settings.").obj("params", {})
        body = rm.PROPS_SETTINGS.parse(params, "default_generation_settings.params.")
    params = await st.task_params(body)
    params.sampling.validate(st.config.sampling_limits)
    st.config.sampling = params.sampling
    st.config.n_predict = params.n_predict
    st.config.n_keep = params.n_keep
    st.config.cache_prompt = params.cache_prompt
    r = oai.reasoning_options(body.data, st.config)  # the same names as in a request; -1 lifts the budget here
    budget = body.int("reasoning_budget_tokens", r.budget, lo=-1)
    st.config.reasoning_format, st.config.reasoning_budget, st.config.reasoning_budget_message = r.format, budget, r.message
    return json_response({"success": True})


# ---- /slots ------------------------------------------------------------------------------------


@bp.get("/slots")
async def slots() -> Response:
    st = current_state()
    engine, _ = st.require()
    if not st.config.slots:
        raise not_supported("This server does not support slots endpoint. Start it with `--slots`")
    defaults: TaskParams = st.base_params()
    snapshot = [native.slot_json(s, engine.n_ctx_slot, defaults) for s in engine.slots]  # never waits for a step
    if request.args.get("fail_on_no_slot") in ("1", "true") and all(s["is_processing"] for s in snapshot):
        raise ApiError(503, "no slot available", "unavailable_error")
    return json_response(snapshot)


@bp.post("/slots/<int:id_slot>")
async def slot_action(id_slot: int) -> Response:
    st = current_state()
    engine, _ = st.require()
    path = st.config.slot_save_path
    if not path:
        raise not_supported("This server does not support slots action. Start it with `--slot-save-path`")
    action = request.args.get("action", "")
    if action not in ("save", "restore", "erase"):
        raise bad_request(f"Invalid action {action!r}: use ?action=save, restore or erase")
    if not 0 <= id_slot < engine.config.n_parallel:
        raise bad_request(f"slot {id_slot} does not exist (slots: {engine.config.n_parallel})")
    if action == "erase":
        n = await st.blocking(lambda: engine.call(lambda: engine.erase_slot(id_slot)))
        return json_response({"id_slot": id_slot, "n_erased": n})
    filename = rm.SLOT_FILE.parse(await request_json()).str("filename")
    if action == "save":
        r = await st.blocking(lambda: engine.call(lambda: engine.save_slot(id_slot, path, filename)))
        return json_response({"id_slot": id_slot, "filename": filename, "n_saved": r.n_tokens,
                              "n_written": r.n_bytes, "timings": {"save_ms": r.ms}})
    r = await st.blocking(lambda: engine.call(lambda: engine.restore_slot(id_slot, path, filename)))
    return json_response({"id_slot": id_slot, "filename": filename, "n_restored": r.n_tokens,
                          "n_read": r.n_bytes, "timings": {"restore_ms": r.ms}})


# ---- /metrics ----------------------------------------------------------------------------------


@bp.get("/metrics")
async def metrics() -> Response:
    st = current_state()
    if not st.config.metrics:
        raise not_supported("This server does not support metrics endpoint. Start it with `--metrics`")
    if _asleep(st):  # the counters so far; nothing runs
        m = dataclasses.replace(st.sleep.metrics, requests_processing=0, requests_deferred=0)
    else:
        m = st.require()[0].metrics  # the engine's loop thread keeps them, gauges included
    resp = Response(prometheus_text(m), content_type=CONTENT_TYPE)
    resp.headers[START_HEADER] = str(int(st.started))
    return resp
