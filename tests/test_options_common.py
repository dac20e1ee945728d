"""llamacli/options/common.py: the helpers that read shared option values."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from llamacli.core.errors import InvalidRequest
from llamacli.options.common import lora_specs, read_text_file, want_color


def test_lora_specs_in_order_with_their_scales() -> None:
    assert lora_specs(["a.gguf,b.gguf"], ["c.gguf:0.5", "d:e.gguf:2"]) == [
        ("a.gguf", 1.0), ("b.gguf", 1.0), ("c.gguf", 0.5), ("d:e.gguf", 2.0)]
    with pytest.raises(typer.BadParameter, match="FNAME:SCALE"):
        lora_specs([], ["c.gguf"])


def test_read_text_file_replaces_bad_utf8(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"caf\xc3\xa9 \xff\n")
    assert read_text_file(str(tmp_path / "f"), "-f") == "café \ufffd\n"


def test_a_file_that_cannot_be_read_is_a_usage_error(tmp_path: Path) -> None:
    """A missing -f/-sysf file is a bad option value (exit 1), not a model/load error (2)."""
    with pytest.raises(InvalidRequest, match=r"^--file .*nope\.txt: No such file or directory$") as e:
        read_text_file(str(tmp_path / "nope.txt"), "--file")
    assert e.value.exit_code == 1


def test_want_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert want_color(True) and not want_color(False)
    monkeypatch.setenv("NO_COLOR", "1")
    assert not want_color(None) and want_color(True)
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    assert not want_color(None)
