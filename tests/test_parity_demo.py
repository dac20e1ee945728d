"""The demo model (Gemma 3 270M Q4_K_M) against llama.cpp (tests/fixtures/demo, made by
scripts/oracle_fixtures.py with llama-cpp-python 0.3.36, flash attention off, n_batch 512).

Exact greedy equality over 64 tokens is not reachable for every prompt: this model amplifies
a relative perturbation of 1e-7 at one layer (f32 summation order) into logit changes of ~1 by
the last layer, and llama.cpp's own logits move that much when the same prompt is fed in other
chunk sizes (docs/numerics.md, "Parity"). So the tests check what is deterministic: the same
prompt tokens; the same greedy tokens wherever llama.cpp's choice is not a near-tie; logits
within the measured noise; and exact equality of whole continuations for the prompts whose
runs have no near-tie.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llamacli.core.model.state.batch import Batch
from llamacli.core.model.load import load_model
from llamacli.core.text.tokenizer import load_tokenizer

FIX = Path(__file__).parent / "fixtures" / "demo"
PROMPTS = json.loads((FIX / "prompts.json").read_text())["prompts"]
NEAR_TIE = 0.5  # llama.cpp top-2 margins below this are near-ties for us (measured: flips at <= 0.43)


@pytest.fixture(scope="module")
def demo(demo_model: str):  # type: ignore[no-untyped-def]
    model, g, _ = load_model(demo_model, numerics="ggml")
    return model, load_tokenizer(g.metadata)


def _teacher_forced(model, ids: list[int], cont: list[int]) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Our logits at each step of llama.cpp's continuation: (len(cont), n_vocab)."""
    seq = ids + cont[:-1]
    cache = model.new_cache(1, len(seq) + 1)
    out = []
    for s in range(0, len(seq), 512):  # the reference's n_batch
        chunk = seq[s : s + 512]
        out.append(model.forward(Batch.single(chunk, start_pos=s, all_logits=True), cache))
    return np.concatenate(out)[len(ids) - 1 :]


@pytest.mark.parametrize("p", PROMPTS, ids=[p["name"] for p in PROMPTS])
def test_prompt_tokens_equal(demo, p) -> None:  # type: ignore[no-untyped-def]
    _, tok = demo
    assert tok.tokenize(p["text"], add_special=True, parse_special=True) == p["prompt_ids"]


@pytest.mark.parametrize("p", PROMPTS, ids=[p["name"] for p in PROMPTS])
def test_greedy_top1_equal_except_near_ties(demo, p) -> None:  # type: ignore[no-untyped-def]
    model, _ = demo
    z = np.load(FIX / "topk.npz")
    ref_ids, ref_lg = z[p["name"] + "__ids"], z[p["name"] + "__logits"]  # (steps, 20), sorted
    ours = _teacher_forced(model, p["prompt_ids"], p["greedy_ids"])
    margin = ref_lg[:, 0] - ref_lg[:, 1]
    clear = margin > NEAR_TIE
    top1 = ours.argmax(-1)
    assert np.array_equal(top1[clear], np.asarray(p["greedy_ids"])[clear])
    # logits of llama.cpp's top-20 tokens: within the model's measured noise
    picked = np.take_along_axis(ours, ref_ids.astype(np.int64), axis=1)
    # (measured over the 12 prompts: max 0.8-2.9, mean 0.17-0.45)
    assert np.abs(picked - ref_lg).max() < 3.5
    assert np.abs(picked - ref_lg).mean() < 0.6


def test_greedy_runs_diverge_only_at_near_ties(demo) -> None:  # type: ignore[no-untyped-def]
    """Our own greedy loop (prefill, then one token at a time, as llama-completion) gives
    llama.cpp's tokens until the first difference, and every first difference falls on a step
    where llama.cpp's own top-2 margin was a near-tie."""
    model, _ = demo
    z = np.load(FIX / "topk.npz")
    matched = 0
    for p in PROMPTS:
        lg = z[p["name"] + "__logits"]
        ids, want = p["prompt_ids"], p["greedy_ids"]
        cache = model.new_cache(1, len(ids) + len(want) + 1)
        for s in range(0, len(ids), 512):
            logits = model.forward(Batch.single(ids[s : s + 512], start_pos=s), cache)[-1]
        for i in range(len(want)):
            t = int(logits.argmax())
            if t != want[i]:
                margin = float(lg[i, 0] - lg[i, 1])
                assert margin < NEAR_TIE, f"{p['name']}: step {i} differs with llama.cpp's margin {margin:.3f}"
                break
            matched += 1
            logits = model.forward(Batch.single([t], start_pos=len(ids) + i), cache)[-1]
    assert matched >= 150  # of 712 (measured: 342; chaotic in summation details, so a margin)


def test_last_position_logits_close(demo) -> None:  # type: ignore[no-untyped-def]
    model, _ = demo
    z = np.load(FIX / "last_logits.npz")
    by_name = {p["name"]: p for p in PROMPTS}
    for name in z.files:
        ids = by_name[name]["prompt_ids"]
        cache = model.new_cache(1, len(ids))
        for s in range(0, len(ids), 512):
            ours = model.forward(Batch.single(ids[s : s + 512], start_pos=s), cache)[-1]
        ref = z[name]
        assert int(ours.argmax()) == int(ref.argmax())
        diff = ours - ref
        assert np.abs(diff).max() < 2.5
        # Logits matter up to a constant (softmax ignores it); the "code" prompt's logits sit
        # ~0.2 below llama.cpp's across the whole vocabulary (raw mean |diff| 0.41, 0.43 in f32
        # numerics too), so the mean is taken on the centred difference (measured 0.13-0.23).
        assert np.abs(diff - diff.mean()).mean() < 0.4


def test_f32_numerics_top1_agrees_beyond_margin(demo_model: str) -> None:
    """Plain float32 maths: top-1 equals llama.cpp's wherever its top-2 margin exceeds 0.5."""
    model, _, _ = load_model(demo_model, numerics="f32")
    z = np.load(FIX / "scan200.npz")
    logits = model.forward(Batch.single(z["tokens"].tolist(), all_logits=True), model.new_cache(1, 256))
    clear = z["margin"] > 0.5
    assert clear.sum() > 100
    assert np.array_equal(logits.argmax(-1)[clear], z["top1"][clear])
