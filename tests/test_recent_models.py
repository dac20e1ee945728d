"""llamacli/recent_models.py: the model files opened with -m lately, for `llama list`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llamacli import recent_models as R


@pytest.fixture(autouse=True)
def _cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def _model(tmp_path: Path, name: str) -> str:
    p = tmp_path / name
    p.write_bytes(b"GGUF")
    return str(p)


def test_newest_first_once_each_and_capped(tmp_path: Path) -> None:
    a, b = _model(tmp_path, "a.gguf"), _model(tmp_path, "b.gguf")
    R.remember(a)
    R.remember(b)
    R.remember(a)
    assert R.recent() == [a, b]
    assert R.list_path() == tmp_path / "xdg" / "llamacli" / "recent-models.json"
    many = [_model(tmp_path, f"m{i}.gguf") for i in range(R.MAX_ENTRIES + 5)]
    for m in many:
        R.remember(m)
    assert R.recent() == many[::-1][: R.MAX_ENTRIES]


def test_relative_paths_are_kept_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _model(tmp_path, "rel.gguf")
    monkeypatch.chdir(tmp_path)
    R.remember("rel.gguf")
    assert R.recent() == [str(tmp_path / "rel.gguf")]


def test_missing_files_are_dropped_from_the_list(tmp_path: Path) -> None:
    a, b = _model(tmp_path, "a.gguf"), _model(tmp_path, "b.gguf")
    R.remember(a)
    R.remember(b)
    Path(b).unlink()
    assert R.recent() == [a]
    assert json.loads(R.list_path().read_text()) == [a]


def test_written_atomically_and_a_damaged_list_is_empty(tmp_path: Path) -> None:
    a = _model(tmp_path, "a.gguf")
    R.remember(a)
    assert [p.name for p in R.list_path().parent.iterdir()] == ["recent-models.json"]  # no temporary file left
    R.list_path().write_text("{not json")
    assert R.recent() == []
    R.remember(a)
    assert R.recent() == [a]


def test_an_unwritable_cache_folder_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # a file, not a folder: nothing can be written
    R.remember(_model(tmp_path, "a.gguf"))
    assert R.recent() == []
