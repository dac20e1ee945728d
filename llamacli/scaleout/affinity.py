"""Cache affinity: which replica holds the longest prefix of a request's text, and the ranking
of replicas a router hands to Ray Serve. Pure: no Ray, tested without a cluster.

The design follows Ray's own prefix-aware router (ray.serve.llm's PrefixCacheAffinityRouter):
the router does not ask the replicas what their caches hold, it remembers the text it sent
each replica (an approximation of the replica's prompt cache, right as long as the replica
keeps its recent prompts: llama.cpp's slots keep the last prompt each), and

1. when the replicas' loads differ by more than `imbalance` requests, the least-loaded one wins
   (affinity must not pile a hot conversation's followers onto one busy replica);
2. else the replicas that were sent the longest earlier text of which the request is a
   continuation (a conversation's earlier turn: its whole prompt is cached there);
3. else the replicas whose remembered text shares the longest prefix with the request, when
   that prefix is at least `min_match` of the request's text (a long shared system prompt);
4. else the replicas that hold the fewest texts, then the fewest characters (new
   conversations spread out over the replicas' slots).

Ours differs in rule 2 (Ray's goes from the load check straight to the longest partial
match with a 10% threshold: new conversations that share a few words of preamble all land on
one replica while loads are even) and in where the memory lives: in the router's process (the ingress replica), not in
a detached actor (one call less per request); it keeps `keys_per_replica` texts per replica,
the most recently routed, and forgets a replica when it leaves.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class AffinityPolicy:
    imbalance: int = 4  # ongoing requests: a larger spread between replicas routes on load alone
    min_match: float = 0.5  # share of the request's text a partial match must cover to count
    keys_per_replica: int = 64  # texts remembered per replica (its slots hold one prompt each)


@dataclass
class PrefixIndex:
    """The texts recently routed to each replica, most recent last."""

    capacity: int = 64
    texts: dict[str, OrderedDict[str, None]] = field(default_factory=dict)

    def keep_only(self, replicas: Iterable[str]) -> None:
        """Forget the replicas not in `replicas` (gone), start empty for new ones."""
        live = set(replicas)
        for r in [r for r in self.texts if r not in live]:
            del self.texts[r]
        for r in live:
            self.texts.setdefault(r, OrderedDict())

    def forget(self, replica: str) -> None:
        self.texts.pop(replica, None)

    def insert(self, replica: str, text: str) -> None:
        """Remember that `text` went to `replica` (a text it extends is dropped: it holds it)."""
        if not text:
            return
        held = self.texts.setdefault(replica, OrderedDict())
        for old in [t for t in held if text.startswith(t)]:
            del held[old]
        held[text] = None
        while len(held) > self.capacity:
            held.popitem(last=False)

    def matches(self, text: str, replicas: Iterable[str]) -> dict[str, int]:
        """Per replica, the length of the longest prefix of `text` it holds."""
        return {r: max((len(os.path.commonprefix([text, t])) for t in self.texts.get(r, ())), default=0)
                for r in replicas}

    def continued(self, text: str, replicas: Iterable[str]) -> dict[str, int]:
        """Per replica, the length of the longest text it was sent that `text` continues."""
        return {r: max((len(t) for t in self.texts.get(r, ()) if text.startswith(t)), default=0) for r in replicas}

    def size(self, replica: str) -> tuple[int, int]:
        """What `replica` holds: texts (conversations, each in a slot), then their characters."""
        held = self.texts.get(replica, ())
        return len(held), sum(len(t) for t in held)


def rank(
    replicas: list[str], loads: Mapping[str, int], text: str, index: PrefixIndex, policy: AffinityPolicy
) -> list[list[str]]:
    """The replicas in ranks, most preferred first (Ray Serve takes the least-loaded replica of
    the first rank that has room). Loads are ongoing requests (missing: 0)."""
    if not replicas:
        return []
    load = [loads.get(r, 0) for r in replicas]
    if not text or max(load) - min(load) > policy.imbalance:
        return [replicas]
    earlier = index.continued(text, replicas)
    held = index.matches(text, replicas)
    if max(earlier.values()) > 0:
        first = [r for r in replicas if earlier[r] == max(earlier.values())]
    elif max(held.values()) >= max(1.0, policy.min_match * len(text)):
        first = [r for r in replicas if held[r] == max(held.values())]
    else:
        sizes = {r: index.size(r) for r in replicas}
        first = [r for r in replicas if sizes[r] == min(sizes.values())]
    rest = [r for r in replicas if r not in first]
    return [first, rest] if rest else [first]
