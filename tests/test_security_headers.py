"""What every response tells the browser (issue 10, item 11): a Content-Security-Policy that
allows only this site, no-store on the pages that show a secret, and a /healthz that does
not call the chain node for every stranger who asks."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client

from accounts.models import User
from payments.models import Chain
from reservations.models import Order
from reservations.services import place_order
from tests.conftest import Inventory, RequestFactory

ROOT = Path(__file__).resolve().parents[1]
STRICT = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "object-src": "'none'",
    "frame-ancestors": "'none'",
    "form-action": "'self'",
    "base-uri": "'none'",
}


def policy(response: Any) -> dict[str, str]:
    header = response.headers.get("Content-Security-Policy", "")
    parts = [part.strip().split(None, 1) for part in header.split(";") if part.strip()]
    return {part[0]: part[1] if len(part) > 1 else "" for part in parts}


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/en/", "/en/book/", "/api/v1/kinds/", "/healthz", "/nowhere"])
def test_every_response_carries_a_strict_content_security_policy(
    client: Client, inventory: Inventory, path: str
) -> None:
    found = policy(client.get(path))
    for directive, value in STRICT.items():
        assert found.get(directive) == value, (path, directive, found)


@pytest.mark.django_db
def test_the_admin_keeps_scripts_strict_and_only_relaxes_inline_styles(client: Client) -> None:
    found = policy(client.get("/admin/login/"))
    assert found["script-src"] == "'self'"
    assert found["style-src"] == "'self' 'unsafe-inline'"
    assert found["frame-ancestors"] == "'none'"


@pytest.mark.django_db
def test_the_api_docs_load_under_the_strict_policy(client: Client) -> None:
    response = client.get("/api/v1/docs/")
    html = response.content.decode()
    assert policy(response)["script-src"] == "'self'"
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "inline script in the docs"
    assert "<style" not in html
    for src in re.findall(r'<script[^>]*src="([^"]+)"', html):
        assert src.startswith("/"), src


def test_no_page_template_has_an_inline_script_style_or_handler() -> None:
    """A strict policy blocks them: scripts and styles live in static/, bars are SVG."""
    offenders = []
    for template in (ROOT / "templates").rglob("*.html"):
        relative = template.relative_to(ROOT / "templates")
        if relative.parts[0] in {"emails", "admin"}:  # mail clients; admin has its own rule
            continue
        text = template.read_text()
        if re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text) or "<style" in text:
            offenders.append(f"{relative}: inline <script> or <style>")
        if re.search(r"\sstyle=", text) or re.search(r"\son[a-z]+=", text):
            offenders.append(f"{relative}: style= or on…= attribute")
    assert offenders == []


# --------------------------------------------------------------------------- no-store


def assert_not_stored(response: Any) -> None:
    directives = {d.strip() for d in response.headers.get("Cache-Control", "").split(",")}
    assert {"no-store", "private"} <= directives, response.headers.get("Cache-Control")


@pytest.fixture
def order(inventory: Inventory, make_request: RequestFactory) -> Order:
    return place_order(make_request())


@pytest.mark.django_db
def test_the_secret_order_page_and_its_fragments_are_never_stored(
    client: Client, order: Order
) -> None:
    base = f"/en/orders/{order.reference}/{order.secret}"
    for path in (f"{base}/", f"{base}/payment/", f"{base}/live/"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert_not_stored(response)


@pytest.mark.django_db
def test_the_page_showing_a_new_api_token_is_never_stored(client: Client) -> None:
    client.force_login(User.objects.create_user("ada@example.org"))
    response = client.post("/en/account/tokens/", {"name": "pipeline"})
    assert "gl_" in response.content.decode()
    assert_not_stored(response)


@pytest.mark.django_db
def test_api_answers_to_a_token_are_never_stored(client: Client) -> None:
    from api.models import ApiToken

    token = ApiToken.issue(User.objects.create_user("ada@example.org"), "t")[1]
    response = client.get("/api/v1/orders/", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    assert_not_stored(response)


@pytest.mark.django_db
def test_public_pages_stay_cacheable(client: Client, inventory: Inventory) -> None:
    assert "no-store" not in client.get("/en/").headers.get("Cache-Control", "")


# --------------------------------------------------------------------------- /healthz


class _Node(BaseHTTPRequestHandler):
    calls = 0

    def do_POST(self) -> None:
        type(self).calls += 1
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        body = json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "result": "0x7a69"})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def node() -> Iterator[type[_Node]]:
    """A JSON-RPC node on the loopback that counts how often it is asked."""
    _Node.calls = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Node)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Node.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    try:
        yield _Node
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.django_db
def test_healthz_asks_the_chain_node_at_most_once_per_interval(
    client: Client, node: type[_Node]
) -> None:
    cache.clear()
    Chain.objects.create(chain_id=31337, name="Local", rpc_url=node.url)  # type: ignore[attr-defined]
    for _ in range(20):
        response = client.get("/healthz")
        assert response.status_code == 200, response.content
        assert response.json()["chain 31337"] == "ok"
    assert node.calls == 1
