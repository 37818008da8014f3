"""A JSON-RPC proxy in front of the dev chain that behaves like a public RPC provider.

For the tests and the benchmarks only: it enforces what providers enforce on eth_getLogs (a
block range limit and a result limit, answered with the errors they give), and it can be
made to fail (dead: connections refused) or to lie (fabricated logs added to eth_getLogs
answers) — so that the scanner's range splitting, failover and quorum are proved against a
node that behaves like the real ones, not against anvil's generosity.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests


class ProviderProxy:
    """``with ProviderProxy(upstream, max_range=2000) as proxy: proxy.url …``"""

    def __init__(
        self,
        upstream: str,
        *,
        max_range: int | None = 2000,
        max_results: int | None = 10_000,
    ) -> None:
        self.upstream = upstream
        self.max_range = max_range
        self.max_results = max_results
        self.fabricated: list[dict[str, Any]] = []
        """Logs added to every eth_getLogs answer whose filter they match (a lying node)."""
        self.requests = 0
        self.calls: dict[str, int] = {}
        self.refused = 0
        self.ranges: list[tuple[int, int]] = []
        """The block ranges of the eth_getLogs queries it forwarded."""
        self._lock = threading.Lock()
        self._session = requests.Session()
        self._server: ThreadingHTTPServer | None = None
        self.port = 0

    # ------------------------------------------------------------------ life

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ProviderProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                answer = json.dumps(proxy.answer(json.loads(body))).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Dead: the port refuses connections (``start()`` brings it back on the same one)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> ProviderProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ answers

    def answer(self, payload: Any) -> Any:
        with self._lock:
            self.requests += 1
        calls = payload if isinstance(payload, list) else [payload]
        answers: dict[Any, dict[str, Any]] = {}
        forward = []
        for call in calls:
            method = call.get("method", "")
            with self._lock:
                self.calls[method] = self.calls.get(method, 0) + 1
            refusal = self._refusal(call)
            if refusal is not None:
                with self._lock:
                    self.refused += 1
                answers[call.get("id")] = {"jsonrpc": "2.0", "id": call.get("id"), "error": refusal}
            else:
                forward.append(call)
        if forward:
            replies = self._session.post(self.upstream, json=forward, timeout=30).json()
            if not isinstance(replies, list):  # the node refused the whole batch
                return replies
            for reply in replies:
                answers[reply.get("id")] = self._after(forward, reply)
        ordered = [answers[call.get("id")] for call in calls]
        return ordered if isinstance(payload, list) else ordered[0]

    def _refusal(self, call: dict[str, Any]) -> dict[str, Any] | None:
        if call.get("method") != "eth_getLogs":
            return None
        query = call["params"][0]
        low, high = int(query["fromBlock"], 16), int(query["toBlock"], 16)
        if self.max_range is not None and high - low + 1 > self.max_range:
            return {
                "code": -32600,
                "message": f"eth_getLogs is limited to a {self.max_range} block range",
            }
        with self._lock:
            self.ranges.append((low, high))
        return None

    def _after(self, forward: list[dict[str, Any]], reply: dict[str, Any]) -> dict[str, Any]:
        call = next((c for c in forward if c.get("id") == reply.get("id")), None)
        if call is None or call.get("method") != "eth_getLogs" or "result" not in reply:
            return reply
        result = list(reply["result"]) + self._fabricated_for(call["params"][0])
        if self.max_results is not None and len(result) > self.max_results:
            return {
                "jsonrpc": "2.0",
                "id": reply.get("id"),
                "error": {
                    "code": -32005,
                    "message": f"query returned more than {self.max_results} results",
                },
            }
        return {**reply, "result": result}

    def _fabricated_for(self, query: dict[str, Any]) -> list[dict[str, Any]]:
        low, high = int(query["fromBlock"], 16), int(query["toBlock"], 16)
        address = str(query.get("address", "")).lower()
        recipients = {str(t).lower() for t in (query.get("topics") or [None, None, []])[2] or []}
        return [
            log
            for log in self.fabricated
            if low <= int(log["blockNumber"], 16) <= high
            and log["address"].lower() == address
            and (not recipients or log["topics"][2].lower() in recipients)
        ]
