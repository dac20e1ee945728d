"""core/model/kernels/warmup.py: compiling only the kernels a model's weight types need, in
jobs that each reach numba's disk cache as soon as they are compiled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType

from llamacli.core.model.kernels import warmup as W

QT = GGMLQuantizationType


def _names(types: list[GGMLQuantizationType] | None, steps: list[str] | None = None) -> set[str]:
    return {j.name for j in W.plan(types, steps)}


def test_plan_holds_what_the_types_need() -> None:
    """The demo model's types (Q4_K, Q6_K, Q5_0, Q8_0): their decode functions (and those of
    their packed matrices), the decode loop, the one-token layer, both quantizers and
    the kernels every model runs; no token-tiled kernel (every one of them has a 16-row kernel)
    and no float kernel."""
    assert _names([QT.Q4_K, QT.Q6_K, QT.Q5_0, QT.Q8_0]) == {
        "decode Q4_K", "decode Q6_K", "decode Q5_0", "decode Q8_0", "decode packed Q4_K", "decode packed Q6_K", "decode packed Q5_0",
        "decode packed Q8_0", "decode loop",
        "decode step gelu", "decode step silu", "decode step moe", "quantizer q8_0", "quantizer q8_k", "common",
    }
    assert _names([QT.Q4_K]) == {
        "decode Q4_K", "decode packed Q4_K", "decode loop", "decode step gelu", "decode step silu", "decode step moe", "quantizer q8_k", "common",
    }
    assert _names([QT.Q4_K, QT.Q3_K]) == {  # Q3_K has no 16-row kernel: batches take the token-tiled one
        "decode Q4_K", "decode packed Q4_K", "decode Q3_K", "decode loop", "decode step gelu", "decode step silu", "decode step moe", "prefill Q3_K",
        "prefill loop",
        "quantizer q8_k", "common",
    }
    # a model's own kind of one-token step only (the demo model's FFN is GELU-gated), or none
    assert _names([QT.Q4_K], ["gelu"]) == {"decode Q4_K", "decode packed Q4_K", "decode loop", "decode step gelu", "quantizer q8_k", "common"}
    assert _names([QT.Q4_K], []) == {"decode Q4_K", "decode packed Q4_K", "decode loop", "quantizer q8_k", "common"}
    assert _names([QT.F16]) == {"float", "common"}
    assert _names([QT.F16], ["ssm"]) == {"float", "common", "recurrent"}  # a hybrid model's Mamba-2 kernels
    assert _names([QT.F32, QT.Q8_0]) == {
        "float", "decode Q8_0", "decode packed Q8_0", "decode loop", "decode step gelu", "decode step silu", "decode step moe", "quantizer q8_0", "common",
    }
    every = _names(None)
    assert {f"decode {qt.name}" for qt in W.QUANT_FORMATS} <= every and {"prefill Q2_K", "prefill IQ4_XS", "float"} <= every
    assert "prefill Q4_K" not in every


def test_share_gives_each_process_about_the_same_work() -> None:
    jobs = W.plan(None)
    for n in (1, 2, 3):
        lists = W.share(jobs, n)
        assert sorted(j.name for js in lists for j in js) == sorted(j.name for j in jobs)
        costs = [sum(j.cost for j in js) for js in lists]
        assert max(costs) - min(costs) <= max(j.cost for j in jobs)


def _cache_env(cache: Path) -> dict[str, str]:
    return dict(os.environ, NUMBA_CACHE_DIR=str(cache))


@pytest.mark.slow
def test_a_type_compiles_alone(tmp_path: Path) -> None:
    """Q8_0's decode function compiles none of the other types' code (their unpackers and
    decode functions stay out of the cache)."""
    code = "from llamacli.core.model.kernels.qmm import decode; decode.type_function(4)"  # 4: Q8_0 (unpack.py)
    r = subprocess.run([sys.executable, "-c", code], env=_cache_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    cached = " ".join(p.name for p in tmp_path.rglob("*.nbi"))
    assert "decode.decode_rows_q8_0-" in cached
    for other in ("decode_rows_q4_k", "decode_rows_q6_k", "decode_rows_q5_0", "unpack_q4_k", "unpack_q6_k", "unpack_q2_k"):
        assert other not in cached


@pytest.mark.slow
def test_first_run_compiles_once_and_says_so(tmp_path: Path) -> None:
    """With an empty kernel cache, the CLI's model loading compiles the kernels and prints one
    stderr line; the next run loads them from the cache silently."""
    code = "from gguf import GGMLQuantizationType as QT; from llamacli.loading import prepare_kernels; prepare_kernels('ggml', [QT.Q8_0])"
    runs = [subprocess.run([sys.executable, "-c", code], env=_cache_env(tmp_path), capture_output=True, text=True, timeout=600) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr
    assert runs[0].stderr.count("compiling the matmul kernels") == 1
    assert runs[1].stderr == ""


_WARM = (
    "import json; from gguf import GGMLQuantizationType as QT; from llamacli.core.model.kernels.warmup import warmup; "
    "print(json.dumps(warmup([QT.Q4_K, QT.Q6_K, QT.Q8_0]).compiled))"
)


@pytest.mark.slow
def test_a_killed_cold_start_leaves_the_next_less_to_compile(tmp_path: Path) -> None:
    """A cold warmup killed (with its helper processes) as soon as its first decode function
    reached the cache: the next warmup loads what was cached and compiles only the rest."""
    env = _cache_env(tmp_path)
    p = subprocess.Popen([sys.executable, "-c", _WARM], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while not list(tmp_path.rglob("decode.decode_rows_*.nbi")):
            assert p.poll() is None, "the warmup ended before any decode function was cached"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert p.poll() is None, "the warmup ended before it was killed"
        os.killpg(p.pid, signal.SIGKILL)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    survived = {f"decode {f.name.split('.')[1].split('-')[0].removeprefix('decode_rows_').upper()}" for f in tmp_path.rglob("decode.decode_rows_*.nbi")}
    assert survived
    r = subprocess.run([sys.executable, "-c", _WARM], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    compiled = set(json.loads(r.stdout))
    total = {j.name for j in W.plan([QT.Q4_K, QT.Q6_K, QT.Q8_0])}
    assert compiled and compiled < total
    assert not compiled & survived


def test_warmup_matmuls_span_whole_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each type's warm-up matmul is at least one ggml block wide (Q1_0: 128 values; at 32 its
    rows held no bytes and the kernels read past them)."""
    from gguf import GGML_QUANT_SIZES

    seen: list[tuple[GGMLQuantizationType, int, int]] = []
    monkeypatch.setattr(W, "matmul", lambda xa, m: seen.append((m.qtype, m.n_in, m.data.shape[1])))
    for qt in W.QUANT_FORMATS:
        W._matmuls(qt, (1,))
    for qt, n_in, row_bytes in seen:
        qk, size = GGML_QUANT_SIZES[qt]
        assert n_in % qk == 0 and row_bytes == n_in // qk * size > 0, qt.name
