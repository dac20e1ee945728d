"""The HTTP tests' way into the app: a synchronous client over Quart's test client, SSE
framing, an app over the fake engine (tests/fakes.py) and the `client` fixture (one app per
test module), and the tool-calling test data.

    from tests.http_app_client import Client, client, make  # noqa: F401 (client is a fixture)
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from llamacli.http.app import create_app
from llamacli.http.config import ServerConfig
from tests.fakes import FakeEngine, FakeTokenizer, fake_model


class Client:
    """Synchronous calls into the app through Quart's test client."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def request(self, method: str, path: str, json_body: Any = None, headers: dict[str, str] | None = None,
                data: bytes | None = None) -> tuple[int, Any, Any]:
        async def go() -> tuple[int, Any, Any]:
            c = self.app.test_client()
            kw: dict[str, Any] = {"headers": headers or {}}
            if json_body is not None:
                kw["json"] = json_body
            if data is not None:
                kw["data"] = data
            r = await c.open(path, method=method, **kw)
            raw = await r.get_data(as_text=False)
            ctype = r.headers.get("Content-Type", "")
            if ctype.startswith("image/png"):
                return r.status_code, raw, r.headers  # binary: the bytes
            text = raw.decode()
            body = json.loads(text) if "json" in ctype and text else text
            return r.status_code, body, r.headers

        return asyncio.run(go())

    def post(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any, Any]:
        return self.request("POST", path, body, **kw)

    def get(self, path: str, **kw: Any) -> tuple[int, Any, Any]:
        return self.request("GET", path, **kw)


def sse_events(text: str) -> list[str]:
    """The data payloads of an SSE body; every message must end with a blank line."""
    assert text.endswith("\n\n")
    out = []
    for msg in text.split("\n\n")[:-1]:
        lines = [ln for ln in msg.split("\n") if ln.startswith("data: ")]
        assert len(lines) == 1, msg
        out.append(lines[0][len("data: "):])
    return out


def make(config: ServerConfig | None = None, **engine_kw: Any) -> tuple[Client, FakeEngine]:
    tok = FakeTokenizer(fim=engine_kw.pop("fim", False))
    eng = FakeEngine(tokenizer=tok, **engine_kw)
    return Client(create_app(eng, config or ServerConfig(), fake_model(tok))), eng


@pytest.fixture(scope="module")
def client() -> Client:
    return make(ServerConfig(aliases=["fake", "fake-2"], embeddings=True, metrics=True))[0]


# tool calling test data (a chatml model answers in the generic format)
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
CALL_REPLY = '{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}'  # chatml: generic format
ASK = [{"role": "user", "content": "Weather in Paris?"}]
