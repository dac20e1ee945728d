"""Hostile request shapes for the fuzzer (tests/test_http_fuzz.py) and the request-bounds tests:
long rule chains, deep nesting, huge alternations and huge lists, put in every field of every
route that takes them (read from /openapi.json; through a router, the child's document and
the router's own routes), with the crash and stall checks.

    with HealthWatch(srv.url) as watch, httpx2.Client() as client:   # /health from a thread
        problems = run_cases(client, srv, hostile_cases(openapi), watch)  # one keep-alive connection
    assert not problems and not watch.stalls

A shape is only as large as it must be to have crashed or stalled the server once (issue #30:
a 4,000-rule chain, a 3,000-link $ref chain, 10,000 DRY breakers, 100,000 alternatives, a
multi-megabyte text to tokenize), so a whole run takes a minute or two.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

# ---- grammars and schemas -------------------------------------------------------------------


def gbnf_chain(n: int) -> str:
    """root -> r0 -> ... -> r{n}: each rule names the next (4,000 overflowed llguidance's stack)."""
    return "\n".join(["root ::= r0", *(f'r{i} ::= "a" r{i + 1}' for i in range(n)), f'r{n} ::= "b"'])


def lark_chain(n: int) -> str:
    return "\n".join(["start: r0", *(f'r{i}: "a" r{i + 1}' for i in range(n)), f'r{n}: "b"'])


def gbnf_nest(n: int) -> str:
    return "root ::= " + "(" * n + '"a"' + ")" * n


def gbnf_alternation(n: int, lexeme: bool = False) -> str:
    """n alternatives in the start rule, or (``lexeme``) in a rule of its own, which llguidance
    turns into one lexeme (a start rule of more than 2,000 alternatives fails at its first
    token: llguidance's max_items_in_row)."""
    words = " | ".join(f'"w{i}"' for i in range(n))
    return f"root ::= word\nword ::= {words}" if lexeme else f"root ::= {words}"


def ref_chain(n: int) -> dict[str, Any]:
    """A JSON schema whose $defs form a chain of n $refs (3,000 overflowed llguidance's stack)."""
    defs: dict[str, Any] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(n)}
    defs[f"d{n}"] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def schema_nest(n: int) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "string"}
    for _ in range(n):
        s = {"type": "array", "items": s}
    return s


def schema_alternation(n: int) -> dict[str, Any]:
    return {"anyOf": [{"const": f"w{i}"} for i in range(n)]}


@dataclass(frozen=True)
class Nested:
    """A JSON value nested `depth` lists deep, written by `encode_body` (json.dumps itself
    would overflow Python's stack; a server's JSON parser once did: a 500 RecursionError)."""

    depth: int


def encode_body(body: dict[str, Any]) -> bytes:
    """The body as JSON text, each `Nested` value spelled out."""
    nested: list[Nested] = []

    def default(v: Any) -> str:
        if isinstance(v, Nested):
            nested.append(v)
            return f"\x00nested{len(nested) - 1}\x00"
        raise TypeError(type(v).__name__)

    text = json.dumps(body, default=default)
    for i, n in enumerate(nested):
        text = text.replace(json.dumps(f"\x00nested{i}\x00"), "[" * n.depth + "]" * n.depth)
    return text.encode()


# ---- shapes per field ---------------------------------------------------------------------------

DRY = {"dry_multiplier": 0.8}  # DRY on, so that the breakers are used
ANY = "(any route)"  # a shape sent to every route, in a field of its own


@dataclass(frozen=True)
class Shape:
    field: str
    name: str
    make: Callable[[], dict[str, Any]]  # the fields to add to a route's base body


def _rf(schema: dict[str, Any]) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}


