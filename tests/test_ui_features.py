"""The web UI's llama-server features in headless Chromium, against the stub server
(tests/ui_stub.py): conversation search and the keyboard shortcuts, PDF and text attachments
(drag and drop too), the modality check, prompt progress from /slots and prompt_progress, the
mobile layout and the web-app manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.ui_files import make_pdf, make_png
from tests.ui_stub import ASSISTANT, Reply, StubServer, open_page, send, stub, wait_idle  # noqa: F401 (stub: a fixture)


def chat(page: Any, stub: StubServer, text: str, answer: str) -> None:
    stub.replies.append(Reply([answer]))
    send(page, text)
    page.wait_for_selector(f"{ASSISTANT} >> nth=-1 >> .content:has-text('{answer}')")
    wait_idle(page)


def listed(page: Any) -> list[str]:
    return [t.strip() for t in page.locator("#conversations .conv-name").all_inner_texts()]


def alerts(page: Any) -> list[str]:
    """The messages of the page's alert()/confirm() dialogs, as they come (all accepted)."""
    seen: list[str] = []
    page.on("dialog", lambda d: seen.append(d.message))
    return seen


def wait_for(page: Any, cond: Any, seconds: float = 20) -> None:
    """Let the page run until `cond()` holds (for what only Python sees, such as dialogs)."""
    for _ in range(int(seconds * 10)):
        if cond():
            return
        page.wait_for_timeout(100)
    raise AssertionError("the page never got there")


# ---- search and shortcuts ----------------------------------------------------------------------


def test_search_by_title_and_content(page: Any, stub: StubServer) -> None:
    open_page(page, stub)
    chat(page, stub, "apples question", "an answer about pears")
    page.keyboard.press("Control+Shift+O")
    chat(page, stub, "bananas", "yellow things")
    page.keyboard.press("Control+Shift+O")
    chat(page, stub, "cherries", "the zebra has stripes, like a long and winding explanation of everything")
    page.keyboard.press("Control+Shift+O")
    assert listed(page) == ["cherries", "bananas", "apples question"]
    page.keyboard.press("Control+K")
    assert page.evaluate("document.activeElement.id") == "search"
    page.keyboard.type("ZEBRA")  # case-insensitive, in the answers too
    assert listed(page) == ["cherries"]
    assert page.inner_text("#conversations .snippet mark") == "zebra"
    assert page.inner_text("#conversations .snippet").startswith("the zebra has stripes")
    page.fill("#search", "apples")  # by title: no snippet
    assert listed(page) == ["apples question"] and not page.query_selector("#conversations .snippet")
    page.press("#search", "Enter")  # opens the first match
    page.wait_for_selector(f"{ASSISTANT} .content:has-text('pears')")
    assert page.inner_text("#conversations li.active .conv-name") == "apples question"
    page.fill("#search", "durian")
    assert page.inner_text("#conversations .no-match") == "No conversation matches."
    page.press("#search", "Escape")  # clears the search, back to the message box
    assert listed(page) == ["cherries", "bananas", "apples question"]
    assert page.evaluate("document.activeElement.id") == "input"
    page.keyboard.press("Meta+K")  # Cmd on macOS
    assert page.evaluate("document.activeElement.id") == "search"


def test_keyboard_shortcuts(page: Any, stub: StubServer) -> None:
    open_page(page, stub)
    chat(page, stub, "first chat", "one")
    page.keyboard.press("Control+Shift+O")  # new chat
    page.wait_for_selector("#log .empty")
    assert not page.query_selector("#conversations li.active")
    chat(page, stub, "second chat", "two")
    # previous / next conversation, in the sidebar's order (newest first)
    page.keyboard.press("Control+Shift+ArrowDown")
    page.wait_for_selector(f"{ASSISTANT} .content:has-text('one')")
    page.keyboard.press("Control+Shift+ArrowUp")
    page.wait_for_selector(f"{ASSISTANT} .content:has-text('two')")
    # rename the open conversation
    page.keyboard.press("Control+Shift+E")
    page.fill("#conversations .rename-input", "renamed by keyboard")
    page.press("#conversations .rename-input", "Enter")
    assert listed(page) == ["renamed by keyboard", "first chat"]
    # the sidebar, hidden and shown
    page.keyboard.press("Control+B")
    assert not page.is_visible("#sidebar")
    page.keyboard.press("Control+B")
    assert page.is_visible("#sidebar")
    # Escape stops an answer
    stub.replies.append(Reply([f"w{i} " for i in range(200)], delay=0.1))
    send(page, "long one")
    page.wait_for_selector(f"{ASSISTANT} >> nth=-1 >> .content:has-text('w2')")
    page.keyboard.press("Escape")
    wait_idle(page)
    assert "stopped" in page.inner_text(f"{ASSISTANT} >> nth=-1 >> .stats")
    # delete the open conversation (after the confirmation)
    page.keyboard.press("Control+Shift+D")
    page.wait_for_selector("#log .empty")
    assert listed(page) == ["first chat"]
    page.click("#open-settings")
    assert "Search conversations" in page.text_content("#shortcut-list")  # the list, in Settings
    assert page.errors.errors == []


