"""The tool-call loop in the web page, in headless Chromium: the page lists /tools, offers them
to the model, runs its calls through POST /tools (asking first for write tools), sends the
results back and lets the model go on; calls and results are shown folded.

Against the stub server (tests/ui_stub.py) for every path of the loop, and once end to end
against a real `llama serve --tools ...` (slow): a tiny random model, whose first step is forced
with tool_choice (the page's request, rewritten on its way out) since it calls tools only when a
grammar makes it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.http_server import LlamaServer
from tests.tiny_models import write_tiny_model
from tests.ui_stub import ASSISTANT, STUB_TOOLS, Reply, StubServer, send, wait_idle

DECLINED = '{"error":"the user declined to run this tool"}'


@pytest.fixture()
def stub() -> Iterator[StubServer]:
    with StubServer() as s:
        s.tools = STUB_TOOLS
        yield s


def open_page(page: Any, url: str) -> None:
    """The page, once it has read the server's tools."""
    page.goto(url)
    page.wait_for_selector("#open-tools:not([hidden])")


def call(name: str, args: dict[str, Any]) -> dict[str, str]:
    return {"name": name, "arguments": json.dumps(args)}


def test_a_call_runs_and_the_model_goes_on(page: Any, stub: StubServer) -> None:
    stub.tool_results["read_file"] = {"plain_text_response": 'alpha\n<img src=x onerror="window.__pwned=1">\n'}
    stub.replies.extend([Reply(["Let me look."], tool_calls=[call("read_file", {"path": "notes.txt"})]),
                         Reply(["The file says alpha."])])
    open_page(page, stub.url)
    send(page, "What is in notes.txt?")
    page.wait_for_selector(f"{ASSISTANT} >> nth=1 >> .content:has-text('The file says alpha.')")
    wait_idle(page)
    # the tools went with the request; the read-only call ran without a question
    first, second = stub.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["read_file", "write_file", "exec_shell_command"]
    assert stub.tool_calls == [{"tool": "read_file", "params": {"path": "notes.txt"}}]
    assert not page.is_visible("#tool-confirm")
    # ... and its result went back, paired with the call
    assert second["messages"] == [
        {"role": "user", "content": "What is in notes.txt?"},
        {"role": "assistant", "content": "Let me look.",
         "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": 'alpha\n<img src=x onerror="window.__pwned=1">\n'},
    ]
    # shown folded, as reasoning is; the result is text, never HTML
    box = f"{ASSISTANT} >> nth=0 >> details.tool-call"
    assert page.inner_text(f"{box} summary") == "Tool call: read_file"
    assert page.get_attribute(box, "open") is None and not page.is_visible(f"{box} .tool-result")
    page.click(f"{box} summary")
    assert page.text_content(f"{box} .tool-result") == 'alpha\n<img src=x onerror="window.__pwned=1">\n'
    assert page.query_selector(f"{box} img") is None and page.evaluate("window.__pwned") is None
    # the answer that goes on reads as the same turn (no second name line)
    assert page.get_attribute(f"{ASSISTANT} >> nth=1", "class") == "msg assistant continuation"
    # kept with the conversation: after a reload, the next turn sends the whole exchange again
    page.reload()
    page.wait_for_selector(f"{ASSISTANT} >> nth=1 >> .content:has-text('alpha')")
    stub.replies.append(Reply(["ok"]))
    send(page, "thanks")
    page.wait_for_selector(f"{ASSISTANT} >> nth=2 >> .content:has-text('ok')")
    assert [m["role"] for m in stub.requests[-1]["messages"]] == ["user", "assistant", "tool", "assistant", "user"]
    assert page.errors.errors == []


