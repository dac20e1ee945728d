"""core/runtime/slot_store.py: slot files whose name is swapped (a link, nothing, a FIFO, an
empty file) while a request resolves or reads it end in a SlotFileError (HTTP: a 400 in
llama-server's error JSON), never in an OSError or a 500; a save never writes through a link."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from llamacli.core.model.state.kv_cache import KVCache
from llamacli.core.runtime.slot_store import SlotFileError, restore_slot, save_slot, slot_path
from llamacli.http.config import ServerConfig
from tests.http_app_client import make


def _cache() -> KVCache:
    c = KVCache(n_layer=2, n_seq=2, n_ctx=8, n_head_kv=1, head_dim=4, head_dim_v=4)
    c.k[0][0, :, :3] = 1.0
    return c


def _vanishing_link(monkeypatch: pytest.MonkeyPatch, target: Path) -> None:
    """os.path.realpath sees a link (lstat) that is gone when it reads it (readlink): the race
    of a file swapped between a link and nothing during a request."""
    real = os.readlink

    def readlink(path: str | Path, *a: object, **kw: object) -> str:
        if os.fspath(path) == os.fspath(target):
            raise FileNotFoundError(2, "No such file or directory", os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "readlink", readlink)


def test_a_link_that_vanishes_while_resolved_is_a_400(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "s.bin").symlink_to(tmp_path / "elsewhere")
    _vanishing_link(monkeypatch, tmp_path / "s.bin")
    with pytest.raises(SlotFileError, match="changed while it was being opened"):
        slot_path(str(tmp_path), "s.bin")
    c, _ = make(ServerConfig(slot_save_path=str(tmp_path)))
    for action in ("save", "restore"):
        code, d, _ = c.post(f"/slots/0?action={action}", {"filename": "s.bin"})
        assert code == 400, d
        assert d["error"]["type"] == "invalid_request_error" and "s.bin" in d["error"]["message"]


def test_restore_reads_only_a_regular_slot_file(tmp_path: Path) -> None:
    cache = _cache()
    path = str(tmp_path / "s.bin")
    saved = save_slot(cache, 0, [5, 6, 7], path)
    assert saved.n_bytes == os.path.getsize(path)
    tokens, res = restore_slot(cache, 1, path)
    assert tokens == [5, 6, 7] and res.n_bytes == saved.n_bytes and cache.lengths[1] == 3
    np.testing.assert_array_equal(cache.k[0][1, :, :3], cache.k[0][0, :, :3])
    (tmp_path / "empty.bin").write_bytes(b"")
    os.mkfifo(tmp_path / "fifo.bin")  # opening it for reading would block without O_NONBLOCK
    for name, why in (("missing.bin", "not found"), ("empty.bin", "cannot read"), ("fifo.bin", "not found")):
        with pytest.raises(SlotFileError, match=why):
            restore_slot(cache, 1, str(tmp_path / name))


def test_save_refuses_a_link_in_place_of_its_temporary_file(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    slots = tmp_path / "slots"
    slots.mkdir()
    (slots / "s.bin.tmp").symlink_to(outside / "victim")
    with pytest.raises(SlotFileError, match="cannot write"):
        save_slot(_cache(), 0, [1, 2], str(slots / "s.bin"))
    assert not (outside / "victim").exists() and not (slots / "s.bin").exists()
