"""`llama serve --ray ADDRESS`: deploy onto a Ray cluster as a Ray Serve application
(llamacli/scaleout/, docs/scaleout.md). The options say where and how many replicas; every
other `llama serve` option keeps its meaning, per replica."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from llamacli.core.errors import LlamaError
from llamacli.options.groups import RAY, Opt, in_panel, option_group


def _at_least_one(n: int) -> None:
    if n < 1:
        raise ValueError("must be at least 1")


def _not_negative(n: int) -> None:
    if n < 0:
        raise ValueError("must be 0 or more")


ROUTERS = ("affinity", "pow2")


def _router(name: str) -> None:
    if name not in ROUTERS:
        raise ValueError(f"must be one of {', '.join(ROUTERS)}")


OPTIONS: list[Opt] = in_panel(RAY, [
    Opt("address", Optional[str], None, ("--ray",),
        "Deploy on the Ray cluster at ADDRESS as a Ray Serve application (`auto`: RAY_ADDRESS, else the cluster "
        "started on this machine); needs Ray Serve, llamacli's `ray` extra. --host/--port are the Serve proxy's. "
        "With --models-dir/--models-preset: one deployment per model, routed by the request's model.",
        metavar="ADDRESS"),
    Opt("replicas", Optional[int], None, ("--replicas",), "Replicas of the engine, one engine each (default 1).",
        metavar="N", check=_at_least_one),
    Opt("min_replicas", Optional[int], None, ("--min-replicas",),
        "Autoscale from N replicas, on ongoing requests against each replica's slots (-np).", metavar="N",
        check=_not_negative),
    Opt("max_replicas", Optional[int], None, ("--max-replicas",), "Autoscale up to N replicas.", metavar="N",
        check=_at_least_one),
    Opt("replicas_per_node", int, 1, ("--replicas-per-node",), "Most replicas on one Ray node.", metavar="N",
        check=_at_least_one),
    Opt("router", str, "affinity", ("--ray-router",),
        "How requests pick a replica: `affinity` (the replica that holds the longest prefix of the prompt; the "
        "least loaded when loads differ by more than -np) or `pow2` (Ray Serve's default: the less loaded of two).",
        metavar="affinity|pow2", check=_router),
])


class RayOptionsError(LlamaError):
    """The --ray options contradict each other (exit 1)."""


@dataclass(frozen=True)
class RayOptions:
    address: str | None = None  # None: not on Ray
    replicas: int | None = None  # a fixed number of replicas
    min_replicas: int | None = None  # autoscaling bounds (either given: autoscaling)
    max_replicas: int | None = None
    replicas_per_node: int = 1
    router: str = "affinity"  # or "pow2": Ray Serve's default router

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def autoscaling(self) -> bool:
        return self.min_replicas is not None or self.max_replicas is not None


def build(values: dict[str, Any]) -> RayOptions:
    o = RayOptions(**values)
    if not o.enabled and (o.replicas is not None or o.autoscaling):
        raise RayOptionsError("--replicas/--min-replicas/--max-replicas need --ray ADDRESS")
    if o.replicas is not None and o.autoscaling:
        raise RayOptionsError("give --replicas N or --min-replicas/--max-replicas, not both")
    lo, hi = o.min_replicas or 0, o.max_replicas
    if hi is not None and lo > hi:
        raise RayOptionsError(f"--min-replicas {lo} is above --max-replicas {hi}")
    return o


ray_options = option_group("ray", OPTIONS, build, prefixed=True)
