"""A real HTTP server on loopback that receives webhook deliveries, as a lab's would: each
path answers from a script (a status per request, a hang, a redirect, a huge body) and every
request is recorded with its headers and body."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Script:
    """What a path answers, request after request (the last answer repeats)."""

    statuses: list[int] = field(default_factory=lambda: [200])
    hang_s: float = 0.0
    hang_once: bool = False
    """Hang on the first request only (then answer at once)."""
    location: str = ""
    body: bytes = b"ok"


class Receiver:
    def __init__(self) -> None:
        self.scripts: dict[str, Script] = {}
        self.received: list[Received] = []
        self.lock = threading.Lock()
        self.stop_hanging = threading.Event()
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def url(self, path: str, script: Script | None = None) -> str:
        self.scripts[path] = script or Script()
        return self.base + path

    def at(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path]

    def wait_for(self, path: str, count: int, timeout: float = 30) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.at(path)
            if len(found) >= count:
                return found
            time.sleep(0.05)
        return self.at(path)

    def close(self) -> None:
        self.stop_hanging.set()
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with receiver.lock:
                    receiver.received.append(
                        Received(self.path, dict(self.headers.items()), body, time.monotonic())
                    )
                    seen = sum(1 for r in receiver.received if r.path == self.path)
                script = receiver.scripts.get(self.path, Script(statuses=[404]))
                if script.hang_s and (seen == 1 or not script.hang_once):
                    receiver.stop_hanging.wait(script.hang_s)
                status = script.statuses[min(seen, len(script.statuses)) - 1]
                self.send_response(status)
                if script.location:
                    self.send_header("Location", script.location)
                self.send_header("Content-Length", str(len(script.body)))
                self.end_headers()
                # the sender may stop reading, as it should past its limit
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(script.body)

        return Handler


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    try:
        yield server
    finally:
        server.close()
