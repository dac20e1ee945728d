"""Router mode's options (`--models-dir`, `--models-preset`, ...: one RouterOptions), and the
command-line arguments of its children, from the router's own command line and from a preset
file (`--models-preset FILE.ini`).

A preset key is an option of `llama serve` without its dashes, long or short (`ctx-size`, `c`),
or llama.cpp's environment variable name for it (`LLAMA_ARG_CTX_SIZE`). A flag takes a boolean
value (`jinja = false` gives `--no-jinja`). Keys that name the model or belong to the router
(host, port, API keys, TLS, the models-* options) are taken out; `model`/`hf-repo`/`alias`/
`tags` describe the model instead, and three keys exist only in presets: `load-on-startup`,
`stop-timeout`, `dedup-cache-models`.
"""

from __future__ import annotations

import configparser
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

from llamacli.core.errors import LlamaError
from llamacli.options.groups import ROUTER, Opt, in_panel

# Typer vendors its own copy of click (typer._click), so options are told apart by duck typing:
# an option is a parameter whose param_type_name is "option" (opts, secondary_opts, is_flag, multiple).
Option = Any

# `llama serve` parameters the router keeps for itself: children never get them
ROUTER_PARAMS = frozenset({
    "host", "port", "api_key", "api_key_file", "ssl_key_file", "ssl_cert_file", "cors_origins", "cors_methods",
    "cors_headers", "ui", "ui_mcp_proxy", "tools", "tools_runtime", "agent", "mcp_servers_config", "mcp_servers_json",
    "models_dir", "models_preset", "models_max",
    "models_autoload",
})
# parameters that say which model a child serves (set per model, never inherited)
MODEL_PARAMS = frozenset({"model", "hf_repo", "hf_file", "hf_token", "offline", "alias", "tags"})
PRESET_ONLY = frozenset({"load-on-startup", "stop-timeout", "dedup-cache-models"})
TRUE = frozenset({"1", "true", "on", "yes", "enabled"})
FALSE = frozenset({"0", "false", "off", "no", "disabled"})


OPTIONS: list[Opt] = in_panel(ROUTER, [
    Opt("models_dir", Optional[str], None, ("--models-dir",),
        "Serve the GGUF models in this folder (one server process per loaded model; see docs/http-api.md)."),
    Opt("models_preset", Optional[str], None, ("--models-preset",),
        "An INI file of models and their settings (llama-server's preset format)."),
    Opt("models_max", int, 4, ("--models-max",),
        "Most models loaded at once; loading another unloads the least recently used (0: no limit)."),
    Opt("models_autoload", bool, True, ("--models-autoload/--no-models-autoload",),
        "Load a model when a request names it (off: 400 until POST /models/load)."),
])


@dataclass(frozen=True)
class RouterOptions:
    models_dir: str | None = None
    models_preset: str | None = None
    models_max: int = 4  # 0: no limit
    models_autoload: bool = True

    @property
    def enabled(self) -> bool:
        """Whether `llama serve` runs as a router over many models."""
        return bool(self.models_dir or self.models_preset)


def build(values: dict[str, Any]) -> RouterOptions:
    return RouterOptions(**values)


class PresetError(LlamaError):
    """The preset file cannot be used (exit 1, like a bad option)."""


@dataclass
class Preset:
    """One section of a preset file: child arguments plus what describes the model."""

    args: list[str] = field(default_factory=list)
    params: dict[str, str] = field(default_factory=dict)  # model, hf_repo, hf_file, alias, tags (raw values)
    only: dict[str, str] = field(default_factory=dict)  # load-on-startup, stop-timeout, dedup-cache-models


def _options(command: Any) -> list[Option]:
    return [p for p in command.params if getattr(p, "param_type_name", "") == "option" and p.name]


def option_table(command: Any) -> dict[str, tuple[Option, bool]]:
    """Every spelling of the command's options without dashes -> (option, is the negative form)."""
    table: dict[str, tuple[Option, bool]] = {}
    for p in _options(command):
        for o in p.opts:
            table[o.lstrip("-")] = (p, False)
        for o in p.secondary_opts:
            table[o.lstrip("-")] = (p, True)
    return table


def inherited_args(ctx: Any) -> list[str]:
    """The router's own options, as given on its command line (or in the environment), to pass
    on to every child; the router's and the model's own options are left out."""
    out: list[str] = []
    for p in _options(ctx.command):
        if p.name in ROUTER_PARAMS | MODEL_PARAMS:
            continue
        source = getattr(ctx.get_parameter_source(p.name), "name", "")
        if source not in ("COMMANDLINE", "ENVIRONMENT"):
            continue
        out += _render(p, ctx.params[p.name])
    return out


def _render(p: Option, value: object) -> list[str]:
    if value is None:
        return []
    if p.is_flag:
        if value:
            return [p.opts[-1]]
        return [p.secondary_opts[-1]] if p.secondary_opts else []
    if p.multiple:
        return [x for v in value for x in (p.opts[-1], str(v))]  # type: ignore[attr-defined]
    return [p.opts[-1], str(value)]


def _key_name(key: str) -> str:
    """LLAMA_ARG_CTX_SIZE -> ctx-size; other keys as written."""
    if key.upper().startswith("LLAMA_ARG_"):
        return key[len("LLAMA_ARG_"):].lower().replace("_", "-")
    return key


def read_preset(path: str, table: dict[str, tuple[Option, bool]]) -> tuple[Preset, dict[str, Preset]]:
    """The `[*]` section and the named sections of a preset file, in file order."""
    parser = configparser.ConfigParser(interpolation=None, strict=False, comment_prefixes=(";", "#"),
                                       inline_comment_prefixes=None, default_section="\x00")
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keep LLAMA_ARG_* as written
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        parser.read_string("[\x01]\n" + text, source=path)  # keys before any section (version = 1)
    except OSError as e:
        raise PresetError(f"--models-preset {path}: {e.strerror or e}") from None
    except configparser.Error as e:
        raise PresetError(f"--models-preset {path}: {e}".replace("\n", " ")) from None
    glob = Preset()
    sections: dict[str, Preset] = {}
    for name in parser.sections():
        if name == "\x01":
            continue
        preset = _section(path, name, parser[name].items(), table)
        if name == "*":
            glob = preset
        else:
            sections[name] = preset
    return glob, sections


def _section(path: str, name: str, items: Iterable[tuple[str, str]], table: dict[str, tuple[Option, bool]]) -> Preset:
    out = Preset()
    for raw_key, value in items:
        key = _key_name(raw_key.strip())
        value = value.strip()
        if key in PRESET_ONLY:
            out.only[key] = value
            continue
        hit = table.get(key)
        if hit is None:
            raise PresetError(f"--models-preset {path} [{name}]: unknown option {raw_key!r}")
        opt, negative = hit
        assert opt.name is not None
        if opt.name in ROUTER_PARAMS:
            continue  # the router's own (host, port, keys, ...): removed, as llama-server does
        if opt.name in MODEL_PARAMS:
            out.params[opt.name] = value
            continue
        out.args += _preset_arg(path, name, raw_key, opt, negative, value)
    return out


def _preset_arg(path: str, section: str, key: str, opt: Option, negative: bool, value: str) -> list[str]:
    if not opt.is_flag:
        return [opt.opts[-1], value]
    v = value.lower()
    if v not in TRUE | FALSE:
        raise PresetError(f"--models-preset {path} [{section}]: {key} is a flag: give true or false, not {value!r}")
    return _render(opt, (v in TRUE) != negative)


def truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in TRUE
