"""`llama serve -mm`: /completion with multimodal_data gives llama.cpp's next token for an image
prompt (demo model + synthetic gemma3 projector), /props reports vision, and media sent to a
server without a projector is a 400 with llama-server's message."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from scripts.mmproj_fixtures import PROMPT
from tests.http_server import LlamaServer
from tests.tiny_mmproj import SPECS, write_projector

FIXTURES = Path(__file__).parent / "fixtures" / "mmproj"


def _png_b64(img: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    mm = write_projector(SPECS["gemma3"], tmp_path_factory.mktemp("srv_mm") / "mmproj.gguf")
    media = tmp_path_factory.mktemp("media")
    (media / "image1.png").write_bytes(base64.b64decode(_png_b64(np.load(FIXTURES / "gemma3.npz")["image1"])))
    with LlamaServer("-mm", str(mm), "-c", "256", "--no-warmup", "--media-path", str(media)) as s:
        yield s


def test_completion_with_multimodal_data(server) -> None:  # type: ignore[no-untyped-def]
    fx = np.load(FIXTURES / "gemma3.npz")
    body = {"prompt": {"prompt_string": PROMPT, "multimodal_data": [_png_b64(fx["image1"])]},
            "n_predict": 1, "temperature": 0, "cache_prompt": True}
    status, out = server.post("/completion", body)
    assert status == 200, out
    assert out["tokens_evaluated"] == len(fx["e2e_tokens"]) + 16
    status, again = server.post("/completion", body | {"return_tokens": True})
    assert status == 200 and again["tokens"] == [int(fx["e2e_top_ids"][0])]
    assert again["timings"]["cache_n"] >= 25  # the second request reuses the image's cache
    status, props = server.get("/props")
    assert props["modalities"] == {"vision": True, "audio": False}


def test_bad_media_is_a_400(server) -> None:  # type: ignore[no-untyped-def]
    status, out = server.post("/completion", {"prompt": {"prompt_string": "<__media__>", "multimodal_data": ["!!"]}})
    assert status == 400 and "base64" in out["error"]["message"]
    junk = base64.b64encode(b"not an image").decode()
    status, out = server.post("/completion", {"prompt": {"prompt_string": "<__media__>", "multimodal_data": [junk]}})
    assert status == 400 and "unknown or unsupported image format" in out["error"]["message"]
    status, out = server.post("/completion", {"prompt": {"prompt_string": "no marker", "multimodal_data": [_png_b64(np.zeros((4, 4, 3), np.uint8))]}})
    assert status == 400 and "number of media markers in text (0)" in out["error"]["message"]


def test_media_without_a_projector_is_llama_servers_400() -> None:
    with LlamaServer("-c", "128", "--no-warmup") as s:
        status, out = s.post("/completion", {"prompt": {"prompt_string": "<__media__>", "multimodal_data": ["AAAA"]}})
        assert status == 400
        assert out["error"]["message"] == "Multimodal data provided, but model does not support multimodal requests."
        msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]
        status, out = s.post("/v1/chat/completions", {"messages": msgs})
        assert status == 400
        assert out["error"]["message"] == (
            "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj")
        assert s.post("/apply-template", {"messages": msgs})[0] == 400
        assert s.get("/props")[1]["modalities"] == {"vision": False, "audio": False}

def test_chat_with_an_image_url_part(server) -> None:  # type: ignore[no-untyped-def]
    """An OpenAI image_url part (a data: URI) becomes the marker in the rendered template."""
    fx = np.load(FIXTURES / "gemma3.npz")
    url = "data:image/png;base64," + _png_b64(fx["image1"])
    msgs = [{"role": "user", "content": [{"type": "text", "text": "What is in "},
                                         {"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": " this picture?"}]}]
    status, out = server.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 2, "temperature": 0})
    assert status == 200, out
    assert out["usage"]["prompt_tokens"] >= 16 + 9  # the image's 16 positions count
    msgs[0]["content"][1] = {"type": "image_url", "image_url": {"url": "file://image1.png"}}  # under --media-path
    status, by_file = server.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 2, "temperature": 0})
    assert status == 200, by_file
    assert by_file["choices"][0]["message"] == out["choices"][0]["message"]
    assert by_file["usage"]["prompt_tokens"] == out["usage"]["prompt_tokens"]
    status, out = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "file://../mmproj.gguf"}}]}]})
    assert status == 400 and out["error"]["message"] == "file path is not allowed: ../mmproj.gguf"

    status, out = server.post("/apply-template", {"messages": msgs})  # llama-server: the parts as markers
    assert status == 200 and out["prompt"].count("<__media__>") == 1 and "What is in " in out["prompt"]
    msgs[0]["content"][1] = {"type": "image_url", "image_url": {"url": "file://missing.png"}}
    status, out = server.post("/apply-template", {"messages": msgs})
    assert status == 400 and out["error"]["message"] == "file does not exist or cannot be opened: missing.png"


def test_media_path_must_be_a_directory(tmp_path: Path) -> None:
    from tests.test_cli import llama

    r = llama("serve", "--media-path", str(tmp_path / "none"), "--port", "0", "--no-warmup", timeout=120)
    assert r.returncode != 0 and "--media-path: not a directory" in r.stderr and "Traceback" not in r.stderr


def test_serve_with_a_projector_of_another_width_exits_2(tmp_path: Path) -> None:
    from tests.test_cli import llama
    from tests.tiny_mmproj import ProjectorSpec

    wide = write_projector(ProjectorSpec("w", "gemma3", n_text=1024, n_layer=1), tmp_path / "wide.gguf")
    r = llama("serve", "-mm", str(wide), "--port", "0", "--no-warmup", timeout=180)
    assert r.returncode == 2
    assert "mismatch between text model (n_embd = 640) and mmproj (n_embd = 1024)" in r.stderr


def _chat_prompt_tokens(server, parts: list) -> int:  # type: ignore[no-untyped-def, type-arg]
    """prompt_tokens of an OpenAI chat request with these content parts (image_url parts count
    their image: test_chat_with_an_image_url_part)."""
    status, out = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": parts}], "max_tokens": 1})
    assert status == 200, out
    return int(out["usage"]["prompt_tokens"])


def test_anthropic_image_block(server) -> None:  # type: ignore[no-untyped-def]
    """An Anthropic image block (base64 source) becomes an image_url part, as llama-server's
    convert_anthropic_to_oai: the prompt is the OpenAI request's, image positions included."""
    fx = np.load(FIXTURES / "gemma3.npz")
    b64 = _png_b64(fx["image1"])
    text = {"type": "text", "text": "What is in this picture?"}
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}
    body = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [image, text]}]}
    status, out = server.post("/v1/messages", body)
    assert status == 200, out
    n_prompt = out["usage"]["input_tokens"] + out["usage"]["cache_read_input_tokens"]
    url = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64}}
    assert n_prompt == _chat_prompt_tokens(server, [url, text])
    status, plain = server.post("/v1/messages/count_tokens", {"model": "m", "messages": [{"role": "user", "content": [text]}]})
    assert n_prompt > plain["input_tokens"] + 16  # the image's 16 positions
    status, counted = server.post("/v1/messages/count_tokens", body)
    assert counted["input_tokens"] == n_prompt
    bad = dict(image, source={"type": "base64"})
    status, out = server.post("/v1/messages", body | {"messages": [{"role": "user", "content": [bad]}]})
    assert status == 400 and "image blocks need a source" in out["error"]["message"]


