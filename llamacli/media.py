"""The CLI's side of media: the projector opened beside the model (-mm: its vision tower, audio
tower or both), image and audio files read and decoded with the limits of the command line, and
a prompt turned into a task's tokens and media.
"""

from __future__ import annotations

from collections.abc import Sequence

from llamacli.core.errors import InvalidRequest
from llamacli.core.multimodal.encoder import MEDIA_MARKER
from llamacli.core.multimodal.limits import MediaLimits
from llamacli.core.multimodal.media import AUDIO, IMAGE, Media
from llamacli.core.multimodal.media_encoder import Encoders
from llamacli.core.multimodal.prompt import MediaSpan, prompt_with_media
from llamacli.core.text.tokenizer import Tokenizer
from llamacli.options.mmproj import MmprojOptions, no_projector


def open_projector(opts: MmprojOptions, n_embd_text: int, threads: int = -1) -> Encoders | None:
    """The -mm projector checked against the text model's width (a ModelLoadError: exit 2), or
    None without one (or with --no-mmproj)."""
    if opts.path is None:
        return None
    from llamacli.core.multimodal.load import load_encoders

    return load_encoders(opts.path, n_embd_text=n_embd_text, threads=threads if threads > 0 else None,
                         image_tokens=opts.image_tokens)


def read_media(path: str, limits: MediaLimits, kind: str = IMAGE) -> Media:
    """An image (kind "image") or audio file (WAV, MP3, FLAC) decoded (InvalidRequest, exit 1,
    naming the file when it cannot be)."""
    flag = "--audio" if kind == AUDIO else "--image"
    try:
        with open(path, "rb") as f:
            data = f.read(limits.max_bytes + 1)
    except OSError as e:
        raise InvalidRequest(f"{flag} {path}: {e.strerror or e}") from None
    try:
        if kind == AUDIO:
            from llamacli.core.multimodal.audio.decode import decode_audio

            if len(data) > limits.max_bytes:
                raise InvalidRequest(f"audio file is more than the limit of {limits.max_bytes} bytes")
            return Media.of(decode_audio(data, max_seconds=limits.audio_max_seconds), data, AUDIO)
        from llamacli.core.multimodal.image import decode_image

        return Media.of(decode_image(data, limits.image), data)
    except InvalidRequest as e:
        raise InvalidRequest(f"{flag} {path}: {e}") from None


def read_image(path: str, limits: MediaLimits) -> Media:
    return read_media(path, limits, IMAGE)


def read_audio(path: str, limits: MediaLimits) -> Media:
    return read_media(path, limits, AUDIO)


def media_prompt(
    text: str, images: Sequence[str], encoder: Encoders | None, tokenizer: Tokenizer, limits: MediaLimits,
    audio: Sequence[str] = (),
) -> tuple[list[int], tuple[MediaSpan, ...]]:
    """The prompt's tokens and media (the images, then the audio files). Without a marker in
    the text, one marker per medium goes before it (as llama-mtmd-cli does); media without a
    projector are a usage error, and so is a medium the projector does not take."""
    if not images and not audio:
        return tokenizer.tokenize(text, add_special=True, parse_special=True), ()
    if encoder is None:
        raise InvalidRequest(no_projector('--image' if images else '--audio'))
    media = [read_image(p, limits) for p in images] + [read_audio(p, limits) for p in audio]
    if MEDIA_MARKER not in text:
        text = MEDIA_MARKER * len(media) + text
    return prompt_with_media(text, media, encoder, tokenizer)
