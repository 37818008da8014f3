"""The one place that talks to EVM nodes: plain JSON-RPC over HTTP, batched where it helps.

Every HTTP request is counted (``requests_made``), so the scanner's cost can be measured:
a batch of N calls is one request. A node that cannot be reached or answers garbage raises
``RpcUnavailable``; callers retry later, the database keeps what was already known.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import requests

TRANSFER_TOPIC = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"
"""keccak256("Transfer(address,address,uint256)")."""
LATEST_ROUND_DATA = "0xfeaf968c"  # latestRoundData()
DECIMALS = "0x313ce567"  # decimals()
SYMBOL = "0x95d89b41"  # symbol()


class RpcUnavailable(Exception):
    """The node did not answer usefully; try again later."""


class RpcError(Exception):
    """The node answered with a JSON-RPC error."""


class RangeTooLarge(RpcError):
    """The node refused an eth_getLogs query as too large (too many blocks or results): the
    caller splits the range (or the addresses) and asks again."""


TOO_LARGE_HINTS = (
    "range",
    "too many",
    "more than",
    "limit exceeded",
    "too large",
    "exceed",
    "response size",
)
"""Words providers use when a logs query is too big (Infura: "query returned more than
10000 results"; Alchemy: "block range"; QuickNode: "eth_getLogs is limited to a 10,000
range"; geth: "exceed maximum block range"; -32005 and -32602 codes)."""


def _is_too_large(error: dict[str, Any]) -> bool:
    message = str(error.get("message", "")).lower()
    return error.get("code") == -32005 or any(hint in message for hint in TOO_LARGE_HINTS)


@dataclass(frozen=True)
class LogFilter:
    """Transfer logs of ``token`` to any of ``recipients`` in [from_block, to_block]."""

    token: str
    recipients: tuple[str, ...]
    from_block: int
    to_block: int

    def params(self) -> list[Any]:
        recipients = ["0x" + "0" * 24 + r[2:].lower() for r in self.recipients]
        return [
            {
                "address": self.token,
                "fromBlock": hex(self.from_block),
                "toBlock": hex(self.to_block),
                "topics": [TRANSFER_TOPIC, None, recipients],
            }
        ]


@dataclass(frozen=True)
class Log:
    address: str
    topics: list[str]
    data: str
    block_number: int
    block_hash: str
    tx_hash: str
    log_index: int

    @property
    def to_address(self) -> str:
        return "0x" + self.topics[2][-40:]

    @property
    def from_address(self) -> str:
        return "0x" + self.topics[1][-40:]

    @property
    def amount(self) -> int:
        return int(self.data, 16)


class RpcClient:
    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url
        self.timeout = timeout
        self.requests_made = 0
        self._ids = itertools.count(1)
        self._session = requests.Session()

    # ------------------------------------------------------------------ transport

    def _post(self, payload: Any) -> Any:
        self.requests_made += 1
        try:
            response = self._session.post(self.url, json=payload, timeout=self.timeout)
            response.raise_for_status()
            return response.json()
        except (requests.RequestException, ValueError) as exc:
            raise RpcUnavailable(f"{self.url}: {type(exc).__name__}") from exc

    def call(self, method: str, params: list[Any]) -> Any:
        reply = self._post(
            {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        )
        if "error" in reply:
            raise RpcError(f"{method}: {reply['error'].get('message', reply['error'])}")
        return reply.get("result")

    def batch(self, calls: list[tuple[str, list[Any]]]) -> list[Any]:
        """Several calls in one HTTP request; results in the order of ``calls``."""
        if not calls:
            return []
        first = next(self._ids)
        payload = [
            {"jsonrpc": "2.0", "id": first + i, "method": method, "params": params}
            for i, (method, params) in enumerate(calls)
        ]
        self._ids = itertools.count(first + len(calls))
        replies = self._post(payload)
        if not isinstance(replies, list):
            raise RpcUnavailable(f"{self.url}: a batch answered with {type(replies).__name__}")
        by_id = {reply.get("id"): reply for reply in replies}
        results = []
        for i, (method, _params) in enumerate(calls):
            reply = by_id.get(first + i)
            if reply is None:
                raise RpcUnavailable(f"{self.url}: no answer for {method} in a batch")
            if "error" in reply:
                raise RpcError(f"{method}: {reply['error'].get('message', reply['error'])}")
            results.append(reply.get("result"))
        return results

    # ------------------------------------------------------------------ the calls we make

    def chain_id(self) -> int:
        return int(self.call("eth_chainId", []), 16)

    def block_number(self) -> int:
        return int(self.call("eth_blockNumber", []), 16)

    def head(self) -> tuple[int, int]:
        """The latest block's number and timestamp (seconds), in one call."""
        block = self.call("eth_getBlockByNumber", ["latest", False])
        if not block:
            raise RpcUnavailable(f"{self.url}: no latest block")
        return int(block["number"], 16), int(block["timestamp"], 16)

    def finalized_block_number(self) -> int:
        return int(self.call("eth_getBlockByNumber", ["finalized", False])["number"], 16)

    def blocks(self, numbers: list[int]) -> dict[int, dict[str, Any]]:
        """Header fields (hash, timestamp) of several blocks in one request."""
        found = self.batch([("eth_getBlockByNumber", [hex(n), False]) for n in numbers])
        return {n: block for n, block in zip(numbers, found, strict=True) if block is not None}

    def token_transfers(
        self, token: str, recipients: list[str], from_block: int, to_block: int
    ) -> list[Log]:
        """Transfer logs of ``token`` to any of ``recipients`` (an OR filter on topic 2)."""
        found = self.logs_many([LogFilter(token, tuple(recipients), from_block, to_block)])[0]
        if isinstance(found, RpcError):
            raise found
        return found

    def logs_many(self, filters: list[LogFilter]) -> list[list[Log] | RpcError]:
        """Several eth_getLogs queries in one request (a JSON-RPC batch). Each answer is the
        filter's logs, or the error the node gave for it — ``RangeTooLarge`` when it refused
        the query's size, so that the caller splits it; one refused query does not lose the
        others' answers. A transport failure raises RpcUnavailable."""
        if not filters:
            return []
        first = next(self._ids)
        payload = [
            {"jsonrpc": "2.0", "id": first + i, "method": "eth_getLogs", "params": f.params()}
            for i, f in enumerate(filters)
        ]
        self._ids = itertools.count(first + len(filters))
        replies = self._post(payload)
        if not isinstance(replies, list):
            raise RpcUnavailable(f"{self.url}: a batch answered with {type(replies).__name__}")
        by_id = {reply.get("id"): reply for reply in replies if isinstance(reply, dict)}
        answers: list[list[Log] | RpcError] = []
        for i in range(len(filters)):
            reply = by_id.get(first + i)
            if reply is None:
                raise RpcUnavailable(f"{self.url}: no answer for eth_getLogs in a batch")
            error = reply.get("error")
            if error:
                kind = RangeTooLarge if _is_too_large(error) else RpcError
                answers.append(kind(f"eth_getLogs: {error.get('message', error)}"))
                continue
            answers.append(
                [
                    Log(
                        address=entry["address"].lower(),
                        topics=entry["topics"],
                        data=entry["data"],
                        block_number=int(entry["blockNumber"], 16),
                        block_hash=entry["blockHash"],
                        tx_hash=entry["transactionHash"],
                        log_index=int(entry["logIndex"], 16),
                    )
                    for entry in reply.get("result") or []
                    if not entry.get("removed")
                ]
            )
        return answers

    def balances(self, addresses: list[str], blocks: list[int]) -> dict[tuple[str, int], int]:
        """Native balances of each address at each block, in one request."""
        calls = [("eth_getBalance", [a, hex(b)]) for a in addresses for b in blocks]
        results = self.batch(calls)
        return {
            (params[0], int(params[1], 16)): int(result, 16)
            for (_method, params), result in zip(calls, results, strict=True)
        }

    def receipt(self, tx_hash: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self.call("eth_getTransactionReceipt", [tx_hash])
        return result

    def transaction_and_receipt(
        self, tx_hash: str
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The transaction (None: unknown to the node) and its receipt (None: not mined
        yet, or unknown), in one request."""
        tx, receipt = self.batch(
            [("eth_getTransactionByHash", [tx_hash]), ("eth_getTransactionReceipt", [tx_hash])]
        )
        return tx, receipt

    def eth_call(self, to: str, data: str) -> str:
        return str(self.call("eth_call", [{"to": to, "data": data}, "latest"]))

    def code(self, address: str) -> str:
        """The contract code at ``address`` ("0x": none, an account or nothing)."""
        return str(self.call("eth_getCode", [address, "latest"]))
