"""Media in requests without a server (http/media.py, the media parts of http/oai.py): which
parts a projector's modalities admit, with llama-server's messages, the parts turned into
markers and their data in order, and base64 media decoded by their magic."""

from __future__ import annotations

import base64

import pytest

from llamacli.http import oai
from llamacli.http.errors import ApiError
from llamacli.http.media import b64_media, url_media
from llamacli.core.multimodal.limits import MediaLimits
from tests.audio_files import wav_float32
from tests.tiny_audio import signal

WAV = base64.b64encode(wav_float32(signal("click")[:, None], 16000)).decode()
AUDIO_PART = {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}}
IMAGE_PART = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


def _msgs(*parts: object) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, *parts]}]}


def test_parts_follow_the_projectors_modalities() -> None:
    msgs = oai.chat_messages(_msgs(AUDIO_PART, IMAGE_PART), frozenset({"audio", "image"}))
    out, urls = oai.take_media(msgs)
    assert urls == [WAV, "data:image/png;base64,AAAA"]
    assert out[0]["content"][1:] == [{"type": "text", "text": "<__media__>"}] * 2
    for part, medium, allowed in ((AUDIO_PART, "audio", {"image"}), (IMAGE_PART, "image", {"audio"})):
        with pytest.raises(ApiError) as e:
            oai.chat_messages(_msgs(part), frozenset(allowed))
        assert e.value.status == 400
        assert e.value.message == f"{medium} input is not supported - hint: if this is unexpected, you may need to provide the mmproj"


@pytest.mark.parametrize("part", [
    {"type": {}, "input_audio": {"data": "", "format": ""}},  # the fuzzer's: an unhashable type was a 500
    {"type": ["input_audio"]},
    {"type": "input_audio", "input_audio": {"data": 5}},
    {"type": "input_audio", "input_audio": "AAAA"},
])
def test_malformed_parts_are_a_400(part: object) -> None:
    with pytest.raises(ApiError) as e:
        oai.chat_messages(_msgs(part), frozenset({"audio", "image"}))
    assert e.value.status == 400


def test_base64_media_by_magic() -> None:
    assert b64_media(WAV, MediaLimits()).kind == "audio"
    assert url_media("data:audio/wav;base64," + WAV, MediaLimits()).kind == "audio"
    with pytest.raises(ApiError, match="failed to decode base64"):
        b64_media("!!", MediaLimits())
