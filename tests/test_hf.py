"""Getting a model (llamacli/hub.py, `-hf`, `llama pull`, `llama list`) against a fake Hugging
Face hub served on 127.0.0.1 by this file: never the internet.

The fake hub implements the endpoints huggingface_hub uses for a model repository: the file
tree `/api/models/{repo}/tree/{rev}` and `/{repo}/resolve/{rev}/{file}` (HEAD and GET, Range,
ETag, X-Repo-Commit, X-Error-Code on 404). A file can be set to drop the connection half-way
once (resume) or to send a short body (a failed download).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from llamacli.hub import HubError, find_mmproj, parse_repo, pick_file, quant_bits, quant_of
from tests.test_cli import ROOT
from tests.tiny_mmproj import ProjectorSpec, write_projector
from tests.tiny_models import write_tiny_model

REPO = "tester/Tiny-GGUF"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    """repos: {repo_id: {path: bytes}}; drop_once/short: file paths to misbehave on."""

    def __init__(self, repos: dict[str, dict[str, bytes]]) -> None:
        self.repos = repos
        self.drop_once: set[str] = set()
        self.short: set[str] = set()
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range)
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            def _not_found(self, code: str) -> None:
                self.send_response(404)
                self.send_header("X-Error-Code", code)
                self.send_header("Content-Type", "application/json")
                data = json.dumps({"error": code}).encode()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(data)

            def _serve(self, body: bool) -> None:
                path = self.path.split("?", 1)[0]
                hub.requests.append((self.command, path, self.headers.get("Range")))
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/tree/([^/]+)(?:/.*)?|/revision/([^/]+))?/?", path)
                if m:
                    files = hub.repos.get(m.group(1))
                    if files is None:
                        return self._not_found("RepoNotFound")
                    tree = [{"type": "file", "oid": hashlib.sha1(b).hexdigest(), "size": len(b), "path": p} for p, b in files.items()]
                    if m.group(2) is None:  # model info
                        data = json.dumps({"id": m.group(1), "sha": COMMIT, "siblings": [{"rfilename": p} for p in files]}).encode()
                    else:
                        data = json.dumps(tree).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if body:
                        self.wfile.write(data)
                    return
                m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
                if not m:
                    return self._not_found("RepoNotFound")
                files = hub.repos.get(m.group(1))
                if files is None:
                    return self._not_found("RepoNotFound")
                name = m.group(3)
                if name not in files:
                    return self._not_found("EntryNotFound")
                data = files[name]
                start = 0
                rng = self.headers.get("Range")
                if rng and (rm := re.fullmatch(r"bytes=(\d+)-", rng)):
                    start = int(rm.group(1))
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()
                if not body:
                    return
                chunk = data[start:]
                if name in hub.drop_once and start == 0:  # send half, then hang up
                    hub.drop_once.discard(name)
                    self.wfile.write(chunk[: len(chunk) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if name in hub.short:
                    chunk = chunk[: len(chunk) // 2]
                self.wfile.write(chunk)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def gets(self, name: str) -> list[str | None]:
        return [r for (meth, p, r) in self.requests if meth == "GET" and p.endswith("/" + name)]


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    d = tmp_path_factory.mktemp("tiny")
    q8 = write_tiny_model("llama", "Q8_0", d / "q8.gguf").read_bytes()
    q4 = write_tiny_model("llama", "Q4_K", d / "q4.gguf").read_bytes()
    # the tiny models' width (256); its file named Q8_0, the quant nearest the models' (llama.cpp's
    # pick): the F16 one beside it is no projector, so a wrong pick fails to load
    mm = write_projector(ProjectorSpec("hub", "mlp", n_text=256, n_layer=1, image_size=32), d / "mm.gguf").read_bytes()
    return {
        "README.md": b"# tiny\n",
        "mmproj-tiny-F16.gguf": b"GGUF not a projector",
        "mmproj-tiny-Q8_0.gguf": mm,
        "tiny-Q4_K_M.gguf": q4,
        "tiny-Q8_0.gguf": q8,
    }


@pytest.fixture
def hub(tiny_files: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with FakeHub({REPO: dict(tiny_files)}) as h:
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        for var in ("HF_HUB_OFFLINE", "LLAMA_CACHE", "HF_TOKEN", "LLAMA_ARG_HF_REPO", "LLAMA_ARG_HF_FILE"):
            monkeypatch.delenv(var, raising=False)
        yield h


def llama(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "llamacli", *args], capture_output=True, text=True,
                          timeout=timeout, env=full, cwd=ROOT, stdin=subprocess.DEVNULL)


def blobs(tmp_path: Path) -> list[Path]:
    return sorted(p for p in (tmp_path / "hf" / "hub").rglob("*") if p.is_file() and "blobs" in p.parts)


# ---- picking the file (no hub) ---------------------------------------------------------------


def test_parse_repo() -> None:
    assert parse_repo("user/repo") == ("user/repo", None)
    assert parse_repo("user/repo:q8_0") == ("user/repo", "q8_0")
    for bad in ("repo", "a/b/c", "/x", "a/"):
        with pytest.raises(HubError):
            parse_repo(bad)


def test_pick_file_follows_llama_cpp() -> None:
    files = ["README.md", "mmproj-m-F16.gguf", "m-Q4_K_S.gguf", "m-Q4_K_M.gguf", "m-Q8_0.gguf", "m-IQ4_XS.gguf"]
    assert pick_file(files, None) == "m-Q4_K_M.gguf"  # default Q4_K_M
    assert pick_file(files, "q8_0") == "m-Q8_0.gguf"  # case-insensitive
    assert pick_file(files, "Q4_K_S") == "m-Q4_K_S.gguf"
    assert pick_file(files, "IQ4_XS") == "m-IQ4_XS.gguf"
    assert pick_file(["b-Q8_0.gguf", "a-Q8_0.gguf", "mmproj-F16.gguf"], None) == "a-Q8_0.gguf"  # no Q4_K_M: the first
    with pytest.raises(HubError, match=r"no \.gguf file for quant Q4_K .*Q4_K_M"):
        pick_file(files, "Q4_K")  # a whole quant name, not a prefix of one
    with pytest.raises(HubError, match="no .gguf model file"):
        pick_file(["README.md", "mmproj-F16.gguf"], None)
    split = ["big/m-Q4_K_M-00002-of-00002.gguf", "big/m-Q4_K_M-00001-of-00002.gguf"]
    assert pick_file(split, None) == "big/m-Q4_K_M-00001-of-00002.gguf"
    assert quant_of("Qwen3-0.6B-UD-Q4_K_XL.gguf") == "UD-Q4_K_XL" and quant_of("x-bf16.gguf") == "BF16"


# ---- against the fake hub -------------------------------------------------------------------


def test_pull_picks_the_quant_then_tokenize_uses_the_cache(hub: FakeHub, tmp_path: Path) -> None:
    r = llama("pull", f"{REPO}:q8_0")
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip())
    assert path.name == "tiny-Q8_0.gguf" and path.is_file() and str(tmp_path / "hf" / "hub") in str(path)
    assert "tiny-Q8_0.gguf" in r.stderr
    assert len(hub.gets("tiny-Q8_0.gguf")) == 1
    # -hf with the same tag finds it in the cache: no second transfer
    r = llama("tokenize", "-hf", f"{REPO}:Q8_0", "-p", "hello world", "--ids")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("[") and len(hub.gets("tiny-Q8_0.gguf")) == 1
    # the same ids as from the file itself
    r2 = llama("tokenize", "-m", str(path), "-p", "hello world", "--ids")
    assert r2.stdout == r.stdout


def test_hf_without_tag_prefers_q4_k_m_and_runs_complete(hub: FakeHub) -> None:
    r = llama("complete", "-hf", REPO, "--no-mmproj", "-p", "hello", "-n", "3", "--temp", "0", "--numerics", "f32", "--no-display-prompt")
    assert r.returncode == 0, r.stderr
    assert len(hub.gets("tiny-Q4_K_M.gguf")) == 1 and hub.gets("mmproj-tiny-Q8_0.gguf") == []


def test_find_mmproj_follows_llama_cpp() -> None:
    """llama.cpp's find_best_mmproj: a projector in the model's folder or above, the deepest
    folder first, then the quant nearest in bits to the model's; none elsewhere."""
    assert [quant_bits(n) for n in ("m-Q4_K_M.gguf", "mmproj-m-F16.gguf", "m.bf16.gguf", "d/m-Q8_0-00001-of-00002.gguf", "mmproj.gguf")] == [4, 16, 16, 8, 0]
    files = ["m-Q4_K_M.gguf", "m-Q8_0.gguf", "mmproj-F16.gguf", "mmproj-Q8_0.gguf", "mmproj-F32.gguf"]
    assert find_mmproj(files, "m-Q8_0.gguf") == "mmproj-Q8_0.gguf"
    assert find_mmproj(files, "m-F16.gguf") == "mmproj-F16.gguf"
    assert find_mmproj(files, "m-Q4_K_M.gguf") == "mmproj-Q8_0.gguf"  # |4-8| < |4-16|
    nested = ["mmproj-Q8_0.gguf", "big/mmproj-F16.gguf", "other/mmproj-Q4_0.gguf", "big/sub/mmproj-Q4_0.gguf"]
    assert find_mmproj(nested, "big/m-Q4_0.gguf") == "big/mmproj-F16.gguf"  # its own folder beats a nearer quant above
    assert find_mmproj(nested, "other2/m-Q8_0.gguf") == "mmproj-Q8_0.gguf"
    assert find_mmproj(["sub/mmproj-F16.gguf", "m.gguf"], "m.gguf") is None  # below the model: not its
    assert find_mmproj(["m-Q8_0.gguf", "README.md"], "m-Q8_0.gguf") is None


