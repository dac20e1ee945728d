"""A replica of the engine deployment: one engine, loaded once when the replica starts, and the
whole Quart app of `llama serve` over it, run in-process for each forwarded request
(asgi_call.py). Every option means what it means to `llama serve` (-np, -c, -t, sampling
defaults, API keys, ...): the replica builds its configs from the same ServeOptions.

The model file is opened on the replica's node: `-m PATH` must be a path every node sees (a
shared file system, or the same file on each), `-hf` downloads into each node's own cache, no
-m the demo model installed on each node.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from llamacli.core.sampling import SamplingParams
from llamacli.options.mmproj import MmprojOptions
from llamacli.options.model_source import ModelSource
from llamacli.options.serve_options import ServeOptions
from llamacli.options.speculative import SpecOptions
from llamacli.scaleout.asgi_call import Message, call_asgi
from llamacli.scaleout.request import ForwardedRequest


REPLICA_HEADER = b"x-llama-replica"  # in every response: the replica that answered


@dataclass(frozen=True)
class ReplicaSpec:
    """What `llama serve --ray` was given, as every replica needs it."""

    source: ModelSource
    opts: ServeOptions
    sampling: SamplingParams
    speculative: SpecOptions
    mmproj: MmprojOptions  # -mm (or -hf's projector): what every replica loads for images in prompts


def _log(msg: str) -> None:
    print(f"llama replica: {msg}", file=sys.stderr, flush=True)


class LlamaReplica:
    """The engine deployment's class (ray.serve.deployment wraps it in deploy.py)."""

    def __init__(self, spec: ReplicaSpec) -> None:
        from ray import serve

        from llamacli.commands.serve import load_engine
        from llamacli.http.app import create_app
        from llamacli.http.state import ServerState
        from llamacli.options.mmproj import fetch_model
        from llamacli.options.serve_options import server_config

        self.id = serve.get_replica_context().replica_id.unique_id
        self.state = ServerState(server_config(spec.opts, spec.sampling, spec.speculative))
        model, mmproj = fetch_model(spec.source, spec.mmproj)
        self.state.media_limits = mmproj.limits
        engine, info = load_engine(model, spec.opts, spec.speculative, _log, mmproj, self.state)
        self.state.set_ready(engine, info)
        self.app: Any = create_app(state=self.state)
        _log(f"replica {self.id}: {info.file_name} ready ({engine.config.n_parallel} slots)")

    async def asgi(self, req: ForwardedRequest) -> AsyncIterator[Message]:
        """The app's ASGI messages answering `req`, as it sends them; the response says which
        replica answered (`X-Llama-Replica`)."""
        async for msg in call_asgi(self.app, req):
            if msg["type"] == "http.response.start":
                msg["headers"] = [*msg.get("headers", []), (REPLICA_HEADER, self.id.encode())]
            yield msg

    def __del__(self) -> None:
        """Serve drained the replica's requests (graceful shutdown): stop the engine."""
        from llamacli.http.server import ENGINE_STOP_WAIT, stop_engine

        state = getattr(self, "state", None)
        if state is not None and state.engine is not None:
            stop_engine(state.engine, ENGINE_STOP_WAIT)
            state.executor.shutdown(wait=False, cancel_futures=True)
