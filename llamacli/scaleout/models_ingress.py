"""The ingress of router mode on Ray: llama-server's router in front of one engine deployment
per model (models.py says which model a request names). A request for a model goes to that
model's Forwarder (ingress.py: its cache-affinity router, retries, the aggregated endpoints
over its replicas); /health, /models, /v1/models and /props without `?model=` are answered
here, as the router answers them; the web UI's files come from the first model's replicas
(the UI then finds a router at /props and lists the models). The API keys are checked here.
"""

from __future__ import annotations

import json
from typing import Any

from llamacli.http.app import PUBLIC_PATHS, authorized
from llamacli.http.config import ServerConfig
from llamacli.http.errors import INVALID_API_KEY, ApiError
from llamacli.http.router import ModelSpec, name_index
from llamacli.http.router_routes import router_props
from llamacli.http.ui import STATIC_PREFIX
from llamacli.http.ui_assets import UI_PATHS
from llamacli.scaleout.aggregate import Answer
from llamacli.scaleout.ingress import Forwarder, Ingress, Send, send_answer
from llamacli.scaleout.models import LOAD, load_or_unload, model_of, models_json
from llamacli.scaleout.request import ForwardedRequest


class ModelsIngress(Ingress):
    """The router: a Forwarder per model (`engines`: the models' deployment handles, in the
    order of `specs` and `deployments`)."""

    def __init__(self, specs: list[ModelSpec], deployments: list[str], engines: list[Any], api_keys: list[str]) -> None:
        self.specs = specs
        self.api_keys = api_keys  # checked here: the replicas, as a router's children, get none
        self.names = name_index(specs)  # name or alias -> name
        self.models = {s.name: Forwarder(e, d) for s, d, e in zip(specs, deployments, engines, strict=True)}

    async def handle(self, req: ForwardedRequest, send: Send) -> None:
        try:
            model = self._model(req)
        except ApiError as e:
            await send_answer(send, Answer("", e.status, json.dumps(e.body()).encode()))
            return
        if model is not None:
            await self.models[model].handle(req, send)
        elif req.path in ("/models", "/v1/models"):
            await send_answer(send, _json(models_json(self.specs, await self._info(req))))
        elif req.path == "/props":
            await send_answer(send, _json(router_props(len(self.specs), True, ServerConfig().build_info)))
        else:  # /health: the router is up (each model's replicas were deployed before it was)
            await send_answer(send, _json({"status": "ok"}))

    def _model(self, req: ForwardedRequest) -> str | None:
        """The model whose deployment answers `req` (None: answered here), or the ApiError."""
        if self.api_keys and not _public(req.path) and not self._authorized(req):
            raise INVALID_API_KEY
        if req.method == "POST" and req.path in LOAD:
            raise load_or_unload(req.path, req.body, self.names)
        if req.method == "GET" and _ui(req.path):
            return self.specs[0].name  # the web UI's files: every replica has them (the UI asks /props: router)
        return model_of(req.method, req.path, req.query_string, req.body, self.names)

    def _authorized(self, req: ForwardedRequest) -> bool:
        key = req.header(b"x-api-key")
        auth = req.header(b"authorization") or b""
        return authorized(auth.decode("latin-1"), key.decode("latin-1") if key is not None else None, self.api_keys)

    async def _info(self, req: ForwardedRequest) -> dict[str, dict[str, Any]]:
        """Each model's own /v1/models entry, from one of its replicas ({} where none answered)."""
        info: dict[str, dict[str, Any]] = {}
        for name, fwd in self.models.items():
            a = await fwd.collect(req)
            if a.status == 200:
                info[name] = dict((json.loads(a.body).get("data") or [{}])[0])
        return info


def _public(path: str) -> bool:
    """Reachable without an API key, as on llama-server (the health checks, the web UI)."""
    return path in PUBLIC_PATHS or _ui(path)


def _ui(path: str) -> bool:
    return path in UI_PATHS or path.startswith(STATIC_PREFIX)


def _json(value: Any) -> Answer:
    return Answer("", 200, json.dumps(value).encode())