SHAPES: tuple[Shape, ...] = (
    Shape("grammar", "gbnf rule chain x4000", lambda: {"grammar": gbnf_chain(4000)}),
    Shape("grammar", "gbnf rule chain x900", lambda: {"grammar": gbnf_chain(900)}),
    Shape("grammar", "lark rule chain x4000", lambda: {"grammar": lark_chain(4000)}),
    Shape("grammar", "nested parentheses x5000", lambda: {"grammar": gbnf_nest(5000)}),
    Shape("grammar", "alternatives x100000", lambda: {"grammar": gbnf_alternation(100_000)}),
    Shape("grammar", "alternatives x20000", lambda: {"grammar": gbnf_alternation(20_000)}),
    Shape("grammar", "alternatives x20000 in a lexeme", lambda: {"grammar": gbnf_alternation(20_000, lexeme=True)}),
    Shape("json_schema", "$ref chain x3000", lambda: {"json_schema": ref_chain(3000)}),
    Shape("json_schema", "nested arrays x120", lambda: {"json_schema": schema_nest(120)}),
    Shape("json_schema", "nested arrays x900", lambda: {"json_schema": schema_nest(900)}),
    Shape("json_schema", "anyOf x20000", lambda: {"json_schema": schema_alternation(20_000)}),
    Shape("response_format", "$ref chain x3000", lambda: _rf(ref_chain(3000))),
    Shape("response_format", "nested arrays x900", lambda: _rf(schema_nest(900))),
    Shape("dry_sequence_breakers", "x10000",
          lambda: {**DRY, "dry_sequence_breakers": [f"b{i}" for i in range(10_000)]}),
    Shape("dry_sequence_breakers", "x1000 of 40 bytes",
          lambda: {**DRY, "dry_sequence_breakers": [f"{i:04d}" * 10 for i in range(1000)]}),
    Shape("stop", "x10000", lambda: {"stop": [f"s{i}" for i in range(10_000)]}),
    Shape("stop", "x1000 of 1000 characters", lambda: {"stop": [f"{i:04d}" * 250 for i in range(1000)]}),
    Shape("stop_sequences", "x10000", lambda: {"stop_sequences": [f"s{i}" for i in range(10_000)]}),
    Shape("logit_bias", "object x100000", lambda: {"logit_bias": {f"w{i}": -1 for i in range(100_000)}}),
    Shape("logit_bias", "pairs x100000", lambda: {"logit_bias": [[i % 100, -1] for i in range(100_000)]}),
    Shape("logit_bias", "one key of 1M characters", lambda: {"logit_bias": {"a" * 1_000_000: -1}}),
    Shape("prompt", "2M characters", lambda: {"prompt": "a" * 2_000_000}),
    Shape("content", "2M characters", lambda: {"content": "a" * 2_000_000}),
    Shape("input", "2M characters", lambda: {"input": "a" * 2_000_000}),
    Shape(ANY, "a value nested 5000 lists deep", lambda: {"nested": Nested(5000)}),
)

# What a route's base body puts in its required fields (a route needing another is skipped).
_REQUIRED: dict[str, Any] = {
    "prompt": "hi",
    "messages": [{"role": "user", "content": "hi"}],
    "input": "hi",
    "content": "hi",
    "max_tokens": 4,
    "query": "hi",
    "filename": "x.bin",
}
_SKIP = ("/slots", "/models", "/lora-adapters", "/props", "/apply-template", "/v1/chat/completions/control",
         "/chat/completions/control")


@dataclass(frozen=True)
class Case:
    path: str
    body: dict[str, Any]
    what: str

    def __str__(self) -> str:
        return f"POST {self.path} with {self.what}"


def _schema(doc: dict[str, Any], op: dict[str, Any]) -> dict[str, Any] | None:
    s = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if isinstance(s, dict) and "$ref" in s:
        s = doc.get("components", {}).get("schemas", {}).get(s["$ref"].rsplit("/", 1)[-1])
    return s if isinstance(s, dict) and s.get("type") == "object" else None


def hostile_cases(openapi: dict[str, Any], model: str | None = None) -> Iterator[Case]:
    """Every shape in every field of every POST route whose body takes that field (ANY: in
    every route), each body naming `model` when given (a router's routes need it)."""
    for path, ops in sorted(openapi.get("paths", {}).items()):
        op = ops.get("post")
        if op is None or "{" in path or path.startswith(_SKIP):
            continue
        schema = _schema(openapi, op)
        if schema is None:
            continue
        props = schema.get("properties", {})
        required = schema.get("required", [])
        if any(r not in _REQUIRED and not (r == "model" and model) for r in required):
            continue
        base = {r: _REQUIRED[r] for r in required if r in _REQUIRED}
        if model:
            base["model"] = model
        for shape in SHAPES:
            if shape.field in props or shape.field == ANY:
                yield Case(path, {**base, **shape.make()}, f"{shape.field}: {shape.name}")


