"""Router mode's endpoints (llama-server's "Using multiple models").

The router answers /health, /models (= /v1/models), /models/load, /models/unload, /models/sse
and /props itself. Every other request goes to the child serving the model it names: a POST by
its JSON body's `model` field, a GET or DELETE by its `?model=` query parameter (`/props?model=`
included); http/router_forward.py passes the child's answer through as it arrives.
`?autoload=false` (or --no-models-autoload) answers 400 for a model that is not loaded instead
of loading it. A body the router cannot read (not JSON, nested too deep) is the single-model
server's 400.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from quart import Blueprint, Response, request

from llamacli.http.config import ServerConfig
from llamacli.http.context import current_state
from llamacli.http.state import ServerState
from llamacli.http.errors import ApiError, bad_request
from llamacli.http.params import parse_json_body
from llamacli.http.router import Instance, ModelSpec, Supervisor
from llamacli.http.router_forward import forward
from llamacli.http.sse import json_response

bp = Blueprint("router", __name__)

class RouterState(ServerState):
    """The app state of a router: no engine of its own, a Supervisor and an HTTP client."""

    def __init__(
        self, config: ServerConfig, supervisor: Supervisor, autoload: bool,
        rediscover: Callable[[], list[ModelSpec]] | None = None,
    ) -> None:
        super().__init__(config)
        self.supervisor = supervisor
        self.autoload = autoload
        self.rediscover = rediscover  # reads the model list again (GET /models?reload=1)

    @property
    def ready(self) -> bool:
        return True


def _router() -> RouterState:
    st = current_state()
    assert isinstance(st, RouterState)
    return st


def _autoload(st: RouterState) -> bool:
    v = request.args.get("autoload")
    return st.autoload if v is None else v in ("1", "true")


# ---- the router's own endpoints ------------------------------------------------------------------


@bp.get("/health")
@bp.get("/v1/health")
async def health() -> Response:
    return json_response({"status": "ok"})


@bp.get("/models")
@bp.get("/v1/models")
async def models() -> Response:
    st = _router()
    sup = st.supervisor
    if request.args.get("reload") and st.rediscover is not None:
        specs = await st.blocking(st.rediscover)
        try:
            await sup.reload(specs)
        except ValueError as e:
            raise bad_request(str(e)) from None
    now = int(time.time())
    return json_response({"data": [model_json(i, now) for i in sup.instances.values()], "object": "list"})


def model_json(inst: Instance, created: int) -> dict[str, Any]:
    s = inst.spec
    out: dict[str, Any] = {
        "id": s.name,
        "aliases": sorted(s.aliases),
        "tags": sorted(s.tags),
        "object": "model",
        "owned_by": "llamacpp",
        "created": created,
        "path": s.path,
        "status": inst.status_json(),
        "architecture": {"input_modalities": ["text"], "output_modalities": ["text"]},
        "source": s.source,
        "can_remove": False,
    }
    if inst.running:  # what the child says of itself (its metadata), where the router says nothing
        for k, v in inst.info.items():
            out.setdefault(k, v)
    return out


async def _model_field() -> str:
    body = await _json_body()
    name = body.get("model", "")
    if not isinstance(name, str):
        raise bad_request("'model' must be a string")
    return name


async def _json_body() -> dict[str, Any]:
    """The body as a JSON object; an empty body is `{}` (no model named). Anything else that is
    not a JSON object, or one nested too deep to parse, is the single-model server's 400."""
    raw = await request.get_data(as_text=False)
    raw = raw if isinstance(raw, bytes) else raw.encode("utf-8")
    return parse_json_body(raw) if raw.strip() else {}


async def _named(not_found: ApiError) -> Instance:
    """The model the request body names (llama-server answers a missing one differently for
    load, 404, and unload, 400)."""
    inst = _router().supervisor.get(await _model_field())
    if inst is None:
        raise not_found
    return inst


@bp.post("/models/load")
async def load() -> Response:
    inst = await _named(ApiError(404, "model is not found", "not_found_error"))
    if inst.running and inst.status != "unloading":  # an unloading model is loaded again once it exited
        raise bad_request("model is already running")
    await _router().supervisor.load(inst.spec.name, "POST /models/load")
    return json_response({"success": True})


@bp.post("/models/unload")
async def unload() -> Response:
    inst = await _named(bad_request("model is not found"))
    if not inst.running:
        raise bad_request("model is not running")
    await _router().supervisor.unload(inst.spec.name)
    return json_response({"success": True})


@bp.get("/models/sse")
async def events() -> Response:
    sup = _router().supervisor
    queue = sup.subscribe()

    async def stream() -> AsyncIterator[bytes]:
        try:
            while (event := await queue.get()) is not None:
                yield f"data: {json.dumps(event, separators=(',', ':'))}\n\n".encode()
        finally:
            sup.unsubscribe(queue)

    resp = Response(stream(), content_type="text/event-stream")
    resp.headers["Cache-Control"] = "no-cache"
    resp.timeout = None
    return resp


@bp.get("/props")
async def props() -> Response:
    st = _router()
    if request.args.get("model"):
        return await _forward_get()
    return json_response(router_props(st.supervisor.models_max, st.autoload, st.config.build_info))


def router_props(max_instances: int, autoload: bool, build_info: str) -> dict[str, Any]:
    """GET /props of a router (no ?model=): llama-server's placeholders, no model of its own."""
    return {
        "role": "router",
        "max_instances": max_instances,
        "models_autoload": autoload,
        "model_alias": "llama-server",
        "model_path": "none",
        "default_generation_settings": {"params": {}, "n_ctx": 0},
        "build_info": build_info,
    }


# ---- forwarding ------------------------------------------------------------------------------


@bp.route("/<path:_path>", methods=["POST", "PUT"])
async def forward_post(_path: str) -> Response:
    st = _router()
    body: bytes = await request.get_data(as_text=False)  # type: ignore[assignment]  # bytes with as_text=False
    name = await _model_field()
    if not name:
        raise bad_request("model name is missing from the request")
    return await forward(st.supervisor, name, _autoload(st), body)


@bp.route("/<path:_path>", methods=["GET", "DELETE"])
async def forward_get(_path: str) -> Response:
    return await _forward_get()


async def _forward_get() -> Response:
    st = _router()
    name = request.args.get("model", "")
    if not name:
        raise bad_request("model name is missing from the request")
    return await forward(st.supervisor, name, _autoload(st), None)
