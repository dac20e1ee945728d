"""The prompt-toolkit input (keys, history file, completion) and the REPL running on it,
driven by prompt-toolkit's pipe input with a dummy output."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.fakes import FakeEngine, fake_session
from prompt_toolkit.application import create_app_session
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from llamacli.chat.prompt import SlashCompleter, default_history_path, make_reader
from llamacli.chat.render import PlainView
from llamacli.chat.repl import EXIT_HINT, ChatLoop

ENTER, ALT_ENTER, CTRL_C, CTRL_D, UP = "\r", "\x1b\r", "\x03", "\x04", "\x1b[A"


@pytest.fixture
def pipe() -> Iterator[object]:
    with create_pipe_input() as inp, create_app_session(input=inp, output=DummyOutput()):
        yield inp


def reader(pipe: object, multiline: bool = False, history: Path | None = None):  # type: ignore[no-untyped-def]
    state = {"ml": multiline}
    return make_reader(lambda: state["ml"], history, color=False, input=pipe, output=DummyOutput())


def test_enter_sends_alt_enter_inserts_newline(pipe) -> None:  # type: ignore[no-untyped-def]
    read = reader(pipe)
    pipe.send_text("first line" + ALT_ENTER + "second line" + ENTER)
    assert read() == "first line\nsecond line"


def test_multiline_mode_swaps_the_keys(pipe) -> None:  # type: ignore[no-untyped-def]
    read = reader(pipe, multiline=True)
    pipe.send_text("a" + ENTER + "b" + ALT_ENTER)
    assert read() == "a\nb"


def test_bracketed_paste_keeps_newlines_without_sending(pipe) -> None:  # type: ignore[no-untyped-def]
    read = reader(pipe)
    pipe.send_text("\x1b[200~def f():\r    return 1\r\x1b[201~" + " # pasted" + ENTER)
    assert read() == "def f():\n    return 1\n # pasted"


def test_ctrl_c_clears_a_line_and_interrupts_at_an_empty_prompt(pipe) -> None:  # type: ignore[no-untyped-def]
    read = reader(pipe)
    pipe.send_text("typo" + CTRL_C + "kept" + ENTER)
    assert read() == "kept"
    pipe.send_text(CTRL_C)
    with pytest.raises(KeyboardInterrupt):
        read()
    pipe.send_text(CTRL_D)
    with pytest.raises(EOFError):
        read()


def test_history_file_persists_between_sessions(tmp_path: Path, pipe) -> None:  # type: ignore[no-untyped-def]
    hist = tmp_path / "state" / "chat_history"
    read = reader(pipe, history=hist)
    pipe.send_text("remember me" + ENTER)
    assert read() == "remember me"
    assert "+remember me" in hist.read_text()
    read2 = reader(pipe, history=hist)  # a new session on the same file
    pipe.send_text(UP + ENTER)
    assert read2() == "remember me"


def test_default_history_path_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_history_path() == tmp_path / "llamacli" / "chat_history"


def completions(text: str) -> list[str]:
    doc = Document(text, len(text))
    return [c.text for c in SlashCompleter().get_completions(doc, CompleteEvent(completion_requested=True))]


def test_completion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert completions("/s") == ["/system", "/set", "/show", "/save"]
    assert completions("/") [:3] == ["/help", "/clear", "/system"]
    assert completions("hello /s") == []
    assert "temperature" in completions("/set te") and "temp" in completions("/set te")
    assert completions("/set top_k ") == []
    (tmp_path / "talk.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert completions("/load ta") == ["lk.json"]
    (tmp_path / "clip.wav").write_bytes(b"")
    assert completions("/audio cl") == ["ip.wav"] and completions("/image cl") == []  # (not an image)


def test_image_and_audio_complete_paths_of_their_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/image PATH completes folders and image files (any case of extension), /audio folders and
    audio files; ~ is the home folder."""
    for name in ("pic.PNG", "pic.txt", "photo.jpeg", "voice.wav", "voice.md"):
        (tmp_path / name).write_text("x")
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "cat.webp").write_text("x")
    monkeypatch.chdir(tmp_path)
    assert sorted(completions("/image pi")) == ["c.PNG", "cs"]
    assert completions("/image pics/") == ["cat.webp"]
    assert completions("/image ph") == ["oto.jpeg"]
    assert completions("/audio vo") == ["ice.wav"]
    assert completions("/audio pic") == ["s"]  # the folder only
    monkeypatch.setenv("HOME", str(tmp_path))
    assert completions("/image ~/pics/c") == ["at.webp"]


def test_repl_through_prompt_toolkit(tmp_path: Path, pipe) -> None:  # type: ignore[no-untyped-def]
    """The whole loop on the real prompt: commands, a multi-line message, Ctrl-C twice."""
    eng = FakeEngine("fine, thanks", words=True)
    ses = fake_session(eng)
    out = io.StringIO()
    loop = ChatLoop(ses, lambda: "", PlainView(out))
    loop.read = make_reader(lambda: loop.multiline, tmp_path / "h", color=False, input=pipe, output=DummyOutput())
    pipe.send_text(
        "/set temp 0" + ENTER
        + "how are" + ALT_ENTER + "you?" + ENTER
        + "/multiline" + ENTER
        + "x" + ENTER + "y" + ALT_ENTER
        + CTRL_C + CTRL_C
    )
    assert loop.run() == 0
    msgs = ses.conversation.messages
    assert msgs[0] == {"role": "user", "content": "how are\nyou?"}
    assert msgs[1] == {"role": "assistant", "content": "fine, thanks"}
    assert msgs[2] == {"role": "user", "content": "x\ny"}
    assert ses.settings.sampling.temperature == 0.0
    text = out.getvalue()
    assert "temperature = 0.0" in text and "multiline input" in text and text.count(EXIT_HINT) == 1
