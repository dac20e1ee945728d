"""core/model/families/smollm3.py (smollm3: SmolLM3): every fourth layer attends without rope,
and a context shift turns the keys of every layer as llama.cpp's K-shift does. The logits and
greedy tokens against llama.cpp's are in test_parity_tiny.py (smollm3 F32 and Q8_0)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llamacli.core.model.families.smollm3 import SmolLM3Model
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from tests.tiny_models import write_tiny_model

FIXTURES = Path(__file__).parent / "fixtures" / "tiny"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Any:
    m, _, _ = load_model(write_tiny_model("smollm3", "F32", tmp_path_factory.mktemp("s") / "s.gguf"), numerics="ggml")
    return m


def test_every_fourth_layer_has_no_rope(model: Any) -> None:
    """Layer 3 of 4 takes the second rope, of angle 0 (no window); roping it as the others gives
    logits far from llama.cpp's."""
    assert isinstance(model, SmolLM3Model)
    a = model.args
    assert a.swa_layers == (False, False, False, True) and a.sliding_window is None
    assert a.rope_swa is not None and a.rope_swa.scale == 0.0 and a.rope.scale == 1.0 and not a.rope.neox
    z = np.load(FIXTURES / "smollm3-F32.npz")
    toks = z["tokens"].tolist()
    ours = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 128))
    assert np.abs(ours - z["logits"]).max() < 0.01
    roped = replace(a, swa_layers=(False,) * 4)
    model.args = roped
    try:
        every = model.forward(Batch.single(toks, all_logits=True), model.new_cache(1, 128))
    finally:
        model.args = a
    assert np.abs(every - z["logits"]).max() > 0.1


def _after_shift(model: Any, z: Any) -> np.ndarray:
    toks, k, d = z["tokens"].tolist(), int(z["n_keep"]), int(z["n_discard"])
    n = len(toks) - z["logits"].shape[0]
    cache = model.new_cache(1, 128)
    model.forward(Batch.single(toks[:n]), cache)
    model.shift_cache(cache, 0, k, d)
    return np.stack([model.forward(Batch.single([t], start_pos=n - d + i), cache)[-1] for i, t in enumerate(toks[n:])])


def test_context_shift_turns_the_keys_of_every_layer(model: Any) -> None:
    """llama-server's shift (scripts/oracle_fixtures.py make_hybrid_shift): llama.cpp's K-shift
    turns the cached keys of the layers without rope too, and the next decodes give its logits;
    leaving those keys as they are would not."""
    z = np.load(FIXTURES / "smollm3-F32-shift.npz")
    assert np.abs(_after_shift(model, z) - z["logits"]).max() < 0.01
    own = SmolLM3Model.shift_rope
    try:
        SmolLM3Model.shift_rope = lambda self, il, ropes: ropes[1] if self.args.swa_layers[il] else ropes[0]  # type: ignore[method-assign]
        assert np.abs(_after_shift(model, z) - z["logits"]).max() > 0.05
    finally:
        SmolLM3Model.shift_rope = own  # type: ignore[method-assign]
