"""Media named by URL in a request, fetched as llama-server's `handle_media` does:

- `http://` / `https://`: downloaded (at most 10 MB or the server's --image-max-bytes, whichever
  is smaller, within 10 s; redirects followed); a failed download is "Failed to download image";
- `file://NAME`: read from under `--media-path` only (refused without it), NAME checked with
  llama.cpp's `fs_validate_filename` rules (subdirectories allowed, no `..`, no control or
  reserved characters) and, beyond llama.cpp, resolved so that a link cannot lead out of the
  directory.

Both run in a worker thread (the routes build prompts off the event loop).
"""

from __future__ import annotations

import os
import stat
import time
import urllib.error
import urllib.request

from llamacli.http.errors import bad_request

DOWNLOAD_MAX_BYTES = 10 * 1024 * 1024  # llama-server's common_remote_params.max_size for media
DOWNLOAD_TIMEOUT_S = 10.0  # its common_remote_params.timeout
_CHUNK = 64 * 1024
_FORBIDDEN = set(':*?"<>|') | {"\uff0e", "\u2215", "\u2216", "\ufffd", "\ufeff"}


def is_remote(url: str) -> bool:
    return url.startswith(("http://", "https://"))


def download(url: str, max_bytes: int) -> bytes:
    """The body of a 2xx answer to GET `url`, read until `max_bytes` (more is a 400) or the
    deadline (10 s for the whole transfer, as curl's CURLOPT_TIMEOUT)."""
    limit = min(max_bytes, DOWNLOAD_MAX_BYTES)
    deadline = time.monotonic() + DOWNLOAD_TIMEOUT_S
    request = urllib.request.Request(url, headers={"User-Agent": "llamacli"})
    try:
        with urllib.request.urlopen(request, timeout=DOWNLOAD_TIMEOUT_S) as answer:
            if not 200 <= answer.status < 300:
                raise bad_request("Failed to download image")
            body = bytearray()
            while chunk := answer.read(_CHUNK):
                body += chunk
                if len(body) > limit:
                    raise bad_request(f"Failed to download image: more than {limit} bytes")
                if time.monotonic() > deadline:
                    raise bad_request("Failed to download image: timed out")
            return bytes(body)
    except (urllib.error.URLError, OSError, ValueError):  # HTTPError (4xx/5xx) is a URLError
        raise bad_request("Failed to download image") from None


def valid_media_name(name: str) -> bool:
    """llama.cpp's fs_validate_filename(name, allow_subdirs=true): a non-empty path of at most
    255 bytes without control characters, reserved characters (`: * ? " < > |` and their
    Unicode look-alikes), surrogates, BOM or U+FFFD; no leading/trailing space, no trailing
    '.', no '..' anywhere, not '.'."""
    if not name or len(name.encode("utf-8", "surrogatepass")) > 255:
        return False
    for c in name:
        o = ord(c)
        if o <= 0x1F or 0x7F <= o <= 0x9F or 0xD800 <= o <= 0xDFFF or c in _FORBIDDEN:
            return False
    if name[0] == " " or name[-1] in " .":
        return False
    return ".." not in name and name != "."


def read_media_file(url: str, media_path: str | None, max_bytes: int) -> bytes:
    """The bytes of `file://NAME` under `media_path` (400s in llama-server's words otherwise)."""
    if not media_path:
        raise bad_request("file:// URLs are not allowed unless --media-path is specified")
    name = url[len("file://"):]
    if not valid_media_name(name):
        raise bad_request(f"file path is not allowed: {name}")
    base = os.path.realpath(media_path)
    path = os.path.realpath(base + os.sep + name)  # llama.cpp joins media_path + name: "/x" stays inside
    if os.path.commonpath([base, path]) != base:
        raise bad_request(f"file path is not allowed: {name}")
    try:  # O_NONBLOCK: a FIFO put there opens at once (and is refused) instead of waiting for a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        raise bad_request(f"file does not exist or cannot be opened: {name}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise bad_request(f"file does not exist or cannot be opened: {name}")
        if info.st_size > max_bytes:
            raise bad_request(f"a medium of more than {max_bytes} bytes")
        return f.read(max_bytes + 1)
