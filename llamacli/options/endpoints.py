"""`llama serve`'s API switches: the names the model answers to, which endpoints are on
(/metrics, /props, /slots, embeddings, reranking, the web UI) and how /infill and a final
assistant message behave. They become one EndpointOptions."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

import typer

from llamacli.core.model.kernels.pooling import POOLING_TYPES
from llamacli.options.groups import ENDPOINTS, TOOLS, Opt, in_panel

# -ag is shown with the tools it turns on
AGENT = Opt("agent", bool, False, ("-ag/-no-ag", "--agent/--no-agent"),
            "Agent mode: every built-in tool (--tools all) and the /cors-proxy of --ui-mcp-proxy. Do not enable in "
            "untrusted environments; limits --cors-origins to localhost by default.", panel=TOOLS)

OPTIONS: list[Opt] = [*in_panel(ENDPOINTS, [
    Opt("alias", Optional[str], None, ("-a", "--alias"), "Model name(s) for the API, comma-separated (default: the model path)."),
    Opt("tags", Optional[str], None, ("--tags",), "Model tags, comma-separated (informational: listed by /v1/models)."),
    Opt("metrics", bool, False, ("--metrics",), "Enable GET /metrics (Prometheus)."),
    Opt("props", bool, False, ("--props",), "Enable changing default settings via POST /props."),
    Opt("slots", bool, True, ("--slots/--no-slots",), "Expose GET /slots."),
    Opt("slot_save_path", Optional[str], None, ("--slot-save-path",), "Directory for POST /slots/ID?action=save|restore|erase."),
    Opt("media_path", Optional[str], None, ("--media-path",),
        "Directory for local media: file://NAME in image_url/input_audio parts is read under it (default: refused)."),
    Opt("embeddings", bool, False, ("--embedding", "--embeddings"), "Enable the embeddings endpoints."),
    Opt("pooling", Optional[str], None, ("--pooling",),
        "Embedding pooling: none, mean, cls, last, rank (default: the model's, else mean)."),
    Opt("rerank", bool, False, ("--rerank", "--reranking"),
        "Enable the reranking endpoints (/rerank, /v1/rerank): embeddings with rank pooling."),
    Opt("embd_normalize", int, 2, ("--embd-normalize",),
        "Embedding normalization for /embedding (-1 none, 0 max-abs, 1 taxicab, 2 Euclidean, >2 p-norm)."),
    Opt("ui_mcp_proxy", bool, False, ("--ui-mcp-proxy/--no-ui-mcp-proxy", "--webui-mcp-proxy/--no-webui-mcp-proxy"),
        "Enable GET/POST /cors-proxy?url=... for the web UI's MCP client (forwards only x-llama-server-proxy-header-* headers)."),
    Opt("ui", bool, True, ("--ui/--no-ui", "--webui/--no-webui"), "Serve the chat page at /."),
    Opt("spm_infill", bool, False, ("--spm-infill",), "Suffix/prefix/middle order for /infill."),
    Opt("prefill_assistant", bool, True, ("--prefill-assistant/--no-prefill-assistant",), "A final assistant message is continued."),
]), AGENT]


@dataclass(frozen=True)
class EndpointOptions:
    aliases: list[str]
    tags: list[str]
    metrics: bool
    props: bool
    slots: bool
    slot_save_path: str | None
    media_path: str | None  # file:// media under it; None: refused
    embeddings: bool  # on with --rerank too
    pooling: str | None  # None: the model's; rank with --rerank
    embd_normalize: int
    agent: bool  # -ag: every built-in tool and the CORS proxy
    ui_mcp_proxy: bool  # on with --agent too
    ui: bool
    spm_infill: bool
    prefill_assistant: bool


def build(values: dict[str, Any]) -> EndpointOptions:
    """EndpointOptions from the options' values; validated."""
    embeddings, pooling = values["embeddings"], values["pooling"]
    if pooling is not None and pooling not in POOLING_TYPES:
        raise typer.BadParameter("--pooling must be none, mean, cls, last or rank")
    media_path = values["media_path"]
    if media_path is not None and not os.path.isdir(media_path):
        raise typer.BadParameter(f"--media-path: not a directory: {media_path}")
    if values["rerank"]:  # as llama-server: embeddings on, rank pooling
        embeddings, pooling = True, "rank"
    return EndpointOptions(
        aliases=_names(values["alias"]), tags=_names(values["tags"]), metrics=values["metrics"], props=values["props"],
        slots=values["slots"], slot_save_path=values["slot_save_path"], media_path=media_path,
        embeddings=embeddings, pooling=pooling,
        embd_normalize=values["embd_normalize"], agent=values["agent"],
        ui_mcp_proxy=values["ui_mcp_proxy"] or values["agent"], ui=values["ui"],
        spm_infill=values["spm_infill"], prefill_assistant=values["prefill_assistant"],
    )


def _names(text: str | None) -> list[str]:
    """The items of a comma-separated list, stripped, blanks left out."""
    return [t.strip() for t in (text or "").split(",") if t.strip()]
