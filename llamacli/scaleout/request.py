"""What the ingress sends a replica: one HTTP request as the client made it, the text the router
matches against the replicas' caches, and an optional pin to one replica (the fan-out of the
aggregated endpoints). The router reads it from the call's first argument."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ForwardedRequest:
    method: str
    path: str
    query_string: bytes
    headers: tuple[tuple[bytes, bytes], ...]  # as ASGI gives them (lower-case names)
    body: bytes
    client: tuple[str, int] | None
    key: str = ""  # the routing text (routing_key.py); "" routes on load alone
    pin: str | None = None  # a replica's id: only that replica may take it

    def header(self, name: bytes) -> bytes | None:
        """The first value of header `name` (lower-case), if present."""
        return next((v for k, v in self.headers if k == name), None)
