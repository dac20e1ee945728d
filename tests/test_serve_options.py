"""`llama serve`'s option groups (llamacli/options/serve_options.py and the groups it gathers):
the configs they become, their checks, and the parameter names the router forwards by."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main

import llamacli.commands.serve  # noqa: F401  (registers `serve`)
from llamacli.cli import app
from llamacli.core.runtime.engine_config import EngineConfig
from llamacli.core.sampling import SamplingParams
from llamacli.http.config import ServerConfig
from llamacli.options import speculative
from llamacli.options.groups import Opt, in_order
from llamacli.options.listen import parse_size
from llamacli.options.router_args import MODEL_PARAMS, ROUTER_PARAMS
from llamacli.options.serve_options import HELP_ORDER, OPTIONS, build, engine_config, listen_config, server_config

NO_SPEC = speculative.build({o.field: o.default for o in speculative.OPTIONS})


def _opts(**given: Any) -> Any:
    values = {o.field: o.default for o in OPTIONS}
    assert set(given) <= set(values)
    return build({**values, **given})


def test_defaults_are_the_servers_defaults() -> None:
    sp = SamplingParams()
    opts = _opts()
    assert server_config(opts, sp, NO_SPEC) == ServerConfig(sampling=sp)
    assert engine_config(opts, 8192, NO_SPEC) == EngineConfig(n_ctx=8192, n_parallel=4, n_batch=512, kv_unified=True)
    listen = listen_config(opts)
    assert (listen.host, listen.port, listen.timeout, listen.ssl_key_file) == ("127.0.0.1", 8080, 3600, None)


def test_values_become_config_fields(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("# ours\nk2\n\nk3\n")
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}")
    opts = _opts(alias="a, b", api_key=["k1"], api_key_file=str(keys), max_body_size="512K", rerank=True, tools="all",
                 parallel=2, ctx_size=1024, n_predict=7, reasoning="off", chat_template_file=str(template),
                 lora=["x.gguf"], lora_init_without_apply=True)
    cfg = server_config(opts, SamplingParams(), NO_SPEC)
    assert cfg.aliases == ["a", "b"] and cfg.api_keys == ["k1", "k2", "k3"] and cfg.max_body_size == 512 * 1024
    assert (cfg.embeddings, cfg.pooling) == (True, "rank")  # --rerank, as llama-server
    assert cfg.cors_origins == "localhost" and opts.tools.names[0] == "read_file"  # --tools narrows the CORS default
    assert cfg.n_predict == 7 and cfg.chat_template_kwargs == {"enable_thinking": False}
    eng = engine_config(opts, 8192, NO_SPEC)
    assert (eng.n_ctx, eng.n_parallel, eng.kv_unified) == (1024, 2, False)
    assert opts.load.chat_template == "{{ messages }}" and opts.load.loras == [("x.gguf", 0.0)]
    assert server_config(_opts(tools="all", cors_origins="*"), SamplingParams(), NO_SPEC).cors_origins == "*"


def test_tool_options_narrow_cors_and_agent_means_all(tmp_path: Path) -> None:
    """Built-in tools, MCP servers or --agent each make localhost the CORS default; --agent
    turns the CORS proxy on; --tools names are checked and --tools-runtime is refused."""
    from llamacli.core.errors import InvalidRequest

    mcp = '{"mcpServers": {"s": {"command": "x"}}}'
    for given in ({"tools": "read_file"}, {"mcp_servers_json": mcp}, {"agent": True}):
        opts = _opts(**given)
        assert opts.tools_on and server_config(opts, SamplingParams(), NO_SPEC).cors_origins == "localhost", given
    agent = _opts(agent=True)
    assert agent.endpoints.ui_mcp_proxy and server_config(agent, SamplingParams(), NO_SPEC).ui_mcp_proxy
    assert _opts(tools="get_info,read_file").tools.names == ["read_file", "get_info"]  # llama-server's order
    assert [c.name for c in _opts(mcp_servers_json=mcp).tools.mcp] == ["s"]
    with pytest.raises(InvalidRequest, match='unknown tool "cat". available tools: read_file'):
        _opts(tools="read_file,cat")
    for spec, msg in [("docker:alpine", "running tools in a new docker container is not supported"),
                      ("podman-container:abc", "running tools in an existing podman container is not supported"),
                      ("ssh:user@host", "running tools in a remote host over SSH is not supported"),
                      ("docker:", "docker:<image> requires an image name"),
                      ("docker-container:-rm", "invalid container id: -rm"),
                      ("ssh:-oProxyCommand=x", "invalid ssh target"),
                      ("lxc:x", "unknown --tools-runtime option: lxc:x")]:
        with pytest.raises(InvalidRequest, match=__import__("re").escape(msg)):
            _opts(tools="all", tools_runtime=spec)


@pytest.mark.parametrize("given, message", [
    ({"log_format": "xml"}, "--log-format"),
    ({"ssl_key_file": "k.pem"}, "--ssl-key-file and --ssl-cert-file"),
    ({"pooling": "max"}, "--pooling"),
    ({"reasoning": "maybe"}, "--reasoning must be"),
    ({"reasoning_format": "x"}, "--reasoning-format"),
    ({"chat_template_kwargs": "[1]"}, "--chat-template-kwargs"),
    ({"max_body_size": "0"}, "--max-body-size must be positive"),
])
def test_bad_values_are_refused(given: dict[str, Any], message: str) -> None:
    with pytest.raises(typer.BadParameter, match=message):
        _opts(**given)


def test_an_empty_api_key_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "keys").write_text("# none\n")
    with pytest.raises(typer.BadParameter, match="no keys in the file"):
        _opts(api_key_file=str(tmp_path / "keys"))


def test_sizes() -> None:
    assert [parse_size(t, "-x") for t in ("4096", "512K", "10M", "1g", "2MB", "1.5K")] == [4096, 512 << 10, 10 << 20, 1 << 30,
                                                                                            2 << 20, 1536]
    with pytest.raises(typer.BadParameter, match="a size such as"):
        parse_size("lots", "-x")


def test_the_router_finds_the_options_by_their_plain_names() -> None:
    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    names = {p.name for p in serve.params}
    assert set(HELP_ORDER) <= names and ROUTER_PARAMS <= names and MODEL_PARAMS <= names


def test_in_order_names_each_option_once() -> None:
    a, b = [Opt("a", int, 0, ("-a",), "A.")], [Opt("b", int, 0, ("-b",), "B.")]
    assert [o.field for o in in_order(("b", "a"), a, b)] == ["b", "a"]
    for order in (("a",), ("a", "b", "c"), ("a", "b", "b")):
        with pytest.raises(ValueError):
            in_order(order, a, b)
