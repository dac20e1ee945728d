"""Shared test helper: files from llama.cpp as vendored in llama-cpp-python's sdist on PyPI.

The sdist carries llama.cpp's own test material (models/templates/*.jinja, the ggml-vocab-*.gguf
tokenizer vectors, ...). ``llama_cpp_path("models/templates")`` downloads the sdist once with
pip into ``~/.cache/llamacli-tests/sdist`` (``LLAMACLI_TEST_CACHE`` moves the cache), extracts
only the asked-for folder, reuses both afterwards, and skips the calling test with a clear
reason when the sdist cannot be had (offline). ``LLAMACLI_LLAMA_CPP_DIR`` may point at an
already extracted ``vendor/llama.cpp`` folder to skip the download altogether.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

SDIST_VERSION = "0.3.36"
_PACKAGE = "llama-cpp-python"


def cache_root() -> Path:
    """The folder tests cache downloads in."""
    return Path(os.environ.get("LLAMACLI_TEST_CACHE", Path.home() / ".cache" / "llamacli-tests"))


def sdist_archive(version: str = SDIST_VERSION) -> Path:
    """The sdist archive, downloaded with pip on first use; skips the test when that fails."""
    folder = cache_root() / "sdist"
    name = f"llama_cpp_python-{version}.tar.gz"
    if (folder / name).is_file():
        return folder / name
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "--timeout", "30"]
    cmd += [f"{_PACKAGE}=={version}", "-d", str(folder)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot download the {_PACKAGE} {version} sdist from PyPI: {exc}")
    if proc.returncode != 0 or not (folder / name).is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        pytest.skip(f"cannot download the {_PACKAGE} {version} sdist from PyPI (offline?): {tail[0]}")
    return folder / name


def llama_cpp_path(subdir: str, version: str = SDIST_VERSION) -> Path:
    """``vendor/llama.cpp/<subdir>`` from the sdist, extracted once into the cache."""
    local = os.environ.get("LLAMACLI_LLAMA_CPP_DIR")
    if local:
        path = Path(local) / subdir
        if not path.exists():
            pytest.skip(f"LLAMACLI_LLAMA_CPP_DIR has no {subdir}")
        return path
    target = cache_root() / f"llama.cpp-{version}" / subdir
    if target.exists():
        return target
    archive = sdist_archive(version)
    prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/{subdir.strip('/')}/"
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=target.parent))
    try:
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix) and (m.isfile() or m.isdir())]
            if not members:
                pytest.skip(f"the {_PACKAGE} {version} sdist has no vendor/llama.cpp/{subdir}")
            for member in members:
                member.name = member.name[len(prefix) :] or "."
            kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(staging, members=members, **kwargs)
        try:
            staging.rename(target)  # atomic: a concurrent run either wins or finds it done
        except OSError:
            if not target.exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
