"""The web UI against a real `llama serve` (demo model) in headless Chromium: the page, its
headers, the API key, settings reaching the server, a streamed answer, reload. Nothing here
depends on the text the model generates (only on how many tokens it was allowed)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.http_server import LlamaServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def srv(demo_model: str) -> Iterator[LlamaServer]:
    with LlamaServer("-m", demo_model, "-c", "512", "-np", "1", "--api-key", "secret-key") as s:
        yield s


def test_chat_against_llama_serve(page: Any, srv: LlamaServer, demo_model: str) -> None:
    resp = page.goto(srv.url + "/")
    assert resp is not None and resp.ok
    csp = resp.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    # the page is public, the API is not: the page says so
    page.wait_for_selector("#model-meta:has-text('API key')")

    page.click("#open-settings")
    page.fill("#set-api_key", "secret-key")
    page.fill("#set-max_tokens", "4")
    page.fill("#set-temperature", "0")
    page.fill("#set-top_k", "5")
    page.click("#close-settings")
    page.wait_for_selector("#model-meta:has-text('context 512')")
    # /v1/models needs the key too (as llama-server): with it, the page names the model
    expected_name = os.path.basename(demo_model).removesuffix(".gguf")
    assert page.inner_text("#model-name") == expected_name  # the file name, not the cache path
    page.click("#open-settings")  # placeholders are now the server's defaults
    assert page.get_attribute("#set-top_p", "placeholder") == "0.95"
    page.click("#close-settings")

    page.fill("#input", "Say hello.")
    with page.expect_request("**/v1/chat/completions") as req:
        page.press("#input", "Enter")
    body = req.value.post_data_json
    assert body["max_tokens"] == 4 and body["temperature"] == 0 and body["top_k"] == 5 and body["stream"] is True
    assert req.value.headers["authorization"] == "Bearer secret-key"
    page.wait_for_selector("#send:not([hidden])", state="visible", timeout=120_000)
    msg = ".msg.assistant"
    assert not page.query_selector(f"{msg}.error"), page.inner_text(msg)
    stats = page.inner_text(f"{msg} .stats")
    m = re.search(r"(\d+) tokens", stats)
    assert m and 1 <= int(m.group(1)) <= 4, stats  # the server applied max_tokens
    assert "TTFT" in stats and "tok/s" in stats
    assert page.inner_text(f"{msg} .content").strip()
    assert "POST /v1/chat/completions" in srv.log()

    page.reload()
    page.wait_for_selector(".msg.user .content:has-text('Say hello.')")
    assert page.inner_text("#conversations li.active .conv-name") == "Say hello."
    # 401s before the key was set; 403: GET /tools of a server without --tools
    assert all("401" in e or "403" in e for e in page.errors.errors), page.errors.errors
    # llama-server's per-request timing line
    assert re.search(r"task \d+ \(slot 0\): prompt \d+ tok .* generated \d+ tok [\d.]+ tok/s, stop: \w+", srv.log()), srv.log()