def test_responses_input_image_part(server) -> None:  # type: ignore[no-untyped-def]
    fx = np.load(FIXTURES / "gemma3.npz")
    url = "data:image/png;base64," + _png_b64(fx["image1"])
    text = {"type": "input_text", "text": "What is in this picture?"}
    body = {"input": [{"role": "user", "content": [text, {"type": "input_image", "image_url": url}]}], "max_output_tokens": 1}
    status, out = server.post("/v1/responses", body)
    assert status == 200, out
    chat_parts = [{"type": "text", "text": text["text"]}, {"type": "image_url", "image_url": {"url": url}}]
    assert out["usage"]["input_tokens"] == _chat_prompt_tokens(server, chat_parts)


def test_media_to_a_server_without_the_modality() -> None:
    """Anthropic image blocks and Responses input_image parts without a projector: llama-server's
    400; /v1/models says "completion" only."""
    with LlamaServer("-c", "128", "--no-warmup") as s:
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
        status, out = s.post("/v1/messages", {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [image]}]})
        assert status == 400 and out["error"]["message"].startswith("image input is not supported - hint")
        part = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}
        status, out = s.post("/v1/responses", {"input": [{"role": "user", "content": [part]}]})
        assert status == 400 and out["error"]["message"].startswith("image input is not supported - hint")
        assert s.get("/v1/models")[1]["models"][0]["capabilities"] == ["completion"]
