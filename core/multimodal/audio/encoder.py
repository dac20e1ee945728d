"""An audio projector file as a MediaEncoder (core/multimodal/media_encoder.py): a clip's PCM
gives one chunk of embeddings per 30 s window, framed by the family's AUDIO_MARKERS and
attended causally (mtmd_tokenize and mtmd_decode_use_non_causal for qwen2a)."""

from __future__ import annotations

import numpy as np

from llamacli.core.multimodal.audio import encode_audio
from llamacli.core.multimodal.audio.projector import AUDIO_MARKERS, AudioProjector, check_text_model, load_audio_projector
from llamacli.core.multimodal.media import AUDIO, Media
from llamacli.core.multimodal.media_encoder import Framing, MediaEncoder


class AudioEncoder(MediaEncoder):
    kind = AUDIO

    def __init__(self, projector: AudioProjector) -> None:
        super().__init__()
        self.projector = projector
        self.path = projector.path
        self.n_embd = projector.hp.n_out
        begin, end = AUDIO_MARKERS[projector.hp.proj_type]
        self.framing = Framing(begin, end, False)

    @classmethod
    def load(cls, path: str, n_embd_text: int | None = None) -> "AudioEncoder":
        """Open `path`'s audio tower; with n_embd_text, a projector of another width is a
        ModelLoadError (mtmd_init_from_file's check)."""
        proj = load_audio_projector(path)
        if n_embd_text is not None:
            check_text_model(proj, n_embd_text)
        return cls(proj)

    def encode_chunks(self, media: Media) -> list[np.ndarray]:
        return encode_audio(self.projector, media.data)
