"""Router mode's model list and child arguments (llamacli/options/router_args.py,
llamacli/router_models.py), without starting anything: the preset INI, the --models-dir
naming, the precedence of the router's command line over the preset."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main

import llamacli.commands.serve  # noqa: F401  (registers `serve`)
from llamacli.cli import app
from llamacli.options.router_args import PresetError, inherited_args, option_table, read_preset
from llamacli.router_models import discover


def _ctx(*argv: str) -> Any:
    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    return serve.make_context("serve", list(argv))


@pytest.fixture(autouse=True)
def _empty_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path_factory.mktemp("cache")))


def _write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_inherited_args_leave_out_what_the_router_keeps() -> None:
    ctx = _ctx("--models-dir", "/m", "--port", "9000", "--api-key", "k", "-c", "512", "--no-jinja", "--temp", "0.5",
               "--metrics", "-ngl", "99")
    args = inherited_args(ctx)  # in the command's order of options
    assert sorted(args) == sorted(["--ctx-size", "512", "--no-jinja", "--temperature", "0.5", "--metrics",
                                   "--n-gpu-layers", "99"])
    for opt, value in (("--ctx-size", "512"), ("--temperature", "0.5"), ("--n-gpu-layers", "99")):
        assert args[args.index(opt) + 1] == value


def test_preset_keys_long_short_env_and_flags(tmp_path: Path) -> None:
    ini = _write(tmp_path / "p.ini", """version = 1
; a comment
[*]
c = 8192
LLAMA_ARG_N_PREDICT = 5
host = 0.0.0.0
port = 1234

[m]
jinja = false
metrics = true
kv-unified = true
alias = one, two
model = /x/m.gguf
load-on-startup = true
stop-timeout = 3
""")
    glob, sections = read_preset(str(ini), option_table(_ctx().command))
    assert glob.args == ["--ctx-size", "8192", "--n-predict", "5"]  # host and port are the router's
    m = sections["m"]
    assert m.args == ["--no-jinja", "--metrics", "--kv-unified"]
    assert m.params == {"alias": "one, two", "model": "/x/m.gguf"}
    assert m.only == {"load-on-startup": "true", "stop-timeout": "3"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[m]\nno-such-option = 1\n", "[m]: unknown option 'no-such-option'"),
        ("[m]\njinja = maybe\n", "jinja is a flag: give true or false"),
        ("[m\nc = 1\n", "--models-preset"),
    ],
)
def test_bad_presets_are_refused_with_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    ini = _write(tmp_path / "p.ini", text)
    with pytest.raises(PresetError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_preset(str(ini), option_table(_ctx().command))


def test_models_dir_names_files_folders_and_split_models(tmp_path: Path) -> None:
    d = tmp_path / "models"
    _write(d / "plain.gguf")
    _write(d / "big-00001-of-00002.gguf")
    _write(d / "big-00002-of-00002.gguf")
    _write(d / "mmproj-F16.gguf")  # a projector, not a model
    _write(d / "notes.txt")
    _write(d / "vision" / "vision-Q8_0.gguf")
    _write(d / "vision" / "mmproj-F16.gguf")
    _write(d / "vision" / "mmproj-Q8_0.gguf")
    _write(d / "shards" / "k-00002-of-00002.gguf")
    _write(d / "shards" / "k-00001-of-00002.gguf")
    specs = {s.name: s for s in discover(_ctx(), str(d), None, []) if s.source == "models_dir"}
    assert set(specs) == {"plain", "big", "vision", "shards"}
    assert specs["big"].args == ["-m", str(d / "big-00001-of-00002.gguf")]
    # the projector beside a model in its folder goes to that child alone (the first by name)
    assert specs["vision"].args == ["-m", str(d / "vision" / "vision-Q8_0.gguf"), "-mm", str(d / "vision" / "mmproj-F16.gguf")]
    assert specs["plain"].args == ["-m", str(d / "plain.gguf")] and specs["big"].args[2:] == []
    assert specs["vision"].path == str(d / "vision" / "vision-Q8_0.gguf")
    assert specs["shards"].args == ["-m", str(d / "shards" / "k-00001-of-00002.gguf")]


def test_child_arguments_in_precedence_order(tmp_path: Path) -> None:
    d = tmp_path / "models"
    _write(d / "a.gguf")
    ini = _write(tmp_path / "p.ini", "[*]\nc = 100\nnp = 3\n[a]\nc = 200\nalias = first\n[extra]\nmodel = /x/e.gguf\n")
    ctx = _ctx("--models-dir", str(d), "--models-preset", str(ini), "-np", "1")
    specs = {s.name: s for s in discover(ctx, str(d), str(ini), inherited_args(ctx))}
    # model, [*], [a], then the router's command line: the last value of an option wins
    assert specs["a"].args == ["-m", str(d / "a.gguf"), "--ctx-size", "100", "--parallel", "3", "--ctx-size", "200",
                               "--parallel", "1"]
    assert specs["a"].aliases == ("first",) and specs["a"].source == "preset"
    assert specs["extra"].args[:2] == ["-m", "/x/e.gguf"] and specs["extra"].path == "/x/e.gguf"


def test_the_list_is_what_the_router_was_given(tmp_path: Path) -> None:
    """Only the folder's and the preset's models (and the cache's): the demo model, installed in
    this environment, is not listed beside them (llama-server's router lists what it was given).
    `[*] load-on-startup = true` marks every model to load when the router starts."""
    d = tmp_path / "models"
    _write(d / "a.gguf")
    _write(d / "b.gguf")
    assert {s.name for s in discover(_ctx(), str(d), None, [])} == {"a", "b"}
    ini = _write(tmp_path / "p.ini", "[*]\nload-on-startup = true\n[b]\nload-on-startup = false\n[c]\nmodel = /x/c.gguf\n")
    specs = {s.name: s for s in discover(_ctx(), str(d), str(ini), [])}
    assert {n: s.load_on_startup for n, s in specs.items()} == {"a": True, "b": False, "c": True}


def test_a_preset_section_that_names_no_model(tmp_path: Path) -> None:
    ini = _write(tmp_path / "p.ini", "[ghost]\nc = 1\n")
    with pytest.raises(PresetError, match="ghost.*model = PATH"):
        discover(_ctx(), None, str(ini), [])


def test_bad_router_starts_exit_with_one_error_line(tmp_path: Path) -> None:
    def serve(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "llamacli", "serve", "--port", "0", *args], capture_output=True,
                              text=True, timeout=60, check=False, env={**os.environ, "LLAMA_CACHE": str(tmp_path)})

    r = serve("--models-dir", str(tmp_path / "missing"))
    assert r.returncode == 1 and "error:" in r.stderr and "missing" in r.stderr and "Traceback" not in r.stderr
    ini = _write(tmp_path / "p.ini", "[m]\nbogus = 1\n")
    r = serve("--models-preset", str(ini))
    assert r.returncode == 1 and "unknown option 'bogus'" in r.stderr and "Traceback" not in r.stderr
    r = serve("--models-dir", str(tmp_path), "-m", "x.gguf")
    assert r.returncode != 0 and "give no -m" in r.stderr and "Traceback" not in r.stderr
