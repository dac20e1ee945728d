"""`llama chat --tools`: the tool loop (llamacli/chat/agent.py) on the real engine.

The tiny test model is random: it calls tools only when the call grammar makes it, so a turn's
first step is forced with tool_choice naming the tool (get_info takes no arguments, so its call
is fully determined); the loop then runs it, puts the result in the conversation, and the model's
next step reads it (its prompt holds the result). Confirmations, refusals, bad calls and Ctrl-C
are driven through `Agent.execute` with the calls the parser produces (`ToolCall`). The demo
model (slow) writes a file through a forced write_file call, confirmed."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamacli.chat.agent import DECLINED, Agent, Stop
from llamacli.chat.launch import start_session
from llamacli.chat.render import PlainView
from llamacli.chat.repl import ChatLoop
from llamacli.chat.session import ChatSession
from llamacli.chat.settings import ChatSettings
from llamacli.core.runtime.engine import Engine
from llamacli.core.sampling import SamplingParams
from llamacli.core.text.tool_calls import ToolCall
from llamacli.core.tools import ToolBox
from llamacli.loading import open_model

from tests.http_server import ROOT
from tests.tiny_models import write_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model("qwen2", "Q8_0", tmp_path_factory.mktemp("agent") / "tiny.gguf")


@pytest.fixture
def chat(tiny: Path) -> Iterator[tuple[Engine, ChatSession]]:
    rt = open_model(str(tiny), chat_template="chatml")
    engine, session = start_session(rt, ChatSettings(SamplingParams(temperature=0.0), n_predict=100), n_ctx=8192)
    yield engine, session
    engine.stop()


def test_a_forced_call_runs_and_its_result_goes_back(chat: tuple[Engine, ChatSession], tmp_path: Path) -> None:
    _, ses = chat
    box = ToolBox.build(["get_info", "write_file"], tmp_path)
    out = io.StringIO()
    asked: list[str] = []
    loop = ChatLoop(ses, lambda: "", PlainView(out), agent=Agent(box, choice="get_info", max_steps=3),
                    ask=lambda q: asked.append(q) or "n")
    loop.handle("Which system is this?")
    msgs = ses.conversation.messages
    assert [m["role"] for m in msgs[:3]] == ["user", "assistant", "tool"]
    (call,) = msgs[1]["tool_calls"]
    assert call["function"]["name"] == "get_info" and json.loads(call["function"]["arguments"]) == {}
    result = json.loads(msgs[2]["content"])
    assert msgs[2]["tool_call_id"] == call["id"] and result["cwd"] == str(tmp_path.resolve()) and result["os"]
    # the model went on: the step after the call was prompted with the call's result
    last = loop.last_reply
    assert last is not None and last.final is not None and not last.tool_calls or len(msgs) > 3
    prompt = ses.tokenizer.detokenize(last.final.prompt_tokens)  # type: ignore[union-attr]
    assert str(tmp_path.resolve()) in prompt and "tool_response" in prompt
    shown = out.getvalue()
    assert "[▸ get_info" in shown and "[↳ ok · 1 line (/tools show to unfold)]" in shown
    assert asked == []  # get_info reads only: nothing to confirm
    # the conversation with its tool turns renders again (the prompt cache of the next turn)
    assert "tool_call" in ses.render()


def _call(name: str, args: dict[str, object], cid: str = "call_1") -> ToolCall:
    return ToolCall(cid, name, json.dumps(args))


def test_write_tools_ask_first(tmp_path: Path) -> None:
    box = ToolBox.build(["write_file", "read_file"], tmp_path)
    agent = Agent(box)
    view = PlainView(io.StringIO())
    answers = iter(["n", "y", "a"])
    asked: list[str] = []

    def ask(q: str) -> str:
        asked.append(q)
        return next(answers)

    write = _call("write_file", {"path": "x.txt", "content": "hi"})
    assert agent.execute(write, view, ask) == json.dumps({"error": DECLINED})
    assert not (tmp_path / "x.txt").exists()
    assert asked[0] == 'run write_file {"path": "x.txt", "content": "hi"}? [y]es, [n]o, [a]lways for write_file: '
    assert json.loads(agent.execute(write, view, ask))["result"] == "file written successfully"
    assert (tmp_path / "x.txt").read_text() == "hi"
    agent.execute(write, view, ask)  # "always"
    agent.execute(write, view, ask)  # not asked again
    assert len(asked) == 3
    assert agent.execute(_call("read_file", {"path": "x.txt"}), view, ask) == "hi\n"  # plain text, no question
    assert len(asked) == 3
    agent.always.clear()
    with pytest.raises(Stop):
        agent.execute(write, view, lambda q: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert Agent(box, confirm=False).execute(_call("write_file", {"path": "y.txt", "content": ""}), view, ask)
    assert (tmp_path / "y.txt").exists() and len(asked) == 3  # --no-confirm-tools


def test_a_pipe_cannot_confirm(tmp_path: Path) -> None:
    """Piped input: a write tool is declined (with a note on stderr) unless --no-confirm-tools."""
    from rich.console import Console

    from llamacli.chat.pipes import _ToolLines

    err = io.StringIO()
    lines = _ToolLines(lambda _t: None, Console(file=err, no_color=True, width=200))
    agent = Agent(ToolBox.build(["write_file"], tmp_path))
    result = agent.execute(_call("write_file", {"path": "x.txt", "content": "hi"}), lines, lines.ask)
    assert result == json.dumps({"error": DECLINED}) and not (tmp_path / "x.txt").exists()
    assert 'run write_file {"path": "x.txt", "content": "hi"}: declined (input is a pipe; --no-confirm-tools' in err.getvalue()


def test_bad_calls_become_error_results(tmp_path: Path) -> None:
    agent = Agent(ToolBox.build(["read_file"], tmp_path))
    view = PlainView(io.StringIO())
    cases = [
        (ToolCall("1", "rm_rf", "{}"), 'unknown tool \\"rm_rf\\"'),
        (ToolCall("1", "read_file", "{not json"), "the arguments are not JSON"),
        (ToolCall("1", "read_file", '{"path": 7}'), "read_file: params.path must be a string"),
        (ToolCall("1", "read_file", '{"path": "/etc/passwd"}'), "absolute paths are refused"),
    ]
    for call, msg in cases:
        assert msg in agent.execute(call, view, lambda q: "y")
    assert view.out.getvalue().count("↳ error:") == 4  # type: ignore[attr-defined]


def test_ctrl_c_during_a_command_kills_it_and_stops_the_turn(tmp_path: Path) -> None:
    agent = Agent(ToolBox.build(["exec_shell_command"], tmp_path), confirm=False)
    marker = tmp_path / "late"
    main = threading.main_thread().ident
    assert main == threading.get_ident()
    timer = threading.Timer(0.5, lambda: signal.pthread_kill(main, signal.SIGINT))  # type: ignore[arg-type]
    timer.start()
    with pytest.raises(Stop):
        agent.execute(_call("exec_shell_command", {"command": f"sleep 3; touch {marker}", "timeout": 30}),
                      PlainView(io.StringIO()), input)
    time.sleep(3.5)
    assert not marker.exists()  # killed before it got there


def test_tools_command(chat: tuple[Engine, ChatSession], tmp_path: Path) -> None:
    _, ses = chat
    out = io.StringIO()
    view = PlainView(out)
    loop = ChatLoop(ses, lambda: "", view, agent=Agent(ToolBox.build(["read_file", "write_file"], tmp_path)))
    for line in ("/tools", "/tools off", "/tools confirm off", "/tools choice read_file", "/tools choice nope",
                 "/tools show", "/tools sideways"):
        loop.handle(line)
    text = out.getvalue()
    assert "read_file                Read file" in text and "write_file               Write file · asks first" in text
    assert "tools off" in text and "write tools run without asking" in text
    assert "the first step of each turn uses tool_choice read_file" in text and 'error: unknown tool "nope"' in text
    assert view.show_tools and "usage: /tools" in text
    assert loop.agent is not None and not loop.agent.enabled and loop.agent.choice == "read_file"
    plain = ChatLoop(ses, lambda: "", PlainView(io.StringIO()))
    plain.handle("/tools")
    assert "no tools: start llama chat with --tools" in plain.view.out.getvalue()  # type: ignore[attr-defined]


def _llama_chat(tiny: Path, cwd: Path, *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "llamacli", "chat", "-m", str(tiny), "--chat-template", "chatml",
                           "-c", "8192", "--temp", "0", "-n", "100", *args], input=stdin, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_cli_repl_and_pipe(tiny: Path, tmp_path: Path) -> None:
    """The REPL reads /tools commands and messages from a pipe (--simple-io); piped input runs
    the loop too, declining write tools it cannot ask about."""
    r = _llama_chat(tiny, tmp_path, "--simple-io", "--tools", "get_info,write_file",
                    stdin="/tools choice get_info\nWhich system?\n/tools\n")
    assert r.returncode == 0, r.stderr
    assert "tools: write_file, get_info (working directory" in r.stdout
    assert "[▸ get_info" in r.stdout and "[↳ ok · 1 line" in r.stdout
    assert "write_file               Write file · asks first" in r.stdout
    r = _llama_chat(tiny, tmp_path, "--tools", "get_info", "--tool-choice", "get_info", stdin="Which system?")
    assert r.returncode == 0, r.stderr
    assert "▸ get_info" in r.stderr and "↳ ok · 1 line" in r.stderr and "▸" not in r.stdout  # calls on stderr
    r = _llama_chat(tiny, tmp_path, "--tool-choice", "get_info", stdin="x")
    assert r.returncode == 1 and "error: --tool-choice needs --tools" in r.stderr
    r = _llama_chat(tiny, tmp_path, "--tools", "get_info", "--tool-choice", "cat", stdin="x")
    assert r.returncode == 1 and "error: --tool-choice cat: not auto, required, none or one of the tools (get_info)" in r.stderr


@pytest.mark.slow
def test_demo_model_writes_a_file_when_confirmed(demo_model: str, tmp_path: Path) -> None:
    rt = open_model(demo_model)
    engine, ses = start_session(rt, ChatSettings(SamplingParams(temperature=0.0), n_predict=80), n_ctx=4096)
    try:
        asked: list[str] = []
        agent = Agent(ToolBox.build(["read_file", "write_file"], tmp_path), choice="write_file", max_steps=1)
        loop = ChatLoop(ses, lambda: "", PlainView(io.StringIO()), agent=agent, ask=lambda q: asked.append(q) or "y")
        loop.handle("Save the word hello in the file hello.txt")
    finally:
        engine.stop()
    msgs = ses.conversation.messages
    call = msgs[1]["tool_calls"][0]["function"]
    args = json.loads(call["arguments"])
    assert call["name"] == "write_file" and asked and asked[0].startswith("run write_file ")
    assert json.loads(msgs[2]["content"])["result"] == "file written successfully"
    assert (tmp_path / args["path"]).read_text() == args["content"]
