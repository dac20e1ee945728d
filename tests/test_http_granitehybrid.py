"""A hybrid (Mamba-2 + attention: granitehybrid; gated delta net + attention: qwen35) model behind a real `llama serve`: the official openai client
completes and streams the same text, the prompt cache keeps a slot's recurrent state for a
prompt that continues it whole and otherwise goes back to a context checkpoint, and a slot saved to a file and restored into the other slot
continues from its state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.http_server import LlamaServer
from tests.tiny_models import write_tiny_model

FIXTURES = Path(__file__).parent / "fixtures" / "tiny"
PROMPT = "the quick brown fox jumps over the lazy dog. a model reads"


@pytest.fixture(scope="module", params=["granitehybrid", "qwen35"])
def srv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The Mamba-2 family, and the gated delta-net one (qwen35: the same machinery, its own state)."""
    d = tmp_path_factory.mktemp("gh")
    model = write_tiny_model(request.param, "Q8_0", d / "granite.gguf")
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


def test_prompt_cache_reuses_what_llama_server_reuses(srv: LlamaServer, request: pytest.FixtureRequest) -> None:
    """The requests llama-server answered in tests/fixtures/tiny/<arch>-Q8_0-server.json
    (scripts/oracle_fixtures.py --hybrid-server): the same prompt again and a part of the cache
    go back to its context checkpoint, a continuation keeps the whole state, a short other prompt
    starts over; the prompt tokens reused (timings.cache_n) and the tokens are llama-server's."""
    arch = request.node.callspec.params["srv"]
    steps = json.loads((FIXTURES / f"{arch}-Q8_0-server.json").read_text())["steps"]
    assert [st["cache_n"] for st in steps] == [0, 33, 42, 33, 0]
    for st in steps:
        got = _complete(srv, st["prompt"], id_slot=0, return_tokens=True)
        assert (got["timings"]["cache_n"], got["tokens"]) == (st["cache_n"], st["tokens"])
    cold = _complete(srv, steps[2]["prompt"], id_slot=1, cache_prompt=False, return_tokens=True)
    assert cold["timings"]["cache_n"] == 0 and cold["tokens"] == steps[2]["tokens"]


def test_slot_save_restore_continues_from_the_state(srv: LlamaServer) -> None:
    status, tok = srv.post("/tokenize", {"content": PROMPT + " again"})
    ids: list[int] = tok["tokens"]
    a = _complete(srv, ids, id_slot=0, return_tokens=True, ignore_eos=True)  # all 6 tokens, none an end
    status, saved = srv.post("/slots/0?action=save", {"filename": "granite.bin"})
    assert status == 200 and saved["n_saved"] == len(ids) + len(a["tokens"]) - 1
    status, restored = srv.post("/slots/1?action=restore", {"filename": "granite.bin"})
    assert status == 200 and restored["n_restored"] == saved["n_saved"]
    follow = ids + a["tokens"] + ids[:4]
    b = _complete(srv, follow, id_slot=1)
    assert b["timings"]["cache_n"] == saved["n_saved"]
    assert b["content"] == _complete(srv, follow, id_slot=0, cache_prompt=False)["content"]
