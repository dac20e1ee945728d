"""The web page in router mode (llama-server's ROUTER mode: `llama serve --models-dir DIR`), in
headless Chromium: the model selector (Loaded / Available, load on select, a failed load),
requests naming the model, regenerating with another model, and the modality check.

Against the stub server as a router (tests/ui_stub.py), and once end to end against a real
router over two tiny models (slow)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.http_server import LlamaServer
from tests.tiny_models import write_tiny_model
from tests.ui_files import make_png
from tests.ui_stub import ASSISTANT, Reply, StubModel, StubServer, send, wait_idle


@pytest.fixture()
def stub() -> Iterator[StubServer]:
    models = [StubModel("alpha", status="loaded"), StubModel("beta"), StubModel("gamma", vision=True),
              StubModel("broken", fail="error: unsupported model architecture 'mamba9'")]
    with StubServer(router=True, models=models) as s:
        yield s


def groups(page: Any) -> dict[str, list[str]]:
    return page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('#model-select optgroup')]
        .map(g => [g.label, [...g.querySelectorAll('option')].map(o => o.value)]))""")


def select(page: Any, model: str) -> None:
    page.select_option("#model-select", model)
    page.wait_for_selector(f"#model-meta:has-text('slots')")
    assert page.input_value("#model-select") == model


def test_selector_loads_on_select(page: Any, stub: StubServer) -> None:
    page.goto(stub.url)
    page.wait_for_selector("#model-meta:has-text('context 2048')")  # alpha's own /props
    assert page.is_visible("#model-select") and not page.is_visible("#model-name")
    assert page.input_value("#model-select") == "alpha"  # the first loaded model
    assert groups(page) == {"Loaded": ["alpha"], "Available": ["beta", "gamma", "broken"]}
    select(page, "beta")  # not loaded: loaded now, as llama-server's selector does
    assert stub.loads == ["beta"]
    assert groups(page) == {"Loaded": ["alpha", "beta"], "Available": ["gamma", "broken"]}
    stub.replies.append(Reply(["from beta"]))
    send(page, "hello")
    page.wait_for_selector(f"{ASSISTANT} .content:has-text('from beta')")
    wait_idle(page)
    assert stub.requests[-1]["model"] == "beta"
    assert page.text_content(f"{ASSISTANT} .who") == "beta"
    page.reload()  # the choice is remembered
    page.wait_for_selector("#model-meta:has-text('slots')")
    assert page.input_value("#model-select") == "beta"
    # a model that cannot load says why (its last log line), and the page stays usable
    page.select_option("#model-select", "broken")
    page.wait_for_selector("#model-meta:has-text('broken failed to load')")
    assert "unsupported model architecture 'mamba9'" in page.inner_text("#model-meta")
    assert page.errors.errors == []


def test_regenerate_with_another_model(page: Any, stub: StubServer) -> None:
    page.goto(stub.url)
    page.wait_for_selector("#model-meta:has-text('slots')")
    stub.replies.extend([Reply(["alpha says"]), Reply(["gamma says"])])
    send(page, "question")
    page.wait_for_selector(f"{ASSISTANT} .content:has-text('alpha says')")
    wait_idle(page)
    assert page.evaluate("[...document.querySelectorAll('.regen-model option')].map(o => o.value)") == [
        "", "alpha", "beta", "gamma", "broken"]
    page.select_option(f"{ASSISTANT} .regen-model", "gamma")  # not loaded: loaded first
    page.wait_for_selector(f"{ASSISTANT} .content:has-text('gamma says')")
    wait_idle(page)
    assert [r["model"] for r in stub.requests] == ["alpha", "gamma"] and stub.loads == ["gamma"]
    assert stub.requests[0]["messages"] == stub.requests[1]["messages"]
    assert page.text_content(f"{ASSISTANT} .who") == "gamma" and page.inner_text(f"{ASSISTANT} .branch-label") == "2/2"
    assert page.input_value("#model-select") == "alpha"  # the selection itself is unchanged
    page.click(f"{ASSISTANT} button.prev-branch")
    assert page.text_content(f"{ASSISTANT} .who") == "alpha"
    # Regenerate (no model picked) asks the model that gave that answer
    stub.replies.append(Reply(["alpha again"]))
    page.click(f"{ASSISTANT} button.regenerate")
    page.wait_for_selector(f"{ASSISTANT} .content:has-text('alpha again')")
    assert stub.requests[-1]["model"] == "alpha"


