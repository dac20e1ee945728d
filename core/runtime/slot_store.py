"""Saving a slot's prompt cache (tokens + K/V cells) to a file and restoring it.

File names come from callers (HTTP requests): they must be plain names inside the save
directory, never a path that could leave it.
"""

from __future__ import annotations

import os
import stat
import time
import unicodedata
import zipfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from llamacli.core.errors import InvalidRequest, LlamaError
from llamacli.core.model.state.kv_cache import KVCache

MAGIC = "llamacli-slot-v1"


class SlotFileError(LlamaError):
    """A slot file is missing, unreadable or from another model."""


def validate_filename(name: str) -> str:
    """A plain file name: no directory parts, no '..', no control characters, <= 255 bytes."""
    if not isinstance(name, str) or not name or name != name.strip():
        raise InvalidRequest("invalid filename: empty or with leading/trailing spaces")
    if len(name.encode("utf-8")) > 255:
        raise InvalidRequest("invalid filename: longer than 255 bytes")
    if name in (".", "..") or "/" in name or "\\" in name or name.startswith("."):
        raise InvalidRequest(f"invalid filename {name!r}: it must be a plain name inside the slot save directory")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn") for c in name) or ":" in name:
        raise InvalidRequest(f"invalid filename {name!r}: control or reserved characters")
    return name


def slot_path(directory: str, filename: str) -> str:
    """The file's path inside `directory` (checked to stay inside it). A name that changes while
    it is resolved (a link swapped for nothing) is a SlotFileError, never an OSError."""
    validate_filename(filename)
    try:
        base = os.path.realpath(directory)
        path = os.path.realpath(os.path.join(base, filename))
    except OSError as e:  # realpath reads a link that vanished after it saw it (lstat, then readlink)
        raise SlotFileError(f"slot file {filename!r} changed while it was being opened: {e.strerror or e}") from None
    if os.path.dirname(path) != base:
        raise InvalidRequest(f"invalid filename {filename!r}: it resolves outside the slot save directory")
    return path


@dataclass
class SaveResult:
    n_tokens: int
    n_bytes: int
    ms: float


def save_slot(cache: KVCache, seq: int, tokens: list[int], path: str) -> SaveResult:
    """Write the first len(tokens) cells of sequence `seq` and the tokens themselves."""
    t0 = time.perf_counter()
    n = len(tokens)
    # values typed Any: numpy's stub of savez has a keyword (allow_pickle) that a **dict of arrays would match
    arrays: dict[str, Any] = {"magic": np.array(MAGIC), "tokens": np.asarray(tokens, dtype=np.int32)}
    for layer in range(cache.n_layer):
        arrays[f"k{layer}"] = cache.k[layer][seq, :, :n]
        arrays[f"v{layer}"] = cache.v[layer][seq, :, :n]
    arrays.update({f"state_{k}": v for k, v in cache.seq_state(seq).items()})  # a recurrent state
    tmp = path + ".tmp"
    try:
        # O_NOFOLLOW: a link put in the temporary file's place is refused, never written through
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            n_bytes = f.tell()
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise SlotFileError(f"cannot write slot file {os.path.basename(path)!r}: {e.strerror or e}") from None
    return SaveResult(n, n_bytes, (time.perf_counter() - t0) * 1e3)


def restore_slot(cache: KVCache, seq: int, path: str) -> tuple[list[int], SaveResult]:
    """Load a slot file into sequence `seq`; returns its tokens."""
    t0 = time.perf_counter()
    name = os.path.basename(path)
    try:
        # one open: the file read is the file checked (O_NONBLOCK: a FIFO in its place cannot block)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise SlotFileError(f"slot file {name!r} not found") from None
    except OSError as e:
        raise SlotFileError(f"cannot read slot file {name!r}: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise SlotFileError(f"slot file {name!r} not found")
        tokens, ks, vs, states = _read(f, name, cache)
    n = len(tokens)
    for i in range(cache.n_layer):
        if ks[i].shape != cache.k[i][seq, :, :n].shape or vs[i].shape != cache.v[i][seq, :, :n].shape:
            raise SlotFileError(f"{name!r} was saved from a different model (layer {i} shape {ks[i].shape})")
    try:
        cache.load_seq_state(seq, states)
    except ValueError as e:
        raise SlotFileError(f"{name!r} was saved from a different model ({e})") from None
    for i in range(cache.n_layer):
        cache.k[i][seq, :, :n] = ks[i]
        cache.v[i][seq, :, :n] = vs[i]
    cache.lengths[seq] = n
    return tokens, SaveResult(n, st.st_size, (time.perf_counter() - t0) * 1e3)


def _read(f: Any, name: str, cache: KVCache) -> tuple[list[int], list[np.ndarray], list[np.ndarray], dict[str, np.ndarray]]:
    """The tokens, per-layer K and V arrays and recurrent states of an open slot file."""
    try:
        with np.load(f, allow_pickle=False) as z:
            if "magic" not in z.files or str(z["magic"]) != MAGIC:
                raise SlotFileError(f"{name!r} is not a slot file")
            tokens = z["tokens"].astype(np.int64).tolist()
            n = len(tokens)
            if n > cache.n_ctx:
                raise SlotFileError(f"{name!r} holds {n} tokens, more than the slot's context ({cache.n_ctx})")
            ks = [z[f"k{i}"] for i in range(cache.n_layer)]
            vs = [z[f"v{i}"] for i in range(cache.n_layer)]
            states = {k: z[f"state_{k}"] for k in cache.state_names()}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise SlotFileError(f"cannot read slot file {name!r}: {e}") from None
    return tokens, ks, vs, states