# ---- attachments -------------------------------------------------------------------------------


def test_pdf_text_and_dropped_files(page: Any, stub: StubServer, tmp_path: Path) -> None:
    seen = alerts(page)
    open_page(page, stub)
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(make_pdf(["The secret number is 1234", "Page two says hello"]))
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\nremember the milk\n")
    page.set_input_files("#attach", [str(pdf), str(notes)])
    page.wait_for_selector("#attachments .chip:has-text('notes.md')")
    assert [c.split("×")[0] for c in page.locator("#attachments .chip").all_inner_texts()] == ["report.pdf", "notes.md"]
    # a file dropped on the chat is attached too
    page.evaluate("""() => {
        const dt = new DataTransfer();
        dt.items.add(new File(['dropped text'], 'dropped.txt', {type: 'text/plain'}));
        for (const type of ['dragover', 'drop'])
          document.querySelector('main').dispatchEvent(new DragEvent(type, {dataTransfer: dt, bubbles: true, cancelable: true}));
    }""")
    page.wait_for_selector("#attachments .chip:has-text('dropped.txt')")
    stub.replies.append(Reply(["read it"]))
    send(page, "What does it say?")
    wait_idle(page)
    content = stub.requests[-1]["messages"][-1]["content"]
    assert "report.pdf:\n```\nThe secret number is 1234\n\nPage two says hello\n```" in content
    assert "notes.md:\n```\n# Notes\nremember the milk\n\n```" in content and "dropped.txt:\n```\ndropped text\n```" in content
    assert content.endswith("What does it say?")
    assert page.query_selector(".msg.user .chip:has-text('report.pdf')")
    # a broken PDF and one without text are refused, with the reason
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\nnot really a pdf\n")
    blank = tmp_path / "scan.pdf"
    blank.write_bytes(make_pdf([""]))
    page.set_input_files("#attach", [str(broken), str(blank)])
    wait_for(page, lambda: len(seen) >= 2)
    assert any(m.startswith("broken.pdf: not a readable PDF") for m in seen), seen
    assert any(m.startswith("scan.pdf: this PDF has no text layer") for m in seen), seen
    assert page.locator("#attachments .chip").count() == 0
    # PDF.js ran in its worker under the page's CSP: no violation, no eval
    assert [e for e in page.errors.errors if "Content Security Policy" in e or "unsafe-eval" in e] == []


def test_media_needs_a_model_that_takes_it(page: Any, stub: StubServer, tmp_path: Path) -> None:
    """The modality check: this model's /props says no vision and no audio."""
    seen = alerts(page)
    open_page(page, stub)
    png = tmp_path / "cat.png"
    png.write_bytes(make_png())
    wav = tmp_path / "voice.wav"
    wav.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt ")
    page.set_input_files("#attach", [str(png), str(wav)])
    wait_for(page, lambda: len(seen) >= 2)
    assert "cat.png: stub-model-Q4_K_M does not take images" in seen
    assert "voice.wav: stub-model-Q4_K_M does not take audio" in seen
    assert page.locator("#attachments .chip").count() == 0


# ---- progress while the prompt is processed ---------------------------------------------------


