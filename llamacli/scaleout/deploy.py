"""`llama serve --ray`: connect to the cluster, deploy the application (an ingress deployment,
the Forwarder at the Serve proxy, over the engine deployment, LlamaReplica), wait for a signal,
delete the application (Serve drains it: requests in flight finish first). Router mode
(`--models-dir`/`--models-preset`, models.py): one engine deployment per model under the
router's ingress (models_ingress.py).

Placement: one replica per node by default (`--replicas-per-node`), each reserving `-t`
CPUs (one when -t is every core: the engine then uses its node's cores). Scaling:
`--replicas N`, or autoscaling between `--min-replicas` and `--max-replicas` on ongoing
requests, the target being the replica's slots (-np).
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any

from llamacli.core.errors import LlamaError
from llamacli.options.ray_serve import RayOptions
from llamacli.scaleout.models import ModelDeployment
from llamacli.scaleout.replica import LlamaReplica, ReplicaSpec

APP = "llama"  # the Serve application's name
ENGINE, INGRESS = "LlamaEngine", "LlamaIngress"  # its deployments
DRAIN_S = 30.0  # seconds a replica's requests may run on when the application is deleted
PROGRESS_S = 10.0  # seconds between progress lines while the replicas start
START_HINT = "start one with `ray start --head` (and `ray start --address=HEAD:6379` on each other machine)"


class NoCluster(LlamaError):
    """No Ray cluster to deploy on (exit 1)."""


def connect(address: str) -> None:
    """ray.init on the cluster at `address` (`auto` as Ray reads it), or NoCluster."""
    try:
        import ray
    except ImportError:
        raise NoCluster("--ray: Ray Serve is not installed: pip install 'llamacli[ray]'") from None
    if address != "auto" and not _reachable(address):
        raise NoCluster(f"--ray: no Ray cluster at {address}: {START_HINT}")
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    except ConnectionError:
        raise NoCluster(f"--ray: no Ray cluster running ({address}): {START_HINT}") from None


def _reachable(address: str) -> bool:
    """Whether the head's GCS port answers (an unreachable address would make ray.init wait)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host or address, int(port) if port.isdigit() else 6379), timeout=5).close()
    except (OSError, ValueError):
        return False
    return True


def engine_options(spec: ReplicaSpec, scaling: RayOptions, name: str = ENGINE) -> dict[str, Any]:
    """The engine deployment's Serve options."""
    slots = spec.opts.slots.n_parallel
    threads = spec.opts.load.threads
    opts: dict[str, Any] = {
        "name": name,
        "ray_actor_options": {"num_cpus": threads if threads > 0 else 1},
        "max_replicas_per_node": scaling.replicas_per_node,
        "max_ongoing_requests": 2 * slots,  # the slots, and as many queued in the engine
        "graceful_shutdown_timeout_s": DRAIN_S,
        "health_check_period_s": 2.0,
    }
    if scaling.router == "affinity":
        opts["request_router_config"] = {
            "request_router_class": "llamacli.scaleout.router:CacheAffinityRouter",
            "request_router_kwargs": {"imbalance": max(2, slots), "keys_per_replica": 16 * slots},
        }
    if scaling.autoscaling:
        opts["autoscaling_config"] = {
            "min_replicas": scaling.min_replicas or 0, "max_replicas": scaling.max_replicas or max(1, scaling.min_replicas or 1),
            "target_ongoing_requests": slots, "initial_replicas": max(1, scaling.min_replicas or 0),
        }
    else:
        opts["num_replicas"] = scaling.replicas or 1
    return opts


def application(spec: ReplicaSpec, scaling: RayOptions) -> Any:
    """The Serve application of one model: the ingress over the engine deployment."""
    from llamacli.scaleout.ingress import Forwarder

    engine = _engine(spec, scaling, ENGINE)
    return _ingress(Forwarder).bind(engine, ENGINE)


