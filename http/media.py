"""Media in requests: base64 (raw or a data: URI) decoded within the server's limits, images or
audio by their magic (as llama-server's mtmd-helper), and a rendered prompt with `<__media__>`
markers turned into an engine task's tokens and media spans."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llamacli.core.multimodal.limits import MediaLimits
from llamacli.http.errors import bad_request
from llamacli.http.media_fetch import download, is_remote, read_media_file

if TYPE_CHECKING:
    from llamacli.core.multimodal.media import Media
    from llamacli.core.multimodal.media_encoder import Encoders
    from llamacli.core.multimodal.prompt import MediaSpan


def url_media(url: str, limits: MediaLimits, media_path: str | None = None) -> Media:
    """An image_url or input_audio `data`: an http(s) URL (downloaded), a file:// URL (read
    under --media-path), a data: URI or raw base64, as llama-server's handle_media."""
    from llamacli.core.multimodal.media import decode_media

    if is_remote(url):
        return decode_media(download(url, limits.max_bytes), limits)
    if url.startswith("file://"):
        return decode_media(read_media_file(url, media_path, limits.max_bytes), limits)
    return b64_media(url, limits)


def b64_media(b64: str, limits: MediaLimits) -> Media:
    """A base64 medium (raw, or a data: URI) decoded within the limits (400 otherwise)."""
    from llamacli.core.multimodal.media import decode_media

    raw = b64.split(",", 1)[1] if b64.startswith("data:") and "," in b64 else b64
    if len(raw) > limits.max_bytes * 4 // 3 + 4:
        raise bad_request(f"a medium of more than {limits.max_bytes} bytes")
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise bad_request("failed to decode base64 media data") from None
    return decode_media(data, limits)


def tokens_with_media(
    prompt: str, urls: Sequence[str], encoders: Encoders | None, tokenizer: Any, limits: MediaLimits,
    media_path: str | None = None,
) -> tuple[list[int], tuple[MediaSpan, ...]]:
    """A rendered chat prompt's tokens and media: each URL (in order) takes the next marker
    (file:// URLs read under `media_path`)."""
    if not urls or encoders is None:
        return list(tokenizer.tokenize(prompt, True, True)), ()
    from llamacli.core.multimodal.prompt import prompt_with_media

    return prompt_with_media(prompt, [url_media(u, limits, media_path) for u in urls], encoders, tokenizer)
