"""The CLI's side of images: the projector opened beside the model (-mm), image files read and
decoded with the limits of the command line, and a prompt turned into a task's tokens and media.
"""

from __future__ import annotations

from collections.abc import Sequence

from llamacli.core.errors import InvalidRequest
from llamacli.core.multimodal.encoder import MEDIA_MARKER, VisionEncoder
from llamacli.core.multimodal.image import ImageLimits, decode_image
from llamacli.core.multimodal.prompt import Media, MediaSpan, prompt_with_media
from llamacli.core.text.tokenizer import Tokenizer
from llamacli.options.mmproj import NO_PROJECTOR, MmprojOptions


def open_projector(opts: MmprojOptions, n_embd_text: int, threads: int = -1) -> VisionEncoder | None:
    """The -mm projector checked against the text model's width (a ModelLoadError: exit 2), or
    None without one (or with --no-mmproj)."""
    if opts.path is None:
        return None
    return VisionEncoder.load(opts.path, n_embd_text=n_embd_text, threads=threads if threads > 0 else None)


def read_image(path: str, limits: ImageLimits) -> Media:
    """An image file decoded (InvalidRequest, exit 1, naming the file when it cannot be)."""
    try:
        with open(path, "rb") as f:
            data = f.read(limits.max_bytes + 1)
    except OSError as e:
        raise InvalidRequest(f"--image {path}: {e.strerror or e}") from None
    try:
        return Media.of(decode_image(data, limits), data)
    except InvalidRequest as e:
        raise InvalidRequest(f"--image {path}: {e}") from None


def media_prompt(
    text: str, images: Sequence[str], encoder: VisionEncoder | None, tokenizer: Tokenizer, limits: ImageLimits
) -> tuple[list[int], tuple[MediaSpan, ...]]:
    """The prompt's tokens and media. Without a marker in the text, one marker per image goes
    before it (as llama-mtmd-cli does); images without a projector are a usage error."""
    if not images:
        return tokenizer.tokenize(text, add_special=True, parse_special=True), ()
    if encoder is None:
        raise InvalidRequest(NO_PROJECTOR)
    if MEDIA_MARKER not in text:
        text = MEDIA_MARKER * len(images) + text
    media = [read_image(p, limits) for p in images]
    return prompt_with_media(text, media, encoder, tokenizer)
