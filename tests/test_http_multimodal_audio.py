"""`llama serve -mm` with an audio projector (the demo model + the tiny qwen2a projector), over
HTTP as a user runs it: /completion's multimodal_data and the openai client's input_audio parts
give libmtmd's next token (scripts/oracle_audio.py's e2e fixture), /props and /v1/models say
what the server takes, and media it cannot take or hostile audio are 400s with one-line messages."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import openai
import pytest

from scripts.oracle_audio import E2E_PROJECTOR, E2E_PROMPT, E2E_SIGNAL
from tests.audio_files import wav_float32
from tests.http_server import LlamaServer
from tests.test_multimodal_audio import _flac_claiming, _wav_header
from tests.tiny_audio import signal, write_audio_projector

FIX = Path(__file__).parent / "fixtures" / "audio"
MAX_S = 5  # --audio-max-seconds of the server


def _wav_b64(name: str) -> str:
    return base64.b64encode(wav_float32(signal(name)[:, None], 16000)).decode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    mm = write_audio_projector(E2E_PROJECTOR, tmp_path_factory.mktemp("srv_audio") / "mmproj.gguf")
    with LlamaServer("-mm", str(mm), "-c", "1024", "--no-warmup", "--audio-max-seconds", str(MAX_S)) as s:
        yield s


def test_completion_with_audio_gives_libmtmds_next_token(server) -> None:  # type: ignore[no-untyped-def]
    fx = np.load(FIX / "e2e.npz")
    body = {"prompt": {"prompt_string": E2E_PROMPT, "multimodal_data": [_wav_b64(E2E_SIGNAL)]},
            "n_predict": 1, "temperature": 0, "return_tokens": True, "cache_prompt": True}
    status, out = server.post("/completion", body)
    assert status == 200, out
    assert out["tokens"] == [int(fx["e2e_top_ids"][0])]
    assert out["tokens_evaluated"] == len(fx["e2e_tokens"]) + 750
    status, again = server.post("/completion", body | {"n_probs": 10})  # the clip's chunk comes from the prompt cache
    assert status == 200 and again["timings"]["cache_n"] >= 750 and again["tokens"] == out["tokens"]
    # the next-token distribution: the top 10 are libmtmd's (9 of 10 shared measured, as the
    # core test), their log-probabilities apart as libmtmd's logits are, within the demo model's noise
    top = again["completion_probabilities"][0]["top_logprobs"]
    ref = dict(zip(fx["e2e_top_ids"].tolist(), fx["e2e_top_logits"].tolist()))
    assert len({t["id"] for t in top} & set(fx["e2e_top_ids"][:10].tolist())) >= 7
    lead = fx["e2e_top_logits"][0]
    for t in top:
        if t["id"] in ref:
            assert abs((t["logprob"] - top[0]["logprob"]) - (ref[t["id"]] - lead)) < 2.5


def test_props_and_models_report_audio(server) -> None:  # type: ignore[no-untyped-def]
    status, props = server.get("/props")
    assert status == 200 and props["modalities"] == {"vision": False, "audio": True}
    assert props["media_marker"] == "<__media__>"
    status, models = server.get("/v1/models")
    assert models["models"][0]["capabilities"] == ["completion", "multimodal"]


def test_openai_client_input_audio_part(server) -> None:  # type: ignore[no-untyped-def]
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-no-key-required", max_retries=0, timeout=300)
    text = {"type": "text", "text": "What do you hear?"}
    r = client.chat.completions.create(
        model="m", max_tokens=1, temperature=0,
        messages=[{"role": "user", "content": [
            text, {"type": "input_audio", "input_audio": {"data": _wav_b64("click"), "format": "wav"}},
        ]}],
    )
    assert r.usage is not None
    # the rendered template with the marker in the clip's place, each piece tokenized apart (as
    # mtmd_tokenize): the text around it, the audio markers, and the clip's 750 positions
    _, rendered = server.post("/apply-template", {"messages": [{"role": "user", "content": [
        text, {"type": "text", "text": "<__media__>"}]}]})
    before, after = rendered["prompt"].split("<__media__>")

    def n(t: str, bos: bool = False) -> int:
        return len(server.post("/tokenize", {"content": t, "add_special": bos})[1]["tokens"])

    assert r.usage.prompt_tokens == n(before, True) + n("<|audio_bos|>") + 750 + n("<|audio_eos|>") + n(after)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", max_tokens=1, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}])
    assert e.value.status_code == 400
    assert e.value.body["message"] == "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"  # type: ignore[index]


def _mp3_17s() -> bytes:
    """24 kB of llama.cpp's test MP3 whose Xing header says 17.4 s (the decode fixture)."""
    with np.load(FIX / "decode.npz") as f:
        return f["mp3_mono_44k_bytes"].tobytes()


@pytest.mark.parametrize("data,message", [
    (_wav_header(16000, 2, 0xFFFFFFF0), "empty audio"),  # a 44-byte file that claims 37 hours: nothing to decode
    (_mp3_17s(), f"audio is 17.4 s long: the limit is {MAX_S} s"),  # over --audio-max-seconds, from the header
    (_flac_claiming(36000), f"audio is 36000.0 s long: the limit is {MAX_S} s"),  # a 0.3 s FLAC that claims 10 hours
    (b"RIFF\x00\x00\x00\x00WAVEfmt ", "cannot read the WAV audio"),  # truncated in its header
    (b"fLaC" + bytes(30), "cannot read the FLAC audio"),
])
def test_hostile_audio_is_a_400(server, data: bytes, message: str) -> None:  # type: ignore[no-untyped-def]
    body = {"prompt": {"prompt_string": "<__media__>", "multimodal_data": [base64.b64encode(data).decode()]}, "n_predict": 1}
    status, out = server.post("/completion", body)
    assert status == 400 and message in out["error"]["message"], out
    msgs = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode()}}]}]
    status, out = server.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 1})
    assert status == 400 and message in out["error"]["message"], out
    assert server.get("/health")[0] == 200


def test_input_audio_without_an_audio_projector_is_llama_servers_400() -> None:
    with LlamaServer("-c", "128", "--no-warmup") as s:
        msgs = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": _wav_b64("click"), "format": "wav"}}]}]
        status, out = s.post("/v1/chat/completions", {"messages": msgs})
        assert status == 400
        assert out["error"]["message"] == "audio input is not supported - hint: if this is unexpected, you may need to provide the mmproj"
        status, models = s.get("/v1/models")
        assert models["models"][0]["capabilities"] == ["completion"]
