"""A hybrid (Mamba-2 + attention) model behind a real `llama serve`: the official openai client
completes and streams the same text, the prompt cache keeps a slot's recurrent state for a
prompt that continues it whole and otherwise goes back to a context checkpoint, and a slot saved to a file and restored into the other slot
continues from its state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from tests.http_server import LlamaServer
from tests.tiny_models import write_tiny_model

PROMPT = "the quick brown fox jumps over the lazy dog. a model reads"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Any:
    d = tmp_path_factory.mktemp("gh")
    model = write_tiny_model("granitehybrid", "Q8_0", d / "granite.gguf")
    (d / "slots").mkdir()
    with LlamaServer("-m", str(model), "-c", "512", "-np", "2", "--temp", "0", "--slot-save-path", str(d / "slots")) as s:
        yield s


def _complete(srv: LlamaServer, prompt: str | list[int], **kw: Any) -> dict[str, Any]:
    status, body = srv.post("/completion", {"prompt": prompt, "n_predict": 6, "temperature": 0, **kw})
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def test_openai_client_completes_and_streams_alike(srv: LlamaServer) -> None:
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="sk-no-key-required", max_retries=0, timeout=120)
    full = client.completions.create(model="granite", prompt=PROMPT, max_tokens=8, temperature=0)
    assert full.choices[0].text and full.usage is not None and full.usage.completion_tokens == 8
    parts = client.completions.create(model="granite", prompt=PROMPT, max_tokens=8, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in parts) == full.choices[0].text


def test_prompt_cache_keeps_the_state_or_goes_back_to_a_checkpoint(srv: LlamaServer) -> None:
    status, tok = srv.post("/tokenize", {"content": PROMPT})
    assert status == 200
    ids: list[int] = tok["tokens"]
    a = _complete(srv, ids, id_slot=0, return_tokens=True)
    again = _complete(srv, ids, id_slot=0)  # the same prompt: its last token again, from the checkpoint
    assert again["tokens_cached"] == len(ids) - 4 and again["content"] == a["content"]
    follow = ids + a["tokens"] + ids[:3]  # a next turn: the whole cached sequence, then more
    longer = _complete(srv, follow, id_slot=0)
    assert longer["tokens_cached"] == len(ids) + len(a["tokens"]) - 1  # the last generated was never evaluated
    part = _complete(srv, ids[:-2] + ids[:2], id_slot=0)  # part of it: back to the checkpoint
    assert part["tokens_cached"] == len(ids) - 4
    other = _complete(srv, ids[:3] + ids[:3], id_slot=0)  # no checkpoint within the shared part
    assert other["tokens_cached"] == 0
    cold = _complete(srv, follow, id_slot=1, cache_prompt=False)
    assert cold["tokens_cached"] == 0 and cold["content"] == longer["content"]


def test_slot_save_restore_continues_from_the_state(srv: LlamaServer) -> None:
    status, tok = srv.post("/tokenize", {"content": PROMPT + " again"})
    ids: list[int] = tok["tokens"]
    a = _complete(srv, ids, id_slot=0, return_tokens=True)
    status, saved = srv.post("/slots/0?action=save", {"filename": "granite.bin"})
    assert status == 200 and saved["n_saved"] == len(ids) + len(a["tokens"]) - 1
    status, restored = srv.post("/slots/1?action=restore", {"filename": "granite.bin"})
    assert status == 200 and restored["n_restored"] == saved["n_saved"]
    follow = ids + a["tokens"] + ids[:4]
    b = _complete(srv, follow, id_slot=1)
    assert b["tokens_cached"] == saved["n_saved"]
    assert b["content"] == _complete(srv, follow, id_slot=0, cache_prompt=False)["content"]
