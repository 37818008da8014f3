"""The documentation site in Chromium, served as static files: the home page links each
reader's guide, the API reference renders every path of the schema the code produces with
Swagger UI, and no request leaves 127.0.0.1 (no font, script or style from elsewhere)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Page, Request, expect

from tests.browser.conftest import Shots
from tests.test_docs import build_site, schema_json

pytestmark = [pytest.mark.browser]


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def docs_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    site = build_site(tmp_path_factory.mktemp("docs") / "site")
    handler = functools.partial(QuietHandler, directory=str(site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def requests_of(page: Page) -> list[str]:
    asked: list[str] = []

    def seen(request: Request) -> None:
        asked.append(request.url)

    page.on("request", seen)
    return asked


def elsewhere(asked: list[str]) -> list[str]:
    return [
        url
        for url in asked
        if urlparse(url).scheme not in ("data", "blob") and urlparse(url).hostname != "127.0.0.1"
    ]


def test_the_home_page_links_every_readers_guide_and_asks_no_other_host(
    page: Page, docs_url: str, shots: Shots
) -> None:
    asked = requests_of(page)
    page.goto(f"{docs_url}/")
    expect(page.locator("h1")).to_contain_text("GPU lots")
    for guide in ("Researchers", "Operators", "Labs scripting orders", "Whoever runs it"):
        expect(page.locator("article").get_by_text(guide, exact=True)).to_be_visible()
    expect(page.locator("article img[src$='landing.png']")).to_be_visible()
    page.wait_for_load_state("networkidle")
    shots(page, "home")
    page.locator("article").get_by_role("link", name="The REST API").click()
    expect(page.locator("h1")).to_contain_text("The REST API")
    assert len(asked) > 3
    assert elsewhere(asked) == []


def test_the_api_reference_lists_every_path_of_the_schema_the_code_produces(
    page: Page, docs_url: str, shots: Shots
) -> None:
    asked = requests_of(page)
    page.goto(f"{docs_url}/labs/reference/")
    expect(page.locator("#swagger-ui .info .title")).to_contain_text("GPU lots API")
    summary = page.locator("#swagger-ui .opblock-summary-path")
    expect(summary.first).to_be_visible()
    page.wait_for_load_state("networkidle")
    shown = set(summary.evaluate_all("paths => paths.map(p => p.getAttribute('data-path'))"))
    assert shown == set(schema_json()["paths"])
    shots(page, "api-reference")
    assert f"{docs_url}/api/openapi.json" in asked
    assert elsewhere(asked) == []
