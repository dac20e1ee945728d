"""The request routers of this process, by deployment name: how the ingress learns which
replicas there are (for the aggregated endpoints' fan-out) from the router Serve made for its
handle. Its own module, imported as a module by router.py: Ray ships the router class to the
process by value (its functions then see a copy of router.py's globals), never this module."""

from __future__ import annotations

from typing import Any

ROUTERS: dict[str, Any] = {}  # deployment name -> its CacheAffinityRouter in this process


def live_replicas(deployment: str) -> list[str]:
    """The ids of the replicas this process's router for `deployment` routes to ([]: none yet)."""
    router = ROUTERS.get(deployment)
    return [] if router is None else sorted(r.unique_id for r in router.curr_replicas)
