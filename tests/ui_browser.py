"""Headless Chromium for the web UI tests: Debian's `chromium` package driven by Playwright
for Python (the browser binary comes from apt, never from `playwright install`).

Tests that use the `browser` fixture skip, naming the reason, only when no Chromium binary is
installed; `.ci/run` installs it, so in CI they always run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

LAUNCH_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def chromium_path() -> str | None:
    """$CHROMIUM, else Debian's /usr/bin/chromium, else chromium on PATH."""
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


# One Playwright instance and browser per test module: Playwright's sync API keeps an asyncio
# event loop running in the main thread while it is open, and asyncio.run() in any later test
# (tests/test_http_stream.py and others) would fail beside it.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    exe = chromium_path()
    if exe is None:
        pytest.skip("no Chromium binary (apt-get install chromium, or set CHROMIUM=/path/to/chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=LAUNCH_ARGS)
        try:
            yield b
        finally:
            b.close()


class PageErrors:
    """Uncaught page errors and console errors of one page (a test asserts there are none)."""

    def __init__(self, page: Any) -> None:
        self.errors: list[str] = []
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)


@pytest.fixture()
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context (empty localStorage) and page; dialogs (confirm) are accepted."""
    ctx = browser.new_context(viewport={"width": 1200, "height": 800})
    ctx.set_default_timeout(20_000)
    pg = ctx.new_page()
    pg.on("dialog", lambda d: d.accept())
    pg.errors = PageErrors(pg)
    try:
        yield pg
    finally:
        ctx.close()
