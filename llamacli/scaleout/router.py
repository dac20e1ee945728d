"""The cache-affinity request router on Ray Serve's public `RequestRouter` API
(`ray.serve.request_router`): the ranking of affinity.py over the deployment's replicas.

Ray Serve routes in the caller's process: this router lives in the ingress replica, which
sends every request to the engine deployment. It also keeps the list of replicas for the
ingress's fan-out (local_routers.py), and honours a request's pin (`ForwardedRequest.pin`:
that replica or none, for the aggregated endpoints).
"""

from __future__ import annotations

from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from llamacli.scaleout import local_routers
from llamacli.scaleout.affinity import AffinityPolicy, PrefixIndex, rank
from llamacli.scaleout.request import ForwardedRequest

def _request(pending: PendingRequest | None) -> ForwardedRequest | None:
    if pending is None or not pending.args or not isinstance(pending.args[0], ForwardedRequest):
        return None
    return pending.args[0]


class CacheAffinityRouter(RequestRouter):
    """Longest cached prefix first; least loaded when loads differ by more than a threshold."""

    def initialize_state(self, **kwargs: Any) -> None:
        self.policy = AffinityPolicy(**kwargs)
        self.index = PrefixIndex(self.policy.keys_per_replica)
        local_routers.ROUTERS[self._deployment_id.name] = self

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        req = _request(pending_request)
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        if req is not None and req.pin is not None:
            return [[by_id[req.pin]]] if req.pin in by_id else []
        ids = sorted(by_id)
        loads = await self._loads(candidate_replicas)
        ranks = rank(ids, loads, req.key if req is not None else "", self.index, self.policy)
        return [[by_id[r] for r in group] for group in ranks]

    async def _loads(self, replicas: list[RunningReplica]) -> dict[str, int]:
        """Ongoing requests per replica: Serve's queue-length cache, probed where it has none
        (as Serve's own routers do)."""
        cache = self.replica_queue_len_cache
        loads = {r.replica_id.unique_id: cache.get(r.replica_id) for r in replicas}
        missing = [r for r in replicas if loads[r.replica_id.unique_id] is None]
        if missing:
            for r, n in await self._probe_queue_lens(missing, 0):
                loads[r.replica_id.unique_id] = n
        return {r: n for r, n in loads.items() if n is not None}

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any) -> None:
        req = _request(pending_request)
        if req is not None and req.pin is None:
            self.index.insert(replica_id.unique_id, req.key)

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        self.index.keep_only(r.unique_id for r in self.curr_replicas)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self.index.forget(replica_id.unique_id)
