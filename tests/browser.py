"""A real headless browser for the console tests: Debian's chromium driven by Playwright through its executable
path (no browser download). Every page is watched: a request to any origin but the appliance's, or an error in
the page's console, fails the test that opened it."""
from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

_FAILED_LOAD = re.compile(r"Failed to load resource: the server responded with a status of (\d+)")
SCREENSHOTS = os.environ.get("APPLIANCE_SCREENSHOTS")  # a folder (docs/screenshots for the README's pictures)


def system_browser(names: tuple[str, ...], package: str) -> str:
    """The first of `names` on PATH; missing, the test skips (and fails under CI, which `just browser` set up)."""
    path = next((p for p in map(shutil.which, names) if p), None)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{package} is not installed; `just browser` installs it with apt-get")
        pytest.skip(f"Debian's {package} is not installed (apt-get install {package})")
    return path


def chromium_path() -> str:
    return system_browser(("chromium", "chromium-browser"), "chromium")


@contextmanager
def launched() -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # --no-sandbox: CI and these machines run as root, where chromium's sandbox cannot start
        browser = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


class WatchedPage:
    """A page in a fresh context (its own sessionStorage: a key typed in one test is not in the next)."""

    def __init__(self, browser, origin: str, viewport: dict | None = None):
        self.origin = origin
        self.context = browser.new_context(viewport=viewport or {"width": 1280, "height": 900},
                                           accept_downloads=True)
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.requests: list[str] = []
        self.posts: list[tuple[str, str | None]] = []
        self.errors: list[str] = []
        self.page.on("request", self._request)
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))

    def _request(self, request) -> None:
        self.requests.append(request.url)
        if request.method == "POST":
            self.posts.append((request.url, request.post_data if "json" in (request.headers.get(
                "content-type") or "") else None))

    def open(self, view: str = "") -> None:
        self.page.goto(f"{self.origin}/" + (f"#{view}" if view else ""))

    def check(self, expected_statuses: tuple[int, ...] = ()) -> None:
        """Nothing left this origin; no console error but a refusal the test caused on purpose."""
        foreign = [u for u in self.requests if not (u.startswith(self.origin + "/") or u.startswith(("blob:",
                                                                                                     "data:")))]
        assert not foreign, f"the page sent requests elsewhere: {foreign}"
        unexpected = [e for e in self.errors
                      if not ((m := _FAILED_LOAD.search(e)) and int(m.group(1)) in expected_statuses)]
        assert not unexpected, f"console errors: {unexpected}"

    def shot(self, name: str, folder: Path) -> Path:
        target = Path(SCREENSHOTS) if SCREENSHOTS else folder
        target.mkdir(parents=True, exist_ok=True)
        path = target / f"console-{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 5000, "a blank page makes a tiny PNG"
        return path

    def close(self) -> None:
        self.context.close()


@contextmanager
def watched(browser, origin: str, expected_statuses: tuple[int, ...] = (), viewport: dict | None = None):
    page = WatchedPage(browser, origin, viewport)
    try:
        yield page
        page.check(expected_statuses)
    finally:
        page.close()