def test_modality_check(page: Any, stub: StubServer, tmp_path: Path) -> None:
    seen: list[str] = []
    page.on("dialog", lambda d: seen.append(d.message))
    png = tmp_path / "cat.png"
    png.write_bytes(make_png())
    page.goto(stub.url)
    page.wait_for_selector("#model-meta:has-text('slots')")
    page.set_input_files("#attach", str(png))  # alpha: text only
    page.wait_for_timeout(300)
    assert seen == ["cat.png: alpha does not take images"] and page.locator("#attachments .chip").count() == 0
    select(page, "gamma")  # vision
    assert "vision" in page.inner_text("#model-meta")
    page.set_input_files("#attach", str(png))
    page.wait_for_selector("#attachments .chip:has-text('cat.png')")
    stub.replies.append(Reply(["a red pixel"]))
    send(page, "What is this?")
    wait_idle(page)
    parts = stub.requests[-1]["messages"][-1]["content"]
    assert parts[0] == {"type": "text", "text": "What is this?"}
    assert parts[1]["type"] == "image_url" and parts[1]["image_url"]["url"].startswith("data:image/png;base64,")
    # alpha cannot answer about the image: the answer says so, nothing is sent
    page.select_option(f"{ASSISTANT} .regen-model", "alpha")
    page.wait_for_selector(f"{ASSISTANT}.error .content:has-text('alpha does not take images')")
    assert len(stub.requests) == 1
    # nor can a message with an image go to it
    select(page, "alpha")
    select(page, "gamma")
    page.set_input_files("#attach", str(png))
    page.wait_for_selector("#attachments .chip")
    select(page, "alpha")
    send(page, "and this?")
    page.wait_for_timeout(300)
    assert seen[-1] == "alpha does not take images: remove the attachment or pick another model."
    assert len(stub.requests) == 1 and page.locator("#attachments .chip").count() == 1


def test_no_model_chosen_yet(page: Any) -> None:
    seen: list[str] = []
    page.on("dialog", lambda d: seen.append(d.message))
    with StubServer(router=True, models=[StubModel("beta"), StubModel("gamma")]) as stub:
        page.goto(stub.url)
        page.wait_for_selector("#model-meta:has-text('2 models: pick one')")
        assert page.input_value("#model-select") == "" and stub.loads == []  # nothing loads unasked
        send(page, "hi")
        page.wait_for_timeout(300)
        assert seen == ["Select a model first."] and stub.requests == []


# ---- end to end: a real router ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    d = tmp_path_factory.mktemp("ui-models")
    write_tiny_model("qwen2", "Q8_0", d / "first.gguf")
    write_tiny_model("llama", "Q8_0", d / "second.gguf")
    cache = tmp_path_factory.mktemp("cache")  # an empty model cache: the router lists the folder only
    with LlamaServer("--models-dir", str(d), "-c", "512", "-np", "1", "--no-warmup", "--chat-template", "chatml",
                     env={"LLAMA_CACHE": str(cache)}) as s:
        yield s


@pytest.mark.slow
def test_the_selector_against_a_router(page: Any, router: LlamaServer) -> None:
    page.goto(router.url + "/")
    page.wait_for_selector("#model-meta:has-text('2 models: pick one')")
    assert groups(page) == {"Available": ["first", "second"]}
    page.select_option("#model-select", "first")
    page.wait_for_selector("#model-meta:has-text('context 512')", timeout=120_000)
    assert groups(page) == {"Loaded": ["first"], "Available": ["second"]}
    page.click("#open-settings")
    page.fill("#set-max_tokens", "4")
    page.click("#close-settings")
    with page.expect_request("**/v1/chat/completions") as req:
        send(page, "Hello")
    assert req.value.post_data_json["model"] == "first"
    wait_idle(page, 120_000)
    assert not page.query_selector(f"{ASSISTANT}.error"), page.inner_text(ASSISTANT)
    assert page.text_content(f"{ASSISTANT} .who") == "first"
    # the same question to the other model: loaded, then asked
    with page.expect_request("**/v1/chat/completions") as req:
        page.select_option(f"{ASSISTANT} .regen-model", "second")
    assert req.value.post_data_json["model"] == "second"
    wait_idle(page, 120_000)
    assert not page.query_selector(f"{ASSISTANT}.error"), page.inner_text(ASSISTANT)
    assert page.text_content(f"{ASSISTANT} .who") == "second" and page.inner_text(f"{ASSISTANT} .branch-label") == "2/2"
    # the page loaded it (POST /models/load) before it asked
    assert re.search(r"model second: starting \(pid \d+\).*\(POST /models/load\)", router.log()), router.log()
    assert page.errors.errors == []