def models_application(models: list[ModelDeployment], api_keys: list[str]) -> Any:
    """The Serve application of router mode: the router's ingress (which checks the API keys)
    over one engine deployment per model."""
    from llamacli.scaleout.models_ingress import ModelsIngress

    engines = [_engine(m.replica, m.scaling, m.deployment) for m in models]
    return _ingress(ModelsIngress).bind([m.spec for m in models], [m.deployment for m in models], engines, api_keys)


def _engine(spec: ReplicaSpec, scaling: RayOptions, name: str) -> Any:
    from ray import serve

    return serve.deployment(**engine_options(spec, scaling, name))(LlamaReplica).bind(spec)


def _ingress(make: Callable[..., Any]) -> Any:
    """The ingress deployment: the ASGI app `make(*args)` at the Serve proxy."""
    from ray import serve

    @serve.ingress()
    class LlamaIngress:
        def __init__(self, *args: Any) -> None:
            self.llama_app = make(*args)  # not `app`: Serve's ingress wrapper has that property

        def __serve_build_asgi_app__(self) -> Any:
            return self.llama_app

    return serve.deployment(
        name=INGRESS, ray_actor_options={"num_cpus": 0}, max_ongoing_requests=10_000, graceful_shutdown_timeout_s=DRAIN_S,
    )(LlamaIngress)


def replicas_text(scaling: RayOptions) -> str:
    """How many replicas a deployment has, for the log."""
    n = scaling.min_replicas if scaling.autoscaling else scaling.replicas or 1
    return f"{n} replica{'' if n == 1 else 's'}{f' up to {scaling.max_replicas}' if scaling.max_replicas else ''}"


def serve_on_ray(app: Any, address: str, what: str, host: str, port: int, log: Callable[[str], None]) -> None:
    """Deploy `app` (application() or models_application()) on the cluster at `address`, serve
    until SIGINT/SIGTERM, then delete the application (drained). A signal while the replicas
    still load (or wait for a node) stops the deployment at once. `what` says in the ready
    line what runs (its replicas)."""
    connect(address)
    import ray
    from ray import serve

    stop, deployed = threading.Event(), threading.Event()

    def on_signal(*_: object) -> None:
        stop.set()
        if not deployed.is_set():
            raise KeyboardInterrupt  # out of serve.run, which waits for every replica

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    started = False
    try:
        serve.start(http_options={"host": host, "port": port, "location": "HeadOnly"})
        log(f"deploying on Ray ({ray.get_runtime_context().gcs_address}): loading the model on each replica")
        started = True
        threading.Thread(target=_report_progress, args=(deployed, log), name="llama-ray-progress", daemon=True).start()
        serve.run(app, name=APP, route_prefix="/", blocking=False)
        deployed.set()
        log(f"ready at http://{host}:{port} (Ray Serve application '{APP}', {what})")
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        deployed.set()  # a second signal now waits for the drain
        if started:
            log(f"shutting down: draining the replicas (at most {DRAIN_S:.0f} s)")
            serve.delete(APP)
        ray.shutdown()


def _report_progress(deployed: threading.Event, log: Callable[[str], None]) -> None:
    """While the application is not running: every PROGRESS_S seconds, its engine replicas'
    states and Serve's message (a replica that no node can take waits forever: say so)."""
    from ray import serve

    while not deployed.wait(PROGRESS_S):
        app = serve.status().applications.get(APP)
        for name, engine in (app.deployments.items() if app is not None else ()):
            if name == INGRESS:
                continue
            # the states are ReplicaState names (plain strings in this schema)
            states = ", ".join(f"{n} {str(getattr(state, 'value', state)).lower()}" for state, n in engine.replica_states.items())
            log(f"waiting for the replicas{f' of {name}' if name != ENGINE else ''}: {states or 'none yet'}"
                + (f"; Ray Serve: {engine.message}" if engine.message else ""))
