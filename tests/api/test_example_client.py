"""examples/book_and_pay.py's client waits out a throttled request (429 with Retry-After)
instead of dying: a slow validation run once made its status polling hit the API's throttle
and the example stopped with "HTTP Error 429" in a thread."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from tests.api.test_provisioning_api import load_example


def serve(answers: list[tuple[int, dict[str, str], dict[str, Any]]]) -> tuple[str, list[str]]:
    """A server answering each request with the next of ``answers``; returns its URL and the
    paths it was asked for."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            status, headers, body = answers.pop(0)
            payload = json.dumps(body).encode()
            self.send_response(status)
            for name, value in {**headers, "Content-Type": "application/json"}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}", asked


def test_a_throttled_request_is_sent_again_after_the_wait_the_server_asks_for() -> None:
    client = load_example()
    throttled = (429, {"Retry-After": "0"}, {"code": "throttled", "detail": "Slow down."})
    url, asked = serve([throttled, throttled, (200, {}, {"status": "active"})])
    assert client.call(f"{url}/orders/X/provisioning/", "token") == {"status": "active"}
    assert asked == ["/orders/X/provisioning/"] * 3


def test_another_error_still_ends_the_script_with_the_servers_words() -> None:
    client = load_example()
    url, _ = serve([(404, {}, {"code": "not_found", "detail": "No such order."})])
    with pytest.raises(SystemExit, match=r"404 not_found: No such order\."):
        client.call(f"{url}/orders/Y/", "token")
