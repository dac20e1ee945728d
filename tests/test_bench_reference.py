"""`llama bench`'s llama.cpp column runs in a child process: a reference that crashes (as
llama-cpp-python does on CPUs whose AMX state the OS does not grant) costs only its column."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from llamacli import bench_reference


def _fake_python(tmp_path: Path, body: str) -> str:
    exe = tmp_path / "fake-python"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_child_crash_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_reference.sys, "executable", _fake_python(tmp_path, "kill -SEGV $$"))
    run = bench_reference.run_in_child("m.gguf", 8, 2, [], 1, 1, "auto")
    assert run.results is None and "crashed" in run.missing_reason and "SIGSEGV" in run.missing_reason


def test_child_results_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = ('{"results": [{"test": "pp8", "n_tokens": 8, "seconds": 0.5}, {"test": "tg2", "n_tokens": 2, "seconds": 0.25}],'
           ' "rss": 3000, "rss_file": 2000}')
    monkeypatch.setattr(bench_reference.sys, "executable", _fake_python(tmp_path, f"echo '{out}'"))
    run = bench_reference.run_in_child("m.gguf", 8, 2, [], 1, 1, "auto")
    assert run.results is not None and [r.tokens_per_second for r in run.results] == [16.0, 8.0]
    assert (run.rss_bytes, run.rss_file_bytes) == (3000, 2000)  # its resident after loading, for the header
    monkeypatch.setattr(bench_reference.sys, "executable", _fake_python(tmp_path, "echo boom >&2; exit 3"))
    run = bench_reference.run_in_child("m.gguf", 8, 2, [], 1, 1, "auto")
    assert run.results is None and "status 3: boom" in run.missing_reason


@pytest.mark.slow
def test_bench_prints_own_figures_when_reference_crashes(
    demo_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from llamacli.benchmark import run_bench

    monkeypatch.setattr(bench_reference, "available", lambda: True)
    monkeypatch.setattr(bench_reference.sys, "executable", _fake_python(tmp_path, "kill -SEGV $$"))
    run_bench(demo_model, 8, 2, [], 1, True, "ggml", 1)
    out = capsys.readouterr().out
    assert "crashed" in out and "SIGSEGV" in out and "figures are missing" in out
    assert "pp8" in out and "tg2" in out
