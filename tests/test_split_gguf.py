"""Models split in parts (`NAME-00001-of-00003.gguf`, llama-gguf-split's format, as the hub
serves big models): opened from the first part as llama.cpp does, the other parts found beside
it; llama.cpp's checks and messages for a wrong part, a missing part or a wrong name. The parts
here are written by tests.test_quantize_inputs.write_split, which llama-quantize itself reads
(the --keep-split runs of tests/test_quantize_options.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from llamacli.core.errors import ModelLoadError
from llamacli.core.model.load import load_model
from llamacli.core.model.state.batch import Batch
from llamacli.core.model.weights.gguf_file import GGUFFile
from llamacli.hub import other_parts

from tests.test_quantize_inputs import write_split
from tests.tiny_models import write_tiny_model

FIXTURES = Path(__file__).parent / "fixtures" / "tiny"


@pytest.fixture
def parts(tmp_path: Path) -> tuple[Path, Path]:
    """(the whole tiny llama F32, the first of its 3 parts)."""
    whole = write_tiny_model("llama", "F32", tmp_path / "whole.gguf")
    return whole, write_split(whole, tmp_path / "m", 3)


def test_parts_open_as_one_model(parts: tuple[Path, Path]) -> None:
    whole, first = parts
    a, b = GGUFFile(whole), GGUFFile(first)
    assert first.name == "m-00001-of-00003.gguf"
    assert list(b.tensors) == list(a.tensors)
    assert {t.split for t in b.tensors.values()} == {0, 1, 2}
    for name in a.tensors:
        assert np.array_equal(a.raw(name), b.raw(name)), name
    assert [k for k in b.metadata if not k.startswith("split.")] == list(a.metadata)
    for k, v in a.metadata.items():
        assert np.array_equal(np.asarray(b.metadata[k], dtype=object), np.asarray(v, dtype=object)), k
    assert b.metadata["split.count"] == 3 and b.file_size > a.file_size


def test_split_model_logits_are_llama_cpps(parts: tuple[Path, Path]) -> None:
    z = np.load(FIXTURES / "llama-F32.npz")
    model, _, _ = load_model(str(parts[1]), numerics="ggml")
    logits = model.forward(Batch.single(z["tokens"].tolist(), all_logits=True), model.new_cache(1, int(z["n_ctx"])))
    assert np.abs(logits - z["logits"]).max() < 0.01


def test_a_later_part_is_refused(parts: tuple[Path, Path]) -> None:
    with pytest.raises(ModelLoadError, match="illegal split file idx: 1, model must be loaded with the first split"):
        GGUFFile(parts[1].with_name("m-00002-of-00003.gguf"))


def test_a_missing_part_is_named(parts: tuple[Path, Path]) -> None:
    parts[1].with_name("m-00003-of-00003.gguf").unlink()
    with pytest.raises(ModelLoadError, match="failed to load GGUF split from .*m-00003-of-00003.gguf"):
        GGUFFile(parts[1])


def test_a_renamed_first_part_is_refused(parts: tuple[Path, Path]) -> None:
    renamed = parts[1].with_name("renamed.gguf")
    shutil.copy(parts[1], renamed)
    with pytest.raises(ModelLoadError, match="invalid split file name"):
        GGUFFile(renamed)


def test_a_part_from_another_split_is_refused(parts: tuple[Path, Path], tmp_path: Path) -> None:
    """Part 2 replaced by part 3 (a mixed-up download): its split.no says 2, not 1."""
    p2, p3 = parts[1].with_name("m-00002-of-00003.gguf"), parts[1].with_name("m-00003-of-00003.gguf")
    shutil.copy(p3, p2)
    with pytest.raises(ModelLoadError, match=r"invalid split file idx: 2 \(file: .*m-00002-of-00003.gguf\), expected 1"):
        GGUFFile(parts[1])


def test_hub_other_parts() -> None:
    assert other_parts("dir/M-Q4_K_M-00001-of-00003.gguf") == [
        "dir/M-Q4_K_M-00002-of-00003.gguf", "dir/M-Q4_K_M-00003-of-00003.gguf"]
    assert other_parts("M-00002-of-00003.gguf") == [] and other_parts("M-Q4_K_M.gguf") == []
