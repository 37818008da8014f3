"""Real headless Chromium (Debian's package) driven by Playwright, against a live server.

Screenshots of every step land in test-artifacts/browser/ (CI keeps them as artefacts); the
ones the documentation shows are also written to docs/screenshots/ (``shots(..., doc=...)``),
so each browser run refreshes them and none is made by hand.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

# Playwright's sync API runs an event loop in the test's thread; the ORM calls the tests
# make are still plain synchronous code.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"
DOC_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
"""The documentation's screenshots (committed): each written by a ``shots(..., doc=NAME)``."""
DESKTOP = {"width": 1280, "height": 1800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `apt-get install chromium` (make test does it)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield launched
        launched.close()


class Shots:
    """Numbered screenshots for one test."""

    def __init__(self, folder: Path) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        self.folder = folder
        self.count = 0

    def __call__(self, page: Page, name: str, doc: str | None = None) -> None:
        """The page as it is now, numbered in this test's folder; with ``doc``, also as
        docs/screenshots/<doc>.png, the picture the documentation shows."""
        self.count += 1
        image = page.screenshot(path=str(self.folder / f"{self.count:02d}-{name}.png"))
        if doc is not None:
            assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", doc), f"{doc!r}: a-z, 0-9 and dashes"
            DOC_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            (DOC_SCREENSHOTS / f"{doc}.png").write_bytes(image)


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Shots:
    return Shots(ARTIFACTS / re.sub(r"[^\w.-]+", "_", request.node.name))


def _watch_the_policy(page: Page) -> list[str]:
    """Every Content-Security-Policy violation Chromium reports on this page (it logs each
    one to the console): a test ends with none, or it fails naming them."""
    violations: list[str] = []

    def seen(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            violations.append(message.text)

    page.on("console", seen)
    return violations


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=DESKTOP)  # type: ignore[arg-type]
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    violations = _watch_the_policy(opened)
    yield opened
    context.close()
    assert violations == [], "Content-Security-Policy violations"


@pytest.fixture
def phone(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)  # type: ignore[arg-type]
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    violations = _watch_the_policy(opened)
    yield opened
    context.close()
    assert violations == [], "Content-Security-Policy violations"
