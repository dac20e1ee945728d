"""`-mm FILE` opened as mtmd_init_from_file does: the vision tower, the audio tower, or both,
as the file's `clip.has_vision_encoder` / `clip.has_audio_encoder` say."""

from __future__ import annotations

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.core.multimodal.audio.encoder import AudioEncoder
from llamacli.core.multimodal.encoder import VisionEncoder
from llamacli.core.multimodal.media_encoder import Encoders, MultiEncoder


def load_encoders(path: str, n_embd_text: int | None = None, threads: int | None = None,
                  image_tokens: tuple[int, int] = (-1, -1)) -> Encoders:
    """The projector file's encoders, each checked against the text model's width
    (ModelLoadError); a file with neither tower is a ModelLoadError. image_tokens: the fewest and
    most tokens of a dynamic-resolution image (-1: the family's)."""
    md = GGUFFile(path).metadata
    if md.get("general.architecture") != "clip":
        raise ModelLoadError(path, "not a projector file: general.architecture is not 'clip'")
    has_vision, has_audio = bool(md.get("clip.has_vision_encoder", False)), bool(md.get("clip.has_audio_encoder", False))
    vision = VisionEncoder.load(path, n_embd_text, threads, image_tokens) if has_vision else None
    audio = AudioEncoder.load(path, n_embd_text) if has_audio else None
    if vision is not None and audio is not None:
        return MultiEncoder(vision, audio)
    if vision is not None:
        return vision
    if audio is not None:
        return audio
    raise ModelLoadError(path, "the projector has neither a vision nor an audio encoder")
