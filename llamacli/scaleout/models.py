"""Router mode on Ray (`llama serve --ray ADDRESS --models-dir DIR / --models-preset FILE.ini`):
one engine deployment per model, and which model a request names. Pure: no Ray.

The models are the local router's (router_models.discover: the folder, the cache, the preset,
mmproj files paired as there), each with the command line the router would give its child;
each model's replicas are built from that command line (replicas and autoscaling included:
a preset section may give a model its own). The ingress (models_ingress.py) answers as
llama-server's router does:

- POST: the model its JSON body's `model` field names (a name or an alias); GET and DELETE:
  its `?model=` query parameter (`/props?model=`, `/slots?model=`, `/metrics?model=`);
- `/health`, `/models`, `/v1/models` and `/props` without `?model=`: the router's own answer
  (every model is listed with status `loaded`: its replicas were deployed before the
  application was ready);
- no model named: 400 "model name is missing from the request"; an unknown one: 400
  "model 'NAME' not found" (llama-server's router's errors);
- POST /models/load and /models/unload: the router's answers for a model that is running
  (a 400; unknown: its 404 and 400): models cannot be loaded or unloaded here.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from llamacli.http.errors import ApiError, bad_request
from llamacli.http.params import parse_json_body
from llamacli.http.router import Instance, ModelSpec
from llamacli.http.router_routes import model_json
from llamacli.options.ray_serve import RayOptions
from llamacli.scaleout.replica import ReplicaSpec

OWN = frozenset({"/health", "/v1/health", "/models", "/v1/models"})  # the router's own, whatever the query
LOAD = frozenset({"/models/load", "/models/unload"})  # POST: answered by load_or_unload


@dataclass(frozen=True)
class ModelDeployment:
    """One model of the router and its engine deployment."""

    spec: ModelSpec  # the router's model: name, aliases, tags, path, source, its command line
    replica: ReplicaSpec  # what each of its replicas loads
    scaling: RayOptions  # its replicas or autoscaling
    deployment: str  # the engine deployment's name


def deployment_name(base: str, i: int) -> str:
    """The i-th model's engine deployment (Serve names are ids: the model's name is not one)."""
    return f"{base}{i}"


def model_of(method: str, path: str, query: bytes, body: bytes, names: Mapping[str, str]) -> str | None:
    """The model (its name) a request goes to, by `names` (name or alias -> name); None when
    the router answers it itself. Raises the router's ApiError for a missing or unknown model
    or a body it cannot read."""
    if method in ("GET", "DELETE", "HEAD"):
        name = parse_qs(query.decode("latin-1")).get("model", [""])[0]
        if path in OWN or (path == "/props" and not name):
            return None
    else:
        name = _body_model(body)
    if not name:
        raise bad_request("model name is missing from the request")
    if name not in names:
        raise ApiError(400, f"model '{name}' not found")
    return names[name]


def _body_model(body: bytes) -> str:
    value = parse_json_body(body).get("model", "") if body.strip() else ""
    if not isinstance(value, str):
        raise bad_request("'model' must be a string")
    return value


def load_or_unload(path: str, body: bytes, names: Mapping[str, str]) -> ApiError:
    """The answer to POST /models/load or /models/unload: every model is loaded while the
    application runs (the router's errors: an unknown model, a model already running)."""
    known = _body_model(body) in names
    if path == "/models/load":
        return bad_request("model is already running") if known else ApiError(404, "model is not found", "not_found_error")
    if not known:
        return bad_request("model is not found")
    return bad_request("with --ray a model stays loaded while the application runs (its replicas scale with --min-replicas 0)")


def models_json(specs: list[ModelSpec], info: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """GET /models of the application: every model as the router lists a loaded one, with
    `info` (a replica's own /v1/models entry, by model name) where the router says nothing."""
    now = int(time.time())
    data = [model_json(Instance(s, status="loaded", args=s.args, info=dict(info.get(s.name, {}))), now) for s in specs]
    return {"data": data, "object": "list"}
