"""Where a command's model comes from: `-m FILE`, or a Hugging Face repository (`-hf`, `-hff`,
`-hft`, `--offline`), declared once for `chat`, `complete`, `serve`, `bench` and `tokenize`.

A command takes `source: ModelSource` and decorates itself with `@model_options`: the
decorator shows these options where that parameter is and builds the value. The command calls
`source.path()` when it is ready to download (after checking its other arguments).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from llamacli.hub import model_path
from llamacli.options.groups import Opt, find, option_group, typer_option


@dataclass(frozen=True)
class ModelSource:
    model: str | None = None  # -m
    hf_repo: str | None = None
    hf_file: str | None = None
    hf_token: str | None = None
    offline: bool = False

    @property
    def given(self) -> bool:
        """Whether -m or -hf names a model (else: the demo model)."""
        return bool(self.model or self.hf_repo)

    def path(self) -> str | None:
        """The file to open: -m, or -hf's file (downloaded now), or None for the demo model."""
        return model_path(self.model, self.hf_repo, self.hf_file, self.hf_token, self.offline)


OPTIONS: list[Opt] = [
    Opt("model", Optional[str], None, ("-m", "--model"), "GGUF model file (default: the demo model, Gemma 3 270M, if installed)."),
    Opt("hf_repo", Optional[str], None, ("-hf", "-hfr", "--hf-repo"),
        "Hugging Face model repository, downloaded into the HF cache (LLAMA_CACHE if set); quant case-insensitive, "
        "default Q4_K_M, else the repo's first .gguf.", metavar="USER/REPO[:QUANT]", envvar="LLAMA_ARG_HF_REPO"),
    Opt("hf_file", Optional[str], None, ("-hff", "--hf-file"), "File of the -hf repository (overrides the quant).",
        metavar="FILE", envvar="LLAMA_ARG_HF_FILE"),
    Opt("hf_token", Optional[str], None, ("-hft", "--hf-token"),
        "Hugging Face access token (default: HF_TOKEN, or the token saved by `hf auth login`).", metavar="TOKEN"),
    Opt("offline", bool, False, ("--offline",), "Use only the local cache, never the network (as HF_HUB_OFFLINE=1)."),
]


def _build(values: dict[str, Any]) -> ModelSource:
    return ModelSource(**values)


# Replace fn's `source` parameter with the OPTIONS, where it stands; call fn with a ModelSource.
# The options keep their plain names (model, hf_repo, ...): the router reads them by name
# (llamacli/options/router_args.py MODEL_PARAMS).
model_options = option_group("source", OPTIONS, _build, in_place=True, prefixed=False)


# Two of the options alone, for a command that takes them without the others (`llama pull`).
HfFileOpt = typer_option(find(OPTIONS, "hf_file"))
HfTokenOpt = typer_option(find(OPTIONS, "hf_token"))
