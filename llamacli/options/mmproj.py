"""The multimodal projector options of `chat`, `complete` and `serve` (llama-server's names):
`-mm/--mmproj FILE`, `--mmproj-auto/--no-mmproj`, `--mmproj-offload/--no-mmproj-offload` (no GPU
here: accepted, documented, no effect), `--image-min/max-tokens` (dynamic-resolution projectors)
and the media limits. One `MmprojOptions`.

With `-hf USER/REPO`, the repository's mmproj file comes with the model (`fetch_model`, as
llama-server's `-hf`), unless `-mm FILE` names another or `--no-mmproj` wants none.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from llamacli.core.multimodal.image import DEFAULT_MAX_BYTES, DEFAULT_MAX_PIXELS, ImageLimits
from llamacli.hub import model_files
from llamacli.core.multimodal.limits import AUDIO_MAX_SECONDS, MediaLimits
from llamacli.options.groups import Opt, option_group
from llamacli.options.model_source import ModelSource

def no_projector(flag: str) -> str:
    """The usage error for --image / --audio without a projector."""
    return f"{flag} needs a multimodal projector: pass -mm/--mmproj FILE"



def _positive(v: int) -> None:
    if v < 1:
        raise ValueError("must be at least 1")


def _tokens(v: int) -> None:
    if v != -1 and v < 1:
        raise ValueError("must be at least 1 (or -1: the model's)")


def _seconds(v: float) -> None:
    if not 0 < v < float("inf"):  # NaN too
        raise ValueError("must be a positive number of seconds")


OPTIONS: list[Opt] = [
    Opt("path", Optional[str], None, ("-mm", "--mmproj"),
        "Multimodal projector file (mmproj GGUF): images or audio in prompts (docs/multimodal.md).",
        metavar="FILE", envvar="LLAMA_ARG_MMPROJ"),
    Opt("auto", bool, True, ("--mmproj-auto/--no-mmproj", "--no-mmproj-auto"),
        "Use the projector (--no-mmproj: load none, even with -mm).", envvar="LLAMA_ARG_MMPROJ_AUTO"),
    Opt("offload", bool, True, ("--mmproj-offload/--no-mmproj-offload",),
        "Accepted for llama.cpp's command lines: the projector always runs on the CPU here.",
        envvar="LLAMA_ARG_MMPROJ_OFFLOAD"),
    Opt("image_max_pixels", int, DEFAULT_MAX_PIXELS, ("--image-max-pixels",),
        "Largest image accepted (width x height, checked on the header before decoding).", metavar="N",
        check=_positive),
    Opt("image_max_bytes", int, DEFAULT_MAX_BYTES, ("--image-max-bytes",),
        "Largest encoded image or audio file accepted, in bytes.", metavar="N", check=_positive),
    Opt("image_min_tokens", int, -1, ("--image-min-tokens",),
        "Fewest tokens an image takes, for dynamic-resolution projectors (Qwen-VL); -1: the model's.",
        metavar="N", envvar="LLAMA_ARG_IMAGE_MIN_TOKENS", check=_tokens),
    Opt("image_max_tokens", int, -1, ("--image-max-tokens",),
        "Most tokens an image takes, for dynamic-resolution projectors (Qwen-VL); -1: the model's.",
        metavar="N", envvar="LLAMA_ARG_IMAGE_MAX_TOKENS", check=_tokens),
    Opt("audio_max_seconds", float, AUDIO_MAX_SECONDS, ("--audio-max-seconds",),
        "Longest audio accepted, in seconds (checked on the header before decoding).", metavar="S",
        check=_seconds),
]


@dataclass(frozen=True)
class MmprojOptions:
    path: str | None  # the projector to load (None: none, or --no-mmproj)
    limits: MediaLimits
    from_hub: bool = False  # neither -mm nor --no-mmproj: -hf brings the repository's projector
    image_tokens: tuple[int, int] = (-1, -1)  # --image-min/max-tokens (-1: the model's)


def build(values: dict[str, Any]) -> MmprojOptions:
    path = values["path"] if values["auto"] else None
    from_hub = values["auto"] and values["path"] is None
    image = ImageLimits(values["image_max_pixels"], values["image_max_bytes"])
    return MmprojOptions(path, MediaLimits(image, values["audio_max_seconds"]), from_hub,
                         (values["image_min_tokens"], values["image_max_tokens"]))


mmproj_options = option_group("mmproj", OPTIONS, build)


def fetch_model(source: ModelSource, mm: MmprojOptions) -> tuple[str | None, MmprojOptions]:
    """The model file to open (downloaded now with -hf) and the projector options with -hf's
    projector in them when the repository has one and neither -mm nor --no-mmproj is given."""
    model, projector = model_files(source.model, source.hf_repo, source.hf_file, source.hf_token, source.offline,
                                   mmproj=mm.from_hub)
    return model, (dataclasses.replace(mm, path=projector) if projector else mm)


def may_have_projector(source: ModelSource, mm: MmprojOptions) -> bool:
    """Whether the command can have a projector before anything is downloaded: -mm, or -hf
    whose repository may hold one."""
    return mm.path is not None or (mm.from_hub and source.hf_repo is not None)
