"""The web UI in a real headless Chromium, against a stub OpenAI-compatible server that streams
canned replies (tests/ui_stub.py): what the page renders and sends never depends on a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.ui_stub import ASSISTANT, Reply, StubServer, open_page, send, stub, wait_idle  # noqa: F401 (stub: a fixture)


def test_markdown_streams_in_rendered(page: Any, stub: StubServer) -> None:
    open_page(page, stub)
    # model name: the file name, not the cache path; the title too
    assert page.inner_text("#model-name") == "stub-model-Q4_K_M"
    assert page.title() == "stub-model-Q4_K_M · llama"
    stub.replies.append(Reply(
        ["# Plan\n\n", "Some **bold** text", " and $e^{i\\pi}+1=0$.\n\n", "```python\n", "def f():\n    return 1\n", "```\n",
         "\n$$\\int_0^1 x\\,dx$$\n", "\n| a | b |\n|---|---|\n| 1 | 2 |\n"],
        delay=0.25,
    ))
    send(page, "Explain")
    # while streaming: the Markdown already rendered, the live stats line, the stop button
    page.wait_for_selector(f"{ASSISTANT} .content strong:has-text('bold')")
    assert page.is_visible("#stop")
    page.wait_for_selector(f"{ASSISTANT} .stats:has-text('TTFT')")
    page.wait_for_selector(f"{ASSISTANT} .stats:has-text('tok/s')")
    assert not page.query_selector(f"{ASSISTANT} .content table")  # not there yet: it is streaming
    wait_idle(page)
    content = f"{ASSISTANT} .content"
    assert page.inner_text(f"{content} h1") == "Plan"
    assert page.query_selector(f"{content} .katex")  # inline math
    assert page.query_selector(f"{content} .math-block .katex-display")  # display math
    assert page.query_selector(f"{content} pre code.language-python .hljs-keyword")  # highlighted
    assert page.query_selector(f"{content} table td")
    stats = page.inner_text(f"{ASSISTANT} .stats")
    assert "TTFT" in stats and "8 tokens" in stats and "42.5 tok/s" in stats
    assert page.errors.errors == []


def test_model_output_html_is_inert(page: Any, stub: StubServer) -> None:
    open_page(page, stub)
    attack = [
        '<img src=x onerror="window.__pwned=1">\n\n',
        "<script>window.__pwned=2</script>\n\n",
        '<svg onload="window.__pwned=3"></svg>\n\n',
        "[click me](javascript:window.__pwned=4)\n\n",
        '<a href="javascript:window.__pwned=5">raw link</a>\n\n',
        '<iframe src="javascript:window.__pwned=6"></iframe>\n\n',
        "$\\href{javascript:window.__pwned=7}{x}$\n",
    ]
    stub.replies.append(Reply(attack, reasoning=['<img src=y onerror="window.__pwned=8">'],
                              tool_calls=[{"name": "<b onmouseover=x>t</b>", "arguments": '{"a":"<img src=z onerror=alert(1)>"}'}]))
    send(page, "attack")
    wait_idle(page)
    for link in page.query_selector_all(f"{ASSISTANT} .content a"):
        link.click()
    page.hover(f"{ASSISTANT} .tool-call")
    page.wait_for_timeout(300)
    assert page.evaluate("window.__pwned") is None
    msg = page.query_selector(ASSISTANT)
    for tag in ("img", "script", "svg", "iframe"):
        assert msg.query_selector(tag) is None, tag
    for a in msg.query_selector_all("a"):
        assert not (a.get_attribute("href") or "").lower().startswith("javascript:")
    assert not msg.query_selector("[onerror], [onload], [onmouseover]")
    text = page.inner_text(f"{ASSISTANT} .content")
    assert '<img src=x onerror="window.__pwned=1">' in text  # shown as text, not parsed
    # the page's policy forbids inline script outright
    csp = page.evaluate("fetch('/').then(r => r.headers.get('content-security-policy'))")
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp.split("script-src", 1)[1].split(";")[0]
    assert page.errors.errors == []


def test_stop_keeps_partial_answer(page: Any, stub: StubServer) -> None:
    open_page(page, stub)
    stub.replies.append(Reply([f"word{i} " for i in range(200)], delay=0.1))
    send(page, "long please")
    page.wait_for_selector(f"{ASSISTANT} .content:has-text('word2')")
    page.click("#stop")
    wait_idle(page)
    text = page.inner_text(f"{ASSISTANT} .content")
    assert "word2" in text and "word199" not in text
    assert "stopped" in page.inner_text(f"{ASSISTANT} .stats")
    # the next turn works and sends the partial answer as history
    stub.replies.append(Reply(["ok"]))
    send(page, "next")
    page.wait_for_selector(f"{ASSISTANT} >> nth=1 >> .content:has-text('ok')")
    msgs = stub.requests[-1]["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[1]["content"].startswith("word0 word1 word2")


def test_regenerate_and_branch_navigation(page: Any, stub: StubServer) -> None:
    open_page(page, stub)
    stub.replies.extend([Reply(["first answer"]), Reply(["second answer"])])
    send(page, "question")
    page.wait_for_selector(f"{ASSISTANT} .content:has-text('first answer')")
    wait_idle(page)
    page.click(f"{ASSISTANT} button.regenerate")
    page.wait_for_selector(f"{ASSISTANT} .content:has-text('second answer')")
    wait_idle(page)
    assert stub.requests[0]["messages"] == stub.requests[1]["messages"] == [{"role": "user", "content": "question"}]
    assert page.inner_text(f"{ASSISTANT} .branch-label") == "2/2"
    page.click(f"{ASSISTANT} button.prev-branch")
    page.wait_for_selector(f"{ASSISTANT} .content:has-text('first answer')")
    assert page.inner_text(f"{ASSISTANT} .branch-label") == "1/2"


def test_edit_user_message_continues_from_there(page: Any, stub: StubServer) -> None:
    open_page(page, stub)
    stub.replies.extend([Reply(["A1"]), Reply(["A2"]), Reply(["A3"])])
    send(page, "one")
    page.wait_for_selector(f"{ASSISTANT} .content:has-text('A1')")
    wait_idle(page)
    send(page, "two")
    page.wait_for_selector(f"{ASSISTANT} >> nth=1 >> .content:has-text('A2')")
    wait_idle(page)
    page.click(".msg.user >> nth=0 >> button.edit")
    page.fill(".msg.user textarea.edit", "one, edited")
    page.click(".msg.user button.save-edit")
    page.wait_for_selector(f"{ASSISTANT} .content:has-text('A3')")
    wait_idle(page)
    assert stub.requests[-1]["messages"] == [{"role": "user", "content": "one, edited"}]
    assert page.locator(".msg").count() == 2  # the later turns belong to the other branch
    assert page.inner_text(".msg.user .branch-label") == "2/2"
    page.click(".msg.user button.prev-branch")
    page.wait_for_selector(f"{ASSISTANT} >> nth=1 >> .content:has-text('A2')")


def test_reload_finds_the_conversation_rename_delete(page: Any, stub: StubServer) -> None:
    open_page(page, stub)
    stub.replies.append(Reply(["remembered **answer**"]))
    send(page, "Remember me")
    wait_idle(page)
    page.reload()
    page.wait_for_selector(f"{ASSISTANT} .content strong:has-text('answer')")
    assert page.inner_text("#conversations li.active .conv-name") == "Remember me"
    assert page.inner_text(".msg.user .content") == "Remember me"
    page.click("#conversations li.active button.rename")
    page.fill("#conversations .rename-input", "Renamed chat")
    page.press("#conversations .rename-input", "Enter")
    page.reload()
    page.wait_for_selector("#conversations .conv-name:has-text('Renamed chat')")
    page.click("#conversations li.active button.delete")
    page.wait_for_selector("#conversations li", state="detached")
    page.reload()
    page.wait_for_selector("#log .empty")
    assert page.locator("#conversations li").count() == 0


def test_settings_are_sent_and_persisted(page: Any, stub: StubServer) -> None:
    open_page(page, stub)
    page.click("#open-settings")
    assert page.get_attribute("#set-temperature", "placeholder") == "0.8"  # the server's default
    assert page.get_attribute("#set-seed", "placeholder") == "-1"  # /props says 4294967295: random, as the label says -1
    values = {"temperature": "0.25", "top_k": "7", "top_p": "0.5", "min_p": "0.1", "max_tokens": "16", "seed": "42",
              "repeat_penalty": "1.1", "dry_multiplier": "0.5", "xtc_probability": "0.2", "mirostat": "2",
              "mirostat_tau": "4", "presence_penalty": "0.3"}
    page.fill("#set-system", "You are terse.")
    for k, v in values.items():
        page.fill(f"#set-{k}", v)
    page.click("#close-settings")
    stub.replies.append(Reply(["fine"]))
    send(page, "hi")
    wait_idle(page)
    body = stub.requests[-1]
    assert body["messages"] == [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}]
    for k, v in values.items():
        assert body[k] == (int(v) if k in ("top_k", "max_tokens", "seed", "mirostat") else float(v)), k
    assert "top_n_sigma" not in body and "dry_base" not in body  # unset: the server's default
    assert body["stream"] is True
    page.reload()
    page.click("#open-settings")
    assert page.input_value("#set-top_k") == "7" and page.input_value("#set-system") == "You are terse."


def test_export_then_import(page: Any, stub: StubServer, browser: Any, tmp_path: Path) -> None:
    open_page(page, stub)
    stub.replies.append(Reply(["exported answer"]))
    send(page, "keep this")
    wait_idle(page)
    with page.expect_download() as dl:
        page.click("#export")
    path = tmp_path / "export.json"
    dl.value.save_as(path)
    data = json.loads(path.read_text())
    assert data["conversations"][0]["name"] == "keep this"
    # a fresh browser profile imports it
    ctx = browser.new_context()
    other = ctx.new_page()
    try:
        other.goto(stub.url)
        other.set_input_files("#import", str(path))
        other.wait_for_selector("#conversations .conv-name:has-text('keep this')")
        other.click("#conversations .conv-name:has-text('keep this')")
        other.wait_for_selector(f"{ASSISTANT} .content:has-text('exported answer')")
    finally:
        ctx.close()


def test_attachments_are_sent_as_context(page: Any, stub: StubServer, tmp_path: Path) -> None:
    open_page(page, stub)
    f = tmp_path / "notes.txt"
    f.write_text("the secret number is 1234\n")
    page.set_input_files("#attach", str(f))
    page.wait_for_selector("#attachments .chip:has-text('notes.txt')")
    long_text = "lorem ipsum " * 300
    page.evaluate(
        """(text) => { const dt = new DataTransfer(); dt.setData('text/plain', text);
             document.getElementById('input').dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true})); }""",
        long_text,
    )
    page.wait_for_selector("#attachments .chip:has-text('pasted text')")
    assert page.input_value("#input") == ""  # the long paste did not land in the box
    stub.replies.append(Reply(["got it"]))
    send(page, "What is the number?")
    wait_idle(page)
    content = stub.requests[-1]["messages"][-1]["content"]
    assert "notes.txt:\n```\nthe secret number is 1234\n" in content
    assert long_text in content and content.endswith("What is the number?")
    assert page.inner_text("#attachments") == ""
    assert page.query_selector(".msg.user .chip:has-text('notes.txt')")


def test_reasoning_folded_and_tool_calls_shown(page: Any, stub: StubServer) -> None:
    open_page(page, stub)
    stub.replies.append(Reply(["It is sunny."], reasoning=["Let me think", " about the weather."],
                              tool_calls=[{"name": "get_weather", "arguments": '{"city": "Paris"}'}]))
    send(page, "weather?")
    wait_idle(page)
    details = page.query_selector(f"{ASSISTANT} details.reasoning")
    assert details.is_visible() and details.get_attribute("open") is None  # folded
    assert not page.is_visible(f"{ASSISTANT} .reasoning-text")
    page.click(f"{ASSISTANT} details.reasoning summary")
    assert page.inner_text(f"{ASSISTANT} .reasoning-text") == "Let me think about the weather."
    # a tool call is folded as reasoning is: its name shows, its arguments once unfolded
    assert page.inner_text(f"{ASSISTANT} .tool-call summary") == "Tool call: get_weather"
    assert not page.is_visible(f"{ASSISTANT} .tool-call .tool-args")
    page.click(f"{ASSISTANT} .tool-call summary")
    assert page.inner_text(f"{ASSISTANT} .tool-call .tool-args") == '{\n  "city": "Paris"\n}'
    assert stub.tool_calls == []  # not a tool of this server: shown, never run


def test_failed_request_shows_the_error_not_an_empty_turn(page: Any, stub: StubServer) -> None:
    open_page(page, stub)
    stub.replies.append(Reply(status=500, error="the engine fell over"))
    send(page, "hello")
    wait_idle(page)
    assert "the engine fell over" in page.inner_text(f"{ASSISTANT} .content")
    stub.replies.append(Reply(status=401, error="Invalid API Key"))
    page.click(f"{ASSISTANT} button.regenerate")
    wait_idle(page)
    page.wait_for_selector(f"{ASSISTANT} .content:has-text('API key')")
    stub.replies.append(Reply(["recovered"]))
    send(page, "again")
    wait_idle(page)
    # the failed turn is not sent back as an (empty) assistant message
    assert [m["role"] for m in stub.requests[-1]["messages"]] == ["user", "user"]


def test_copy_buttons(page: Any, stub: StubServer) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=stub.url.rstrip("/"))
    open_page(page, stub)
    stub.replies.append(Reply(["Code:\n\n```js\nconsole.log(1)\n```\n"]))
    send(page, "code")
    wait_idle(page)
    page.click(f"{ASSISTANT} button.copy-code")
    assert page.evaluate("navigator.clipboard.readText()") == "console.log(1)"
    page.click(f"{ASSISTANT} button.copy-message")
    assert page.evaluate("navigator.clipboard.readText()").startswith("Code:")