def test_progress_from_slots_and_prompt_progress(page: Any, stub: StubServer) -> None:
    open_page(page, stub)
    stats = f"{ASSISTANT} >> nth=-1 >> .stats"

    def ask(text: str, reply: Reply) -> None:
        stub.replies.append(reply)
        send(page, text)

    # every slot busy generating for others: queued
    stub.slots = [{"id": i, "is_processing": True, "n_prompt_tokens": 9, "next_token": [{"n_decoded": 5}]} for i in range(2)]
    ask("one", Reply(["done one"], wait=2.0))
    page.wait_for_selector(f"{stats}:has-text('Waiting for a free slot (2/2 busy)')")
    page.wait_for_selector(f"{ASSISTANT} .content:has-text('done one')")
    wait_idle(page)
    assert "Waiting" not in page.inner_text(stats) and "TTFT" in page.inner_text(stats)
    assert stub.requests[-1]["return_progress"] is True
    # a slot evaluating a prompt (nothing decoded yet): its progress
    stub.slots = [{"id": 0, "is_processing": True, "n_prompt_tokens": 100, "n_cached_tokens": 40,
                   "next_token": [{"n_decoded": 0}]}, {"id": 1, "is_processing": False}]
    ask("two", Reply(["done two"], wait=2.0))
    page.wait_for_selector(f"{stats}:has-text('Processing prompt 40% (40/100 tokens)')")
    wait_idle(page)
    # the request's own prompt_progress chunks win over what /slots says
    ask("three", Reply(["done three"], wait=2.4, progress=[
        {"total": 200, "cache": 50, "processed": 125, "time_ms": 10}, {"total": 200, "cache": 50, "processed": 200, "time_ms": 20}]))
    page.wait_for_selector(f"{stats}:has-text('Processing prompt 50% (125/200 tokens, 50 cached)')")
    page.wait_for_selector(f"{stats}:has-text('Processing prompt 100%')")
    wait_idle(page)
    # no /slots (--no-slots): the page just waits, without errors of its own
    stub.slots = None
    ask("four", Reply(["done four"], wait=0.8))
    page.wait_for_selector(f"{ASSISTANT} .content:has-text('done four')")
    assert all("501" in e for e in page.errors.errors), page.errors.errors


# ---- layout and installation -------------------------------------------------------------------


def test_mobile_layout(browser: Any, stub: StubServer) -> None:
    ctx = browser.new_context(viewport={"width": 390, "height": 760}, is_mobile=True, has_touch=True, device_scale_factor=2)
    page = ctx.new_page()
    try:
        open_page(page, stub)
        chat(page, stub, "on the phone", "a short answer")
        # nothing wider than the screen; the composer fits, the sidebar waits behind ☰
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        assert not page.is_visible("#sidebar")
        send = page.locator("#send").bounding_box()
        assert send["x"] + send["width"] <= 390 and send["y"] + send["height"] <= 760
        page.tap("#toggle-sidebar")
        assert page.is_visible("#sidebar") and page.is_visible("#scrim")
        assert page.locator("#sidebar").bounding_box()["width"] < 390
        page.tap("#scrim", position={"x": 375, "y": 400})  # beside the sidebar
        assert not page.is_visible("#sidebar")
        page.tap("#toggle-sidebar")
        page.tap("#conversations .conv-name")  # opening a conversation closes the sidebar
        assert not page.is_visible("#sidebar") and not page.is_visible("#scrim")
        page.tap("#open-settings")
        box = page.locator("#settings").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390
        assert page.evaluate("parseFloat(getComputedStyle(document.getElementById('input')).fontSize)") >= 16  # no zoom on focus
    finally:
        ctx.close()


def test_web_app_manifest_and_icons(page: Any, stub: StubServer) -> None:
    open_page(page, stub)
    href = page.get_attribute("link[rel=manifest]", "href")
    manifest = json.loads(page.evaluate("(h) => fetch(h).then(r => r.text())", href))
    assert manifest["name"] == "llama" and manifest["display"] == "standalone" and manifest["start_url"] == "./"
    for icon in manifest["icons"]:
        size = page.evaluate("""(src) => new Promise((ok, bad) => { const i = new Image();
            i.onload = () => ok([i.naturalWidth, i.naturalHeight]); i.onerror = bad; i.src = src; })""",
                             "/" + icon["src"])
        if icon["sizes"] != "any":
            assert f"{size[0]}x{size[1]}" == icon["sizes"], icon
    # Chromium's own reading: the manifest parses and the page can be installed
    cdp = page.context.new_cdp_session(page)
    app = cdp.send("Page.getAppManifest")
    assert app["errors"] == [] and app["url"].endswith("/manifest.webmanifest")
    errors = [e["errorId"] for e in cdp.send("Page.getInstallabilityErrors")["installabilityErrors"]]
    assert errors in ([], ["in-incognito"]), errors  # a test context is incognito: nothing else stands in the way
    assert page.errors.errors == []


def test_no_tools_on_the_server(page: Any, stub: StubServer) -> None:
    """A server without --tools answers /tools with 403: no Tools button, no `tools` sent."""
    stub.tools = None
    open_page(page, stub)
    chat(page, stub, "hi", "hello")
    assert not page.is_visible("#open-tools")
    assert "tools" not in stub.requests[-1]