@pytest.fixture
def picture(tmp_path: Path) -> Path:
    from PIL import Image

    path = tmp_path / "pic.png"
    Image.new("RGB", (40, 24), (200, 30, 90)).save(path)
    return path


def test_hf_brings_the_repositorys_projector(hub: FakeHub, picture: Path) -> None:
    """`-hf` fetches the projector llama.cpp would pick and uses it as -mm: an image goes into
    the prompt; --no-mmproj fetches none (and --image is then a usage error); -mm FILE wins."""
    base = ("complete", "-hf", REPO, "--image", str(picture), "-p", "what is it?", "-n", "1", "--temp", "0", "--json")
    r = llama(*base)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["prompt_tokens"].count(-1) > 0  # the image's positions
    assert len(hub.gets("mmproj-tiny-Q8_0.gguf")) == 1 and hub.gets("mmproj-tiny-F16.gguf") == []
    r = llama(*base, env={"HF_HUB_OFFLINE": "1"})  # from the cache: the same projector
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["prompt_tokens"].count(-1) > 0
    r = llama(*base, "--no-mmproj")
    assert r.returncode == 1 and "--image needs a multimodal projector" in r.stderr
    r = llama(*base, "-mm", str(hub_projector_elsewhere(picture.parent)))
    assert r.returncode == 2 and "mmproj (n_embd = 1024)" in r.stderr  # -mm's file, not the hub's
    assert len(hub.gets("mmproj-tiny-Q8_0.gguf")) == 1


