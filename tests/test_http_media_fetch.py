"""Media named by URL (http/media_fetch.py, as llama-server's handle_media): http(s) downloads
from a real HTTP server on 127.0.0.1 (2xx only, bounded in size), file:// read only under
--media-path, with llama.cpp's file-name rules and no way out of the directory."""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamacli.core.multimodal.limits import MediaLimits
from llamacli.http.errors import ApiError
from llamacli.http.media import url_media
from llamacli.http.media_fetch import download, read_media_file, valid_media_name
from tests.audio_files import wav_float32
from tests.tiny_audio import signal

WAV = wav_float32(signal("click")[:, None], 16000)


class _Files(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path == "/a.wav":
            body = WAV
        elif self.path == "/big":
            body = b"\0" * 4096
        elif self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/a.wav")
            self.end_headers()
            return
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_download(site: str) -> None:
    assert download(f"{site}/a.wav", 1 << 20) == WAV
    assert download(f"{site}/moved", 1 << 20) == WAV  # redirects followed, as curl with FOLLOWLOCATION
    assert url_media(f"{site}/a.wav", MediaLimits()).kind == "audio"
    for url, limit in ((f"{site}/nothing.png", 1 << 20), ("http://127.0.0.1:1/a.png", 1 << 20), (f"{site}/big", 1000)):
        with pytest.raises(ApiError) as e:
            download(url, limit)
        assert e.value.status == 400 and e.value.message.startswith("Failed to download image")


def test_file_urls_need_media_path(tmp_path: Path) -> None:
    (tmp_path / "a.wav").write_bytes(WAV)
    with pytest.raises(ApiError, match="file:// URLs are not allowed unless --media-path is specified"):
        url_media("file://a.wav", MediaLimits())
    assert url_media("file://a.wav", MediaLimits(), str(tmp_path)).kind == "audio"
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.wav").write_bytes(WAV)
    assert read_media_file("file://sub/b.wav", str(tmp_path), 1 << 20) == WAV
    assert read_media_file("file:///sub/b.wav", str(tmp_path), 1 << 20) == WAV  # joined: stays inside
    with pytest.raises(ApiError, match="more than 100 bytes"):
        read_media_file("file://a.wav", str(tmp_path), 100)


def test_file_urls_stay_in_media_path(tmp_path: Path) -> None:
    media = tmp_path / "media"
    media.mkdir()
    (tmp_path / "secret.wav").write_bytes(WAV)
    os.symlink(tmp_path / "secret.wav", media / "link.wav")
    os.mkfifo(media / "pipe")
    for name in ("../secret.wav", "sub/../../secret.wav", "link.wav"):
        with pytest.raises(ApiError, match="file path is not allowed"):
            read_media_file(f"file://{name}", str(media), 1 << 20)
    for name in ("missing.png", "pipe", "."):
        with pytest.raises(ApiError) as e:
            read_media_file(f"file://{name}", str(media), 1 << 20)
        assert e.value.status == 400


@pytest.mark.parametrize("name, ok", [
    ("a.png", True), ("dir/a.png", True), ("é.png", True),
    ("", False), (".", False), ("a..b", False), ("a.png.", False), (" a.png", False), ("a.png ", False),
    ("a:b", False), ("a*b", False), ("a?b", False), ('a"b', False), ("a<b", False), ("a|b", False),
    ("a\x01b", False), ("a\x7fb", False), ("a\u0085b", False), ("a\ufeffb", False), ("a\uff0eb", False),
    ("a\u2215b", False), ("x" * 256, False),
])
def test_names_as_llama_cpp(name: str, ok: bool) -> None:
    """fs_validate_filename(name, allow_subdirs=true)'s verdicts (common/common.cpp)."""
    assert valid_media_name(name) is ok
