"""llama.cpp's options on every model command (llamacli/options/llama_flags.py), the shared sampling
options (llamacli/options/sampling.py) and the small CLI behaviours of issue 13 section 2."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from llamacli.core.sampling import DEFAULT_SEED
from llamacli.options.llama_flags import LLAMA_CPP_SHORTS
from llamacli.options.sampling import OPTIONS, build
from tests.test_cli import ROOT, llama

COMMANDS = ("chat", "complete", "serve")


def _command(name: str) -> Any:
    from llamacli.cli import app, register_all

    register_all()
    group = typer.main.get_command(app)
    return group.commands[name]  # type: ignore[attr-defined]


def _names(cmd: Any) -> set[str]:
    return {n for p in cmd.params for n in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("name", COMMANDS)
def test_every_llama_cpp_short_option_parses_as_itself(name: str) -> None:
    names = _names(_command(name))
    assert [s for s in LLAMA_CPP_SHORTS if s not in names] == []
    for s in ("-ngl", "-fa", "-hf", "-hff", "-hft", "-sys", "-np", "-cb", "-ctk", "-ctv", "-fit"):
        assert s in names


def test_sampling_options_are_the_same_everywhere() -> None:
    want = {n for o in OPTIONS for n in o.names}
    for name in COMMANDS:
        cmd = _command(name)
        opts = {n: p for p in cmd.params for n in p.opts}
        assert want <= set(opts), name
        assert opts["--temp"].default == 0.8 and opts["-s"].default == -1


def test_build_sampling() -> None:
    base = {o.field: o.default for o in OPTIONS}
    assert build(base).seed == DEFAULT_SEED  # -1: random
    sp = build({**base, "seed": 7, "samplers": "top_k;;temperature;", "logit_bias": ["15+1.5"], "dry_sequence_breakers": ["none"]})
    assert sp.seed == 7 and tuple(sp.samplers) == ("top_k", "temperature") and sp.dry_sequence_breakers == ()
    assert list(sp.logit_bias) == [(15, 1.5)]
    assert build({**base, "sampling_seq": "kt"}).samplers == "kt"
    with pytest.raises(typer.BadParameter):
        build({**base, "seed": -2})


@pytest.mark.parametrize("name", ("chat", "complete"))
def test_ignored_flags_note_once_on_chat_and_complete(name: str, tmp_path: Path) -> None:
    r = llama(name, "-m", str(tmp_path / "nope.gguf"), "-ngl", "99", "-fa", "on", "-ctk", "q8_0", "-cb", "-fit", "off",
              "-p", "hi", stdin="")
    assert r.returncode == 2, r.stderr  # parsed fine; the model is missing
    for long in ("--n-gpu-layers", "--flash-attn", "--cache-type-k", "--cont-batching", "--fit"):
        assert r.stderr.count(f"note: {long} has no effect here") == 1, long
    assert "unexpected" not in r.stderr.lower() and "Traceback" not in r.stderr


def test_hf_parses_as_itself_not_as_help(tmp_path: Path) -> None:
    # -hf is implemented (tests/test_hf.py); here only that it parses: with -m too it is a model error
    r = llama("complete", "-hf", "user/repo:Q4_K_M", "-m", str(tmp_path / "x.gguf"), "-p", "hi")
    assert r.returncode == 2 and "-hf" in r.stderr and "Usage" not in r.stdout


def test_other_hubs_are_refused_clearly(tmp_path: Path) -> None:
    r = llama("complete", "-dr", "gemma3", "-p", "hi")
    assert r.returncode == 1 and "--docker-repo" in r.stderr and "Usage" not in r.stdout


def _parse(name: str, *args: str) -> Any:
    """Parse `llama NAME ARGS` as the command line would be (the body does not run)."""
    cmd = _command(name)
    return cmd.make_context(name, list(args))


# (args, the commands that take the option, what the error says): one declaration each
# (llamacli/options/common.py, ...), so the same check on every command
BAD_VALUES = [
    (("-c", "-5"), COMMANDS, "'-c' / '--ctx-size': must be at least 0, got -5"),
    (("-n", "-2"), COMMANDS, "'-n' / '--predict' / '--n-predict': must be at least -1, got -2"),
    (("-b", "0"), COMMANDS, "'-b' / '--batch-size': must be at least 1, got 0"),
    (("-np", "0"), ("chat", "serve"), "'-np' / '--parallel': must be -1 or at least 1, got 0"),
    (("--numerics", "foo"), (*COMMANDS, "bench"), "'--numerics': must be ggml or f32, got 'foo'"),
    (("--reasoning-budget", "-2"), ("chat", "serve"), "'--reasoning-budget': must be -1 or at least 0, got -2"),
    (("--chat-template", "nosuchtemplate"), ("chat", "serve"), "'--chat-template': unknown chat template 'nosuchtemplate'"),
    (("--port", "99999"), ("serve",), "'--port': must be from 0 to 65535, got 99999"),
    (("--port", "-1"), ("serve",), "'--port': must be from 0 to 65535, got -1"),
    (("-ub", "0"), ("serve",), "'-ub' / '--ubatch-size': must be at least 1, got 0"),
    (("--keep", "-2"), ("serve",), "'--keep': must be at least -1, got -2"),
]


@pytest.mark.parametrize("args, names, message", BAD_VALUES)
def test_option_values_are_checked_alike_while_parsing(args: tuple[str, ...], names: tuple[str, ...], message: str) -> None:
    for name in names:
        with pytest.raises(typer.BadParameter) as e:
            _parse(name, *args)
        assert e.value.format_message().startswith(f"Invalid value for {message}"), (name, e.value.format_message())


def test_good_values_parse() -> None:
    ctx = _parse("serve", "-c", "0", "-n", "-1", "-np", "-1", "--port", "0", "--numerics", "f32", "--chat-template", "chatml")
    assert (ctx.params["port"], ctx.params["numerics"], ctx.params["parallel"]) == (0, "f32", -1)
    ctx = _parse("chat", "-np", "3", "--chat-template", "{{ messages }}", "--reasoning-budget", "0")
    assert (ctx.params["parallel"], ctx.params["chat_template"]) == (3, "{{ messages }}")


@pytest.mark.parametrize("args", [
    ("complete", "-p", "hi", "-n", "2", "--numerics", "foo"),
    ("bench", "--numerics", "foo"),
    ("serve", "--numerics", "foo", "--port", "0"),
    ("serve", "--port", "99999"),
    ("serve", "--port", "-1"),
    ("serve", "-c", "-5", "--port", "0"),
    ("chat", "--chat-template", "nosuchtemplate", "-p", "x"),
    ("serve", "--chat-template", "nosuchtemplate", "--port", "0"),
])
def test_a_bad_value_is_one_line_and_exit_1_before_anything_runs(args: tuple[str, ...], tmp_path: Path) -> None:
    """Was a traceback (--numerics), a port taken modulo 65536, or a server that listened first.
    The model does not exist: a value that got past the parser would end in exit 2."""
    r = llama(*args, "-m", str(tmp_path / "none.gguf"), stdin="")
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("error: Invalid value for ") and r.stderr.count("\n") == 1, r.stderr
    assert "listening" not in r.stderr and "Traceback" not in r.stderr and r.stdout == ""


def test_stray_arguments_are_errors(tmp_path: Path) -> None:
    r = llama("complete", "-m", str(tmp_path / "x.gguf"), "-p", "hi", "banana")
    assert r.returncode == 1 and "banana" in r.stderr


def test_address_in_use_names_the_address() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = llama("serve", "--host", "127.0.0.1", "--port", str(port), "-m", "whatever.gguf")
    assert r.returncode == 1, r.stderr
    assert f"127.0.0.1:{port}" in r.stderr and "in use" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_n_0_display_prompt_and_closed_pipe(demo_model: str) -> None:
    r = llama("complete", "-m", demo_model, "-p", "The sky is", "-n", "0")
    assert r.returncode == 0 and r.stdout == "The sky is\n"
    r = llama("complete", "-m", demo_model, "-p", "The sky is", "-n", "0", "--json")
    assert r.returncode == 0 and '"tokens": []' in r.stdout
    r = llama("complete", "-m", demo_model, "-p", "The sky is", "-n", "2", "--temp", "0", "--no-display-prompt")
    assert r.returncode == 0 and not r.stdout.startswith("The sky is")
    r = llama("complete", "-m", demo_model, "-p", "The sky is", "-n", "2", "--temp", "0")
    assert r.returncode == 0 and r.stdout.startswith("The sky is")
    # a reader that goes away: quiet, status 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "llamacli", "complete", "-m", demo_model, "-p", "Once upon a time", "-n", "64", "--ignore-eos"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(5)
    proc.stdout.close()
    rc = proc.wait(120)
    err = proc.stderr.read().decode()
    assert rc == 0 and "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err