def hub_projector_elsewhere(d: Path) -> Path:
    """A projector too wide for the tiny models: loading it is a clear exit 2 naming its width."""
    return write_projector(ProjectorSpec("wide", "mlp", n_text=1024, n_layer=1, image_size=32), d / "wide.gguf")


def test_pull_brings_the_projector(hub: FakeHub) -> None:
    r = llama("pull", f"{REPO}:Q8_0", "--no-mmproj")
    assert r.returncode == 0 and hub.gets("mmproj-tiny-Q8_0.gguf") == []
    # offline, the projector is looked for among the cached files (as llama.cpp): none there yet
    r = llama("complete", "-hf", f"{REPO}:Q8_0", "-p", "hi", "-n", "1", env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    r = llama("complete", "-hf", f"{REPO}:Q8_0", "--image", str(ROOT / "README.md"), "-p", "hi", "-n", "1", env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 1 and "--image needs a multimodal projector" in r.stderr
    r = llama("pull", f"{REPO}:Q8_0")
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()).name == "tiny-Q8_0.gguf"  # stdout: the model's path alone
    line = next(ln for ln in r.stderr.splitlines() if "projector" in ln)
    assert "mmproj-tiny-Q8_0.gguf" in line and Path(line.split()[-1]).is_file()
    assert len(hub.gets("mmproj-tiny-Q8_0.gguf")) == 1


def test_hff_names_the_file(hub: FakeHub) -> None:
    r = llama("pull", REPO, "-hff", "tiny-Q8_0.gguf")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("tiny-Q8_0.gguf")


def test_resume_after_the_connection_drops(hub: FakeHub) -> None:
    # huggingface_hub writes 10 MiB chunks: the file must be larger for a partial one to exist
    big = bytes(range(256)) * (24 * 4096)  # 24 MiB
    hub.repos[REPO]["big-Q2_K.gguf"] = big
    hub.drop_once.add("big-Q2_K.gguf")
    r = llama("pull", REPO, "-hff", "big-Q2_K.gguf")
    assert r.returncode == 0, r.stderr
    ranges = hub.gets("big-Q2_K.gguf")
    assert len(ranges) == 2 and ranges[0] is None
    assert ranges[1] is not None and 0 < int(ranges[1].removeprefix("bytes=").rstrip("-")) <= len(big) // 2
    assert Path(r.stdout.strip()).read_bytes() == big


def test_failed_download_leaves_no_half_file(hub: FakeHub, tmp_path: Path) -> None:
    hub.short.add("tiny-Q8_0.gguf")
    r = llama("pull", f"{REPO}:Q8_0")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "Traceback" not in r.stderr
    assert blobs(tmp_path) == []  # no blob, no .incomplete
    assert not list((tmp_path / "hf" / "hub").rglob("tiny-Q8_0.gguf"))


def test_missing_quant_and_repo_are_clear_errors(hub: FakeHub) -> None:
    r = llama("complete", "-hf", f"{REPO}:Q5_K_M", "-p", "hi")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "no .gguf file for quant Q5_K_M" in r.stderr and "Q8_0" in r.stderr
    r = llama("pull", "tester/nope-GGUF")
    assert r.returncode == 2 and "no such repository" in r.stderr
    r = llama("pull", REPO, "-hff", "nope.gguf")
    assert r.returncode == 2 and "not found" in r.stderr
    r = llama("tokenize", "-hff", "x.gguf", "-p", "hi")
    assert r.returncode == 2 and "--hf-repo" in r.stderr


def test_offline_uses_the_cache(hub: FakeHub) -> None:
    assert llama("pull", f"{REPO}:Q8_0").returncode == 0
    n = len(hub.requests)
    for env, extra in (({"HF_HUB_OFFLINE": "1"}, ()), ({}, ("--offline",))):
        r = llama("tokenize", "-hf", f"{REPO}:Q8_0", "-p", "hi", "--ids", *extra, env=env)
        assert r.returncode == 0, r.stderr
    assert len(hub.requests) == n  # nothing asked of the hub
    r = llama("tokenize", "-hf", f"{REPO}:Q4_K_M", "-p", "hi", env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "quant Q4_K_M" in r.stderr and "cache" in r.stderr and "offline" in r.stderr
    r = llama("tokenize", "-hf", "other/repo", "-p", "hi", env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 2 and "not in the cache" in r.stderr


def test_hub_unreachable_falls_back_to_the_cache(hub: FakeHub) -> None:
    assert llama("pull", f"{REPO}:Q8_0").returncode == 0
    hub.__exit__()
    r = llama("tokenize", "-hf", f"{REPO}:Q8_0", "-p", "hi", "--ids")
    assert r.returncode == 0, r.stderr


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens there once the socket is closed


def test_pull_without_a_network_fails_at_once_in_one_line(hub: FakeHub) -> None:
    """The hub unreachable (HF_ENDPOINT on a closed port) and the model not in the cache: one
    attempt, one line (no retries printed, no advice to go online), exit 2."""
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}"}
    for args in (("pull", f"{REPO}:Q8_0"), ("tokenize", "-hf", REPO, "-p", "hi")):
        r = llama(*args, env=env)
        assert r.returncode == 2 and r.stdout == ""
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: "), r.stderr
        assert "not in the cache" in r.stderr and "cannot be reached" in r.stderr and "online" not in r.stderr
    assert hub.requests == []


def test_llama_cache_and_list(hub: FakeHub, tmp_path: Path, demo_model: str) -> None:
    env = {"LLAMA_CACHE": str(tmp_path / "llama-cache"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    r = llama("list", env=env)  # an empty cache: the demo model (its package's own cache) only
    assert r.returncode == 0 and r.stdout.splitlines()[1:] and all("(demo)" in line for line in r.stdout.splitlines()[1:])
    for tag in ("Q8_0", "Q4_K_M"):
        assert llama("pull", f"{REPO}:{tag}", env=env).returncode == 0
    assert (tmp_path / "llama-cache" / "models--tester--Tiny-GGUF").is_dir() and blobs(tmp_path) == []
    r = llama("list", env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["REPO", "FILE", "SIZE", "TYPE", "ARCH"] and len(lines) == 4
    assert REPO in lines[1] and "tiny-Q4_K_M.gguf" in lines[1] and "llama" in lines[1]
    assert lines[3].startswith("(demo)") and "gemma3" in lines[3]
    r = llama("list", "--json", env=env)
    got = {m["file"]: m for m in json.loads(r.stdout)}
    assert set(got) == {"tiny-Q4_K_M.gguf", "tiny-Q8_0.gguf", Path(demo_model).name}
    assert got["tiny-Q8_0.gguf"]["architecture"] == "llama" and got["tiny-Q8_0.gguf"]["size"] > 0
    assert got["tiny-Q8_0.gguf"]["type"] in ("Q8_0", "?") and got["tiny-Q8_0.gguf"]["source"] == "hub"
    assert got[Path(demo_model).name]["source"] == "demo" and got[Path(demo_model).name]["path"] == demo_model


def test_list_shows_the_models_opened_with_m_until_they_are_gone(hub: FakeHub, tmp_path: Path, demo_model: str) -> None:
    """A file opened with -m is listed (repository `(-m)`, its path); once deleted it is dropped,
    from the listing and from the list kept in the cache folder. The demo model and a hub model
    opened by path are listed once."""
    env = {"LLAMA_CACHE": str(tmp_path / "llama-cache"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    model = tmp_path / "mine.gguf"
    write_tiny_model("llama", "Q8_0", model)
    pulled = llama("pull", f"{REPO}:Q8_0", env=env).stdout.strip()
    for m in (str(model), demo_model, pulled):
        r = llama("complete", "-m", m, "-p", "hi", "-n", "1", env=env)
        assert r.returncode == 0, r.stderr
    kept = tmp_path / "xdg" / "llamacli" / "recent-models.json"
    assert json.loads(kept.read_text())[0] == pulled
    rows = json.loads(llama("list", "--json", env=env).stdout)
    assert sorted(m["source"] for m in rows) == ["demo", "hub", "local"]
    (mine,) = [m for m in rows if m["source"] == "local"]
    assert mine["repo"] == "(-m)" and mine["path"] == str(model) and mine["architecture"] == "llama"
    assert any(line.startswith("(-m)") and str(model) in line for line in llama("list", env=env).stdout.splitlines())
    model.unlink()
    rows = json.loads(llama("list", "--json", env=env).stdout)
    assert sorted(m["source"] for m in rows) == ["demo", "hub"]
    assert str(model) not in json.loads(kept.read_text())


def test_a_split_model_comes_with_all_its_parts(hub: FakeHub, tmp_path: Path) -> None:
    """-hf on a repository whose quant is split in parts: the first part is the model, every
    part is downloaded beside it, and the model opens from the first."""
    from tests.test_quantize_inputs import write_split

    whole = write_tiny_model("llama", "Q8_0", tmp_path / "whole.gguf")
    (tmp_path / "parts").mkdir()
    first = write_split(whole, tmp_path / "parts" / "big-Q8_0", 3)
    hub.repos["tester/Split-GGUF"] = {p.name: p.read_bytes() for p in sorted(first.parent.iterdir())}
    r = llama("pull", "tester/Split-GGUF:Q8_0")
    assert r.returncode == 0, r.stderr
    path = Path(r.stdout.strip())
    assert path.name == "big-Q8_0-00001-of-00003.gguf"
    assert sorted(p.name for p in path.parent.iterdir() if p.suffix == ".gguf") == [
        f"big-Q8_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    r = llama("tokenize", "-hf", "tester/Split-GGUF:Q8_0", "-p", "hello world", "--ids")
    r2 = llama("tokenize", "-m", str(whole), "-p", "hello world", "--ids")
    assert r.returncode == 0 and r.stdout == r2.stdout, r.stderr
    assert all(len(hub.gets(f"big-Q8_0-0000{i}-of-00003.gguf")) == 1 for i in (1, 2, 3))


def test_file_type_names_include_ggml_types_40_to_42() -> None:
    """`llama list`'s type column for NVFP4, Q1_0 and Q2_0 files (llama.h ftypes 39-41; gguf-py
    knows the first two)."""
    from llamacli.hub import file_type_name

    assert [file_type_name(ft) for ft in (39, 40, 41, 99, None)] == ["NVFP4", "Q1_0", "Q2_0", "?", "?"]
    assert [quant_of(f"m-{q}.gguf") for q in ("nvfp4", "Q1_0", "Q2_0")] == ["NVFP4", "Q1_0", "Q2_0"]