ROUTER_OWN = ("/models/load", "/models/unload")  # POST routes a router answers itself


def router_cases(child_openapi: dict[str, Any], model: str) -> Iterator[Case]:
    """Through a router: every hostile case of its child's routes, naming `model`, and every
    shape sent to the router's own POST routes (naming no model it has: the body must be read
    and refused, never load or unload anything)."""
    yield from hostile_cases(child_openapi, model)
    for path in ROUTER_OWN:
        for shape in SHAPES:
            yield Case(path, {"model": "no-such-model", **shape.make()}, f"{shape.field}: {shape.name}")


def send(client: Any, url: str, case: Case) -> tuple[int, Any]:
    """POST one case on `client` (an httpx client: one keep-alive connection for them all);
    (0, None) when no answer came (a crash, a stall past the client's timeout, a dropped
    connection)."""
    import httpx2

    try:
        r = client.post(url + case.path, content=encode_body(case.body), headers={"Content-Type": "application/json"})
    except httpx2.HTTPError:
        return 0, None
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, r.text


def run_cases(client: Any, srv: Any, cases: Iterable[Case], *watches: HealthWatch) -> list[str]:
    """Send each case (labelling the watches with it) and check its answer and that the
    server process still runs; the problems found."""
    problems: list[str] = []
    for case in cases:
        for w in watches:
            w.label = str(case)
        status, body = send(client, srv.url, case)
        problems += check_answer(case, status, body)
        if srv.proc is None or srv.proc.poll() is not None:
            problems.append(f"{case}: the server exited ({srv.proc.returncode if srv.proc else None})")
            break
    return problems


# ---- the checks ----------------------------------------------------------------------------------

_NATIVE = ("<backtrace>", "panicked at", "Traceback (most recent call last)", "RecursionError")


def check_answer(case: Case, status: int, body: Any) -> list[str]:
    """What is wrong with the answer to one case: no answer, a 5xx (but llama-server's 501 for
    a feature the server was started without), an error that is not llama-server's JSON
    shape, or one that carries a native backtrace or a Python traceback."""
    if status == 0:
        return [f"{case}: no answer (the server crashed, stalled or dropped the connection)"]
    problems = []
    err = body.get("error") if isinstance(body, dict) else None
    not_supported = status == 501 and isinstance(err, dict) and err.get("type") == "not_supported_error"
    if status >= 500 and not not_supported:  # 501: a feature this server was not started with
        problems.append(f"{case}: {status} {str(body)[:300]}")
    if status >= 400:
        if not (isinstance(err, dict) and {"code", "message", "type"} <= set(err)):
            problems.append(f"{case}: {status} without llama-server's error object: {str(body)[:300]}")
    text = json.dumps(body) if not isinstance(body, str) else body
    problems += [f"{case}: the answer carries {bad!r}: {text[:300]}" for bad in _NATIVE if bad in text]
    return problems


class HealthWatch:
    """GET /health (or `path`) from a thread while a block runs. A stall is no 200 within
    `limit` seconds twice in a row (a single slow answer on a busy machine is not one);
    `stalls` says when each happened, `label` (set by the caller) what was being sent."""

    def __init__(self, url: str, limit: float = 1.0, every: float = 0.1, path: str = "/health") -> None:
        self.url = url + path
        self.limit = limit
        self.every = every
        self.label = ""
        self.stalls: list[str] = []
        self.probes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health-watch", daemon=True)

    def __enter__(self) -> HealthWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _ok(self) -> bool:
        try:
            with urllib.request.urlopen(self.url, timeout=self.limit) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _run(self) -> None:
        while not self._stop.is_set():
            self.probes += 1
            if not self._ok() and not self._ok():
                self.stalls.append(f"{self.url} gave no 200 within {self.limit:g} s, twice, during: {self.label}")
            time.sleep(self.every)