def test_write_tools_ask_first(page: Any, stub: StubServer) -> None:
    write = call("write_file", {"path": "out.txt", "content": "hi"})
    for _ in range(4):
        stub.replies.extend([Reply([], tool_calls=[write]), Reply(["done"])])
    open_page(page, stub.url)
    # 1: denied; the model is told so, the tool never runs
    send(page, "write it")
    page.wait_for_selector("#tool-confirm[open]")
    assert page.inner_text("#confirm-name") == "write_file"
    assert json.loads(page.inner_text("#confirm-args")) == {"path": "out.txt", "content": "hi"}
    assert page.inner_text(f"{ASSISTANT} details.tool-call summary") == "Tool call: write_file · waiting for your answer…"
    page.click("#confirm-deny")
    wait_idle(page)
    assert stub.tool_calls == []
    assert stub.requests[-1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_0", "content": DECLINED}
    assert page.inner_text(f"{ASSISTANT} >> nth=0 >> details.tool-call summary") == "Tool call: write_file · declined"
    # 2: run once; 3: "always allow"; 4: runs without a question
    send(page, "again")
    page.click("#confirm-run")
    wait_idle(page)
    assert len(stub.tool_calls) == 1
    send(page, "and again")
    page.click("#confirm-always")
    wait_idle(page)
    send(page, "once more")
    wait_idle(page)
    assert len(stub.tool_calls) == 3 and stub.tool_calls[-1]["tool"] == "write_file"
    assert json.loads(page.evaluate("localStorage.getItem('llamacli.settings.v1')"))["tools_allowed"] == ["write_file"]
    # the Tools dialog shows it, and takes it back
    page.click("#open-tools")
    allow = "#tool-list li[data-tool=write_file] .tool-allow input"
    assert page.is_checked(allow) and not page.query_selector("#tool-list li[data-tool=read_file] .tool-allow")
    page.uncheck(allow)
    page.click("#close-tools")
    stub.replies.extend([Reply([], tool_calls=[write]), Reply(["done"])])
    send(page, "last time")
    page.wait_for_selector("#tool-confirm[open]")
    page.keyboard.press("Escape")  # the same as Deny
    wait_idle(page)
    assert len(stub.tool_calls) == 3 and stub.requests[-1]["messages"][-1]["content"] == DECLINED


def test_tools_switched_off_are_not_offered(page: Any, stub: StubServer) -> None:
    open_page(page, stub.url)
    page.click("#open-tools")
    assert page.locator("#tool-list li").count() == 3
    page.uncheck("#tool-list li[data-tool=exec_shell_command] .tool-enabled")
    page.click("#close-tools")
    page.reload()
    page.wait_for_selector("#open-tools:not([hidden])")
    stub.replies.append(Reply(["hi"]))
    send(page, "hello")
    wait_idle(page)
    assert [t["function"]["name"] for t in stub.requests[-1]["tools"]] == ["read_file", "write_file"]


def test_streamed_output_and_stop(page: Any, stub: StubServer) -> None:
    stub.tool_results["exec_shell_command"] = [f"line {i}\n" for i in range(100)]  # 0.05 s apart
    stub.replies.extend([Reply([], tool_calls=[call("exec_shell_command", {"command": "seq 100"}),
                                               call("read_file", {"path": "a"})])])
    open_page(page, stub.url)
    send(page, "count")
    page.click("#confirm-run")
    box = f"{ASSISTANT} details.tool-call >> nth=0"
    page.click(f"{box} >> summary")
    page.wait_for_selector(f"{box} >> .tool-result:has-text('line 3')")  # the output, as it comes
    assert page.inner_text(f"{box} >> summary") == "Tool call: exec_shell_command · running…"
    assert stub.tool_calls == [{"tool": "exec_shell_command", "params": {"command": "seq 100"}, "stream": True}]
    page.click("#stop")
    wait_idle(page)
    # the stopped call and the one that never ran both say so; the model is not asked again
    assert page.inner_text(f"{box} >> summary") == "Tool call: exec_shell_command · stopped"
    assert page.inner_text(f"{ASSISTANT} details.tool-call >> nth=1 >> summary") == "Tool call: read_file · stopped"
    assert len(stub.requests) == 1 and len(stub.tool_calls) == 1
    stub.replies.append(Reply(["fine"]))
    send(page, "never mind")
    wait_idle(page)
    msgs = stub.requests[-1]["messages"]
    assert [m["content"] for m in msgs if m["role"] == "tool"] == ['{"error":"stopped by the user"}'] * 2


def test_bad_arguments_and_the_turn_limit(page: Any, stub: StubServer) -> None:
    """Arguments that are not JSON, and a tool that was not offered, go back as errors without a
    call; after N rounds of calls (Tools: "rounds before asking") the page asks whether the
    model may go on."""
    asked: list[str] = []
    page.on("dialog", lambda d: asked.append(d.message))  # accepted by the fixture
    stub.replies.extend([Reply([], tool_calls=[{"name": "write_file", "arguments": "{not json"}, call("rm_rf", {"path": "/"})]),
                         Reply([], tool_calls=[call("read_file", {"path": "b"})]), Reply(["three"])])
    open_page(page, stub.url)
    page.click("#open-tools")
    page.fill("#set-agent_max_turns", "2")
    page.click("#close-tools")
    send(page, "go")
    page.wait_for_selector(f"{ASSISTANT} >> nth=2 >> .content:has-text('three')")
    wait_idle(page)
    tool_msgs = [m for m in stub.requests[1]["messages"] if m["role"] == "tool"]
    assert json.loads(tool_msgs[0]["content"])["error"].startswith("the arguments are not a JSON object")
    assert json.loads(tool_msgs[1]["content"]) == {"error": 'unknown tool "rm_rf"'}
    assert not page.is_visible("#tool-confirm")  # a write tool with bad arguments is not even asked about
    assert stub.tool_calls == [{"tool": "read_file", "params": {"path": "b"}}]
    assert asked == ["The model called tools 2 times in a row. Let it go on?"]


# ---- end to end: a real `llama serve --tools ...` -------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LlamaServer, Path]]:
    work = tmp_path_factory.mktemp("ui-tools")
    write_tiny_model("qwen2", "Q8_0", work / "tiny.gguf")
    # three tools: their definitions are most of the prompt (about 1,900 of the tiny vocabulary's tokens)
    with LlamaServer("-m", str(work / "tiny.gguf"), "-c", "8192", "-np", "1", "--no-warmup", "--chat-template", "chatml",
                     "--tools", "get_info,write_file,read_file", "--temp", "0", cwd=work) as s:
        yield s, work


@pytest.mark.slow
def test_the_loop_against_llama_serve(page: Any, served: tuple[LlamaServer, Path]) -> None:
    srv, work = served
    forced = iter(["get_info", "write_file"])
    requests: list[dict[str, Any]] = []

    def force_first_step(route: Any, request: Any) -> None:
        """A user turn's first request names a tool in tool_choice (the model is random), and
        bounds write_file's arguments (a short .txt name, a short text) so that the call ends
        within max_tokens."""
        body = request.post_data_json
        if body["messages"][-1]["role"] == "user":
            name = next(forced)
            body["tool_choice"] = {"type": "function", "function": {"name": name}}
            for t in body["tools"]:
                if t["function"]["name"] == name == "write_file":
                    t["function"]["parameters"] = {"type": "object", "required": ["path", "content"], "properties": {
                        "path": {"type": "string", "pattern": "^[a-z]{1,8}\\.txt$"}, "content": {"type": "string", "maxLength": 12}}}
        requests.append(body)
        route.continue_(post_data=json.dumps(body))

    page.route("**/v1/chat/completions", force_first_step)
    open_page(page, srv.url)
    page.click("#open-settings")
    page.fill("#set-max_tokens", "200")  # a forced write_file call takes about 100 tokens
    page.click("#close-settings")
    # get_info reads only: it runs at once, and its result is in the prompt of the next step
    send(page, "Where are you?")
    wait_idle(page, 120_000)
    assert [t["function"]["name"] for t in requests[0]["tools"]] == ["read_file", "write_file", "get_info"]
    tool_msg = requests[1]["messages"][-1]
    assert tool_msg["role"] == "tool" and json.loads(tool_msg["content"])["cwd"] == str(work.resolve())
    assert requests[1]["messages"][-2]["tool_calls"][0]["function"]["name"] == "get_info"
    assert "llama serve: tool get_info({}) -> ok" in srv.log()
    # write_file asks first; once run, the file is there and the server's answer is what the model reads
    send(page, "Write a file.")
    page.wait_for_selector("#tool-confirm[open]", timeout=120_000)
    assert page.inner_text("#confirm-name") == "write_file"
    args = json.loads(page.inner_text("#confirm-args"))
    with page.expect_response("**/tools") as resp:
        page.click("#confirm-run")
    answer = resp.value.json()
    wait_idle(page, 120_000)
    assert (work / args["path"]).read_text() == args["content"] and answer["path"] == args["path"]
    content = [r for r in requests if r["messages"][-1]["role"] == "tool"][1]["messages"][-1]["content"]
    assert json.loads(content) == answer
    page.click(f"{ASSISTANT} >> nth=2 >> details.tool-call summary")
    assert json.loads(page.text_content(f"{ASSISTANT} >> nth=2 >> .tool-result")) == answer
    assert page.errors.errors == []
