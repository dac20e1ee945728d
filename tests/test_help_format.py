"""llamacli/help_format.py: how every command's --help reads (the text docs/cli.md holds)."""

from __future__ import annotations

import re

import pytest

from llamacli.help_text import command_help

COMMANDS = ("bench", "chat", "complete", "list", "pull", "quantize", "serve", "tokenize")


def _panels(text: str) -> dict[str, list[str]]:
    """Each panel's title -> its rows, each row's cells and wrapped lines joined by one space."""
    out: dict[str, list[str]] = {}
    for title, body in re.findall(r"╭─ (.+?) ─+╮\n(.*?)╰", text, flags=re.S):
        rows: list[str] = []
        for line in body.splitlines():
            cells = line.strip("│").rstrip()
            if cells.startswith("  ") and rows:  # a wrapped line of the row above
                rows[-1] += " " + cells.strip()
            else:
                rows.append(cells.strip())
        out[title] = [" ".join(r.split()) for r in rows]
    return out


def _row(panel: list[str], names: str) -> str:
    return next(r for r in panel if r.startswith(names + " ") or r == names)


@pytest.mark.parametrize("args", [[], *([c] for c in COMMANDS)], ids=["llama", *COMMANDS])
def test_flags_have_no_type_and_no_name_is_cut_off(args: list[str]) -> None:
    text = command_help(args)
    assert "<bool>" not in text  # was `--version <bool>`, `--help <bool>`, ...
    assert "…" not in text  # an option's name cut to fit (was `--predict,--n-pre…`)
    assert re.search(r"(-h, --help|--help, -h) +Show this message and exit\.", text)


def test_usage_lines_read_like_llama_cpp() -> None:
    assert "Usage: llama quantize [OPTIONS] INPUT [OUTPUT] TYPE [NTHREADS]\n" in command_help(["quantize"])
    assert "Usage: llama pull [OPTIONS] USER/REPO[:QUANT]\n" in command_help(["pull"])
    assert "Usage: llama [OPTIONS] COMMAND [ARGS]...\n" in command_help([])


def test_serve_groups_its_options_as_llama_cpp_does() -> None:
    text = command_help(["serve"])
    panels = _panels(text)
    assert list(panels) == ["Options", "Common", "Sampling", "Speculative decoding", "Chat template and reasoning",
                            "Server", "Slots", "Endpoints", "Tools", "Request limits", "Router mode", "Ray Serve"]
    for title, names in [("Options", "-m, --model"), ("Common", "-c, --ctx-size"), ("Common", "--numerics"),
                         ("Sampling", "--temp, --temperature"), ("Server", "--port"), ("Slots", "-np, --parallel"),
                         ("Slots", "-kvu, --kv-unified, -no-kvu,"), ("Endpoints", "--metrics"),
                         ("Chat template and reasoning", "--chat-template"), ("Router mode", "--models-dir"),
                         ("Tools", "--tools"), ("Tools", "-ag, --agent, -no-ag, --no-agent"),
                         ("Request limits", "--max-n-probs"), ("Ray Serve", "--ray"), ("Ray Serve", "--replicas")]:
        assert _row(panels[title], names), (title, names)
    rows = [r for panel in panels.values() for r in panel]
    assert not [r for r in rows if re.match(r"(-ngl|-fa|--mlock|-ctk)\b", r)]  # llama.cpp's no-op flags stay hidden


def test_a_default_ends_the_help_text() -> None:
    text = command_help(["serve"])
    panels = _panels(text)
    assert _row(panels["Sampling"], "--temp, --temperature") == "--temp, --temperature <float> Temperature; 0 = greedy. Default: 0.8."
    assert _row(panels["Slots"], "--cache-prompt, --no-cache-prompt").endswith("across requests. Default: on.")
    assert _row(panels["Slots"], "--context-shift, --no-context-shift").endswith("Default: off.")
    assert _row(panels["Common"], "--numerics") == "--numerics ggml|f32 ggml: emulate llama.cpp's CPU roundings; f32: plain float32 maths. Default: ggml."
    assert "[default:" not in text


def test_chat_and_complete_share_the_panels() -> None:
    for name in ("chat", "complete"):
        panels = _panels(command_help([name]))
        assert list(panels)[:4] == ["Options", "Common", "Sampling", "Speculative decoding"], name
        assert _row(panels["Common"], "-c, --ctx-size") and _row(panels["Common"], "--numerics")
