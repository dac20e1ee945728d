"""The web UI's images and audio in headless Chromium against a real `llama serve -mm` (the demo
model with the tiny gemma3 projector, tests/tiny_mmproj.py) and a real one without a projector:
attach, paste and drop an image (thumbnails), the OpenAI `image_url` part reaching the server and
its positions counted in the prompt, audio refused by a model without it, and the note and refusal
when /props reports no vision. Each server is stopped by its PID (tests/http_server.py)."""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.http_server import LlamaServer
from tests.tiny_mmproj import SPECS, write_projector

pytestmark = pytest.mark.slow

PROMPT_LOG = re.compile(r"task \d+ \(slot \d+\): prompt (\d+) tok")


def _png(color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (48, 32), color).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def vision(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    mm = write_projector(SPECS["gemma3"], tmp_path_factory.mktemp("ui_mm") / "mmproj.gguf")
    with LlamaServer("-mm", str(mm), "-c", "512", "-np", "1", "--no-warmup") as s:
        yield s


def _open(page: Any, srv: LlamaServer) -> None:
    page.goto(srv.url + "/")
    page.wait_for_selector("#model-meta:has-text('context 512')")
    page.click("#open-settings")
    page.fill("#set-max_tokens", "1")
    page.fill("#set-temperature", "0")
    page.click("#close-settings")


def _send(page: Any, text: str) -> dict[str, Any]:
    """Send `text` (with the pending attachments); the request's body once the answer is done."""
    page.fill("#input", text)
    with page.expect_request("**/v1/chat/completions") as req:
        page.press("#input", "Enter")
    page.wait_for_selector("#send:not([hidden])", state="visible", timeout=120_000)
    assert not page.query_selector(".msg.assistant.error"), page.inner_text(".msg.assistant.error")
    return dict(req.value.post_data_json)


def _thumbs_loaded(page: Any, where: str) -> list[int]:
    """The natural widths of the thumbnails under `where` (0: an image that did not render)."""
    return list(page.eval_on_selector_all(f"{where} .chip img.thumb", "imgs => imgs.map(i => i.complete ? i.naturalWidth : -1)"))


def test_images_go_to_the_projector_as_image_url_parts(page: Any, vision: LlamaServer, tmp_path: Path) -> None:
    seen: list[str] = []
    page.on("dialog", lambda d: seen.append(d.message))
    _open(page, vision)
    assert "vision" in page.inner_text("#model-meta") and page.is_hidden("#media-note")
    text_only = _send(page, "What is this?")
    page.click("#new-chat")
    red = tmp_path / "red.png"
    red.write_bytes(_png((220, 20, 40)))
    page.set_input_files("#attach", str(red))  # the file picker
    page.wait_for_selector("#attachments .chip:has-text('red.png') img.thumb")
    assert _thumbs_loaded(page, "#attachments") == [48]  # the thumbnail rendered under the page's CSP
    body = _send(page, "What is this?")
    parts = body["messages"][-1]["content"]
    assert parts[0] == {"type": "text", "text": "What is this?"}
    assert parts[1]["type"] == "image_url"
    assert base64.b64decode(parts[1]["image_url"]["url"].removeprefix("data:image/png;base64,")) == red.read_bytes()
    # the server encoded it (the prompt evaluated its 16 positions and 2 framing tokens, beside
    # what the cache held); the body as sent counts them in its usage (and the text around them)
    assert int(PROMPT_LOG.findall(vision.log())[-1]) >= 16 + 2
    usage = [vision.post("/v1/chat/completions", b | {"stream": False})[1]["usage"]["prompt_tokens"] for b in (text_only, body)]
    assert usage[1] >= usage[0] + 16 + 2
    assert page.locator("#attachments .chip").count() == 0
    assert _thumbs_loaded(page, ".msg.user") == [48]  # the sent message keeps its thumbnail
    page.reload()
    page.wait_for_selector(".msg.user .chip img.thumb")
    assert _thumbs_loaded(page, ".msg.user") == [48]

    # pasted and dropped images are attached the same way; a file name stays text
    page.evaluate("""(b64) => {
        const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
        const file = (name) => new File([bytes], name, {type: 'image/png'});
        const paste = new DataTransfer();
        paste.items.add(file('pasted.png'));
        document.querySelector('#input').dispatchEvent(new ClipboardEvent('paste', {clipboardData: paste, bubbles: true, cancelable: true}));
        const drop = new DataTransfer();
        drop.items.add(file('<img src=x onerror="window.pwned=1">.png'));
        for (const type of ['dragover', 'drop'])
          document.querySelector('main').dispatchEvent(new DragEvent(type, {dataTransfer: drop, bubbles: true, cancelable: true}));
    }""", base64.b64encode(_png((20, 200, 40))).decode())
    page.wait_for_selector("#attachments .chip:has-text('onerror')")
    names = [t.split("×")[0].strip() for t in page.locator("#attachments .chip").all_inner_texts()]
    assert names == ["pasted.png", '<img src=x onerror="window.pwned=1">.png']
    assert _thumbs_loaded(page, "#attachments") == [48, 48]
    assert page.evaluate("window.pwned") is None

    # audio: this projector takes images only, so a WAV file is refused with the reason
    wav = tmp_path / "voice.wav"
    wav.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt ")
    page.set_input_files("#attach", str(wav))
    page.wait_for_timeout(300)
    assert seen and seen[-1].startswith("voice.wav:") and seen[-1].endswith("does not take audio")
    assert page.locator("#attachments .chip").count() == 2
    assert "images" in (page.get_attribute("label.attach", "title") or "")
    assert all("403" in e for e in page.errors.errors), page.errors.errors  # GET /tools of a server without --tools


def test_a_server_without_a_projector_says_so_and_sends_no_image(page: Any, tmp_path: Path) -> None:
    seen: list[str] = []
    page.on("dialog", lambda d: seen.append(d.message))
    with LlamaServer("-c", "512", "-np", "1", "--no-warmup") as srv:
        _open(page, srv)
        page.wait_for_selector("#media-note:has-text('takes no images or audio')")
        assert "no images" in (page.get_attribute("label.attach", "title") or "")
        png = tmp_path / "cat.png"
        png.write_bytes(_png((1, 2, 3)))
        page.set_input_files("#attach", str(png))
        page.wait_for_timeout(300)
        assert len(seen) == 1 and seen[0].startswith("cat.png:") and seen[0].endswith("does not take images")
        assert page.locator("#attachments .chip").count() == 0
        body = _send(page, "Hello")
        assert body["messages"][-1]["content"] == "Hello"  # a plain string: no image part


# ---- audio, and stored attachments, against the stub server (tests/ui_stub.py) -----------------


@pytest.fixture()
def omni() -> Iterator[Any]:
    from tests.ui_stub import StubModel, StubServer

    with StubServer(router=True, models=[StubModel("omni", status="loaded", vision=True, audio=True)]) as s:
        yield s


def test_audio_goes_as_input_audio_and_stored_urls_stay_inert(page: Any, omni: Any, tmp_path: Path) -> None:
    """A model that takes audio: a WAV file gets the ♪ mark and goes as an `input_audio` part.
    A stored image whose URL is not an image data: URL (an edited or imported conversation)
    shows its name only: the page loads nothing from it."""
    from tests.ui_stub import ASSISTANT, Reply, send, wait_idle

    page.goto(omni.url)
    page.select_option("#model-select", "omni")
    page.wait_for_selector("#model-meta:has-text('audio')")
    assert page.is_hidden("#media-note") and "images and audio" in (page.get_attribute("label.attach", "title") or "")
    wav = tmp_path / "voice.wav"
    wav.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt ")
    png = tmp_path / "pic.png"
    png.write_bytes(_png((9, 9, 9)))
    page.set_input_files("#attach", [str(wav), str(png)])
    page.wait_for_selector("#attachments .chip:has-text('pic.png') img.thumb")
    assert page.inner_text("#attachments .chip:has-text('voice.wav') .thumb.audio") == "♪"
    omni.replies.append(Reply(["heard it"]))
    send(page, "What is it?")
    wait_idle(page)
    page.wait_for_selector(f"{ASSISTANT} .content:has-text('heard it')")
    parts = omni.requests[-1]["messages"][-1]["content"]
    assert parts[1] == {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav.read_bytes()).decode(), "format": "wav"}}
    assert parts[2]["type"] == "image_url"

    outside: list[str] = []
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(omni.url) else None)
    page.evaluate("""() => {
        const key = 'llamacli.conversations.v1';
        const data = JSON.parse(localStorage.getItem(key));
        for (const conv of Object.values(data))
          for (const m of Object.values(conv.messages))
            for (const a of m.attachments || [])
              if (a.kind === 'image') a.url = 'https://example.invalid/x.png';
        localStorage.setItem(key, JSON.stringify(data));
    }""")
    page.reload()
    page.wait_for_selector(".msg.user .chip:has-text('pic.png')")
    assert page.locator(".msg.user .chip img").count() == 0 and outside == []
