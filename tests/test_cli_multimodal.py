"""`llama complete --image` with a projector (-mm), as a user runs it: the demo model with the
synthetic gemma3 projector gives llama.cpp's next token; the flags' errors and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from scripts.mmproj_fixtures import PROMPT
from tests.test_cli import llama
from tests.tiny_mmproj import SPECS, ProjectorSpec, write_projector

FIXTURES = Path(__file__).parent / "fixtures" / "mmproj"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cli_mm")
    fx = np.load(FIXTURES / "gemma3.npz")
    Image.fromarray(fx["image1"]).save(d / "img.png")
    (d / "prompt.txt").write_text(PROMPT)
    (d / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    return {
        "mm": write_projector(SPECS["gemma3"], d / "mmproj.gguf"),
        "wide": write_projector(ProjectorSpec("w", "gemma3", n_text=1024, n_layer=1), d / "wide.gguf"),
        "img": d / "img.png", "prompt": d / "prompt.txt", "bad": d / "bad.png",
    }


def test_complete_with_an_image_gives_llama_cpps_next_token(files: dict[str, Path]) -> None:
    fx = np.load(FIXTURES / "gemma3.npz")
    r = llama("complete", "-mm", str(files["mm"]), "--image", str(files["img"]), "-f", str(files["prompt"]),
              "-n", "1", "--temp", "0", "--json", "--mmproj-offload")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["tokens"] == [int(fx["e2e_top_ids"][0])]
    assert out["prompt_tokens"].count(-1) == 16  # the image's positions
    assert [t for t in out["prompt_tokens"] if t >= 0] == fx["e2e_tokens"].tolist()


def test_projector_errors_and_usage_errors(files: dict[str, Path]) -> None:
    r = llama("complete", "-mm", str(files["wide"]), "--image", str(files["img"]), "-p", "x", "-n", "1")
    assert r.returncode == 2
    assert "mismatch between text model (n_embd = 640) and mmproj (n_embd = 1024)" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = llama("complete", "--image", str(files["img"]), "-p", "x", "-n", "1")
    assert r.returncode == 1 and "--image needs a multimodal projector: pass -mm/--mmproj FILE" in r.stderr
    r = llama("complete", "-mm", str(files["mm"]), "--no-mmproj", "--image", str(files["img"]), "-p", "x", "-n", "1")
    assert r.returncode == 1 and "--image needs a multimodal projector" in r.stderr
    r = llama("complete", "-mm", str(files["mm"]), "--image", str(files["bad"]), "-p", "x", "-n", "1")
    assert r.returncode == 1 and f"--image {files['bad']}: failed to load image" in r.stderr


def test_chat_with_an_image(files: dict[str, Path]) -> None:
    """`llama chat -mm P --image F` (piped message): the image's 16 positions and its two
    framing tokens join the prompt; without -mm, --image is a usage error before loading."""
    base = ["chat", "-n", "1", "--temp", "0", "--json"]
    plain = llama(*base, stdin="Describe it.")
    with_image = llama(*base, "-mm", str(files["mm"]), "--image", str(files["img"]), stdin="Describe it.")
    assert plain.returncode == 0 and with_image.returncode == 0, with_image.stderr
    n0 = json.loads(plain.stdout)["usage"]["prompt_tokens"]
    assert json.loads(with_image.stdout)["usage"]["prompt_tokens"] == n0 + 16 + 2
    r = llama("chat", "--image", str(files["img"]), stdin="Describe it.")
    assert r.returncode == 1 and "--image needs a multimodal projector" in r.stderr


def test_saved_conversations_keep_markers_not_images() -> None:
    from llamacli.chat.conversation import Conversation

    conv = Conversation()
    conv.add_user("<__media__>what is it?", [object()])
    assert len(conv.media()) == 1 and "media" not in conv.for_template()[0]
    assert conv.to_dict()["messages"] == [{"role": "user", "content": "<__media__>what is it?"}]


# ---- audio (the tiny qwen2a projector; scripts/oracle_audio.py's e2e fixture) ------------------

@pytest.fixture(scope="module")
def audio_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from scripts.oracle_audio import E2E_PROJECTOR, E2E_PROMPT, E2E_SIGNAL
    from tests.audio_files import wav_float32
    from tests.tiny_audio import signal, write_audio_projector

    d = tmp_path_factory.mktemp("cli_audio")
    (d / "clip.wav").write_bytes(wav_float32(signal(E2E_SIGNAL)[:, None], 16000))
    (d / "prompt.txt").write_text(E2E_PROMPT)
    (d / "bad.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEfmt ")
    return {"mm": write_audio_projector(E2E_PROJECTOR, d / "audio.gguf"), "wav": d / "clip.wav",
            "prompt": d / "prompt.txt", "bad": d / "bad.wav"}


def test_complete_with_audio_gives_libmtmds_next_token(audio_files: dict[str, Path]) -> None:
    fx = np.load(Path(__file__).parent / "fixtures" / "audio" / "e2e.npz")
    r = llama("complete", "-mm", str(audio_files["mm"]), "--audio", str(audio_files["wav"]), "-f", str(audio_files["prompt"]),
              "-n", "1", "--temp", "0", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["tokens"] == [int(fx["e2e_top_ids"][0])]
    assert out["prompt_tokens"].count(-1) == 750  # the clip's positions (one 30 s window)
    assert [t for t in out["prompt_tokens"] if t >= 0] == fx["e2e_tokens"].tolist()


def test_audio_usage_errors(audio_files: dict[str, Path], files: dict[str, Path]) -> None:
    r = llama("complete", "--audio", str(audio_files["wav"]), "-p", "x", "-n", "1")
    assert r.returncode == 1 and "--audio needs a multimodal projector: pass -mm/--mmproj FILE" in r.stderr
    r = llama("complete", "-mm", str(audio_files["mm"]), "--audio", str(audio_files["bad"]), "-p", "x", "-n", "1")
    assert r.returncode == 1 and f"--audio {audio_files['bad']}: cannot read the WAV audio" in r.stderr
    r = llama("complete", "-mm", str(audio_files["mm"]), "--image", str(files["img"]), "-p", "x", "-n", "1")
    assert r.returncode == 1 and "image input is not supported - hint" in r.stderr
    r = llama("complete", "-mm", str(audio_files["mm"]), "--audio", str(audio_files["wav"]), "--audio-max-seconds", "0.5",
              "-p", "x", "-n", "1")
    assert r.returncode == 1 and f"--audio {audio_files['wav']}: audio is 1.0 s long: the limit is 0.5 s" in r.stderr
    r = llama("complete", "--audio-max-seconds", "0", "-p", "x", "-n", "1")
    assert r.returncode != 0 and "must be a positive number of seconds" in r.stderr


def test_chat_with_audio_flag_pipe_and_repl(audio_files: dict[str, Path]) -> None:
    """`llama chat -mm P --audio F` (piped message) and `/audio F` in the REPL: the clip's 750
    positions and its markers join the prompt."""
    base = ["chat", "-n", "1", "--temp", "0", "--json"]
    plain = llama(*base, stdin="What do you hear?")
    with_audio = llama(*base, "-mm", str(audio_files["mm"]), "--audio", str(audio_files["wav"]), stdin="What do you hear?")
    assert plain.returncode == 0 and with_audio.returncode == 0, with_audio.stderr
    n0 = json.loads(plain.stdout)["usage"]["prompt_tokens"]
    n_audio = json.loads(with_audio.stdout)["usage"]["prompt_tokens"]
    assert n_audio > n0 + 750
    script = f"/set temp 0\n/set n 1\n/audio {audio_files['wav']}\nWhat do you hear?\n/tokens\n/exit\n"
    r = llama("chat", "-mm", str(audio_files["mm"]), "--simple-io", stdin=script)
    assert r.returncode == 0, r.stderr
    assert "audio attached to your next message (1 waiting)" in r.stdout
    r = llama("chat", "--audio", str(audio_files["wav"]), stdin="hi")
    assert r.returncode == 1 and "--audio needs a multimodal projector" in r.stderr
