"""The one place that talks to EVM nodes: web3.py over HTTP, batched where it helps.

web3 encodes the JSON-RPC requests (and their ids), validates the answers, retries transport
failures (``ExceptionRetryConfiguration``) and encodes and decodes through ABIs: Transfer
events, ``decimals()``, ``symbol()`` and any view function (``read``).

Every HTTP request is counted (``requests_made``), so the scanner's cost can be measured:
a batch of N calls is one request (a retried attempt is another). A node that cannot be
reached or answers garbage raises ``RpcUnavailable``; callers retry later, the database
keeps what was already known. A JSON-RPC error answer raises ``RpcError`` and is never
retried here.

web3's own batches (``Web3.batch_requests``) raise on the first entry that is an error or
null (BlockNotFound, TransactionNotFound), losing the others; the batches here that must keep
each entry's own answer (``logs_many``, ``blocks``, ``transaction_and_receipt``, ``batch``)
go through the provider's batch request and validate each answer on its own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import requests
from eth_abi import decode, encode
from eth_abi.exceptions import DecodingError
from eth_typing import ABI, ABIEvent, ABIFunction, ChecksumAddress, HexStr
from eth_utils import encode_hex, event_abi_to_log_topic
from hexbytes import HexBytes
from web3 import HTTPProvider, Web3
from web3.exceptions import (
    BadFunctionCallOutput,
    BadResponseFormat,
    BlockNotFound,
    ContractLogicError,
    Web3Exception,
    Web3RPCError,
)
from web3.providers.base import JSONBaseProvider
from web3.providers.rpc.utils import ExceptionRetryConfiguration, check_if_retry_on_failure
from web3.types import RPCEndpoint, RPCResponse

log = logging.getLogger(__name__)

TRANSFER_EVENT: ABIEvent = {
    "type": "event",
    "name": "Transfer",
    "anonymous": False,
    "inputs": [
        {"name": "from", "type": "address", "indexed": True},
        {"name": "to", "type": "address", "indexed": True},
        {"name": "value", "type": "uint256", "indexed": False},
    ],
}
DECIMALS_FUNCTION: ABIFunction = {
    "type": "function",
    "name": "decimals",
    "stateMutability": "view",
    "inputs": [],
    "outputs": [{"name": "", "type": "uint8"}],
}
"""``decimals()``: the same function in an ERC-20 token and a Chainlink-style feed."""
ERC20_ABI: ABI = [
    TRANSFER_EVENT,
    DECIMALS_FUNCTION,
    {
        "type": "function",
        "name": "symbol",
        "stateMutability": "view",
        "inputs": [],
        "outputs": [{"name": "", "type": "string"}],
    },
]
"""What the scanner needs of an ERC-20 token: its Transfer event, decimals() and symbol()."""

TRANSFER_TOPIC = encode_hex(event_abi_to_log_topic(TRANSFER_EVENT))
"""keccak256("Transfer(address,address,uint256)")."""


def topic_address(topic: Any) -> str:
    """The address a log topic (32 bytes) or an address text holds: its last 20 bytes,
    lower-case and 0x-prefixed, so that the two compare equal."""
    return "0x" + str(topic).lower()[-40:]


TX_HASH = re.compile(r"^0x[0-9a-fA-F]{64}$")
"""A transaction hash as a researcher or operator pastes it (checked before any request)."""

ATTEMPTS = 3
"""Tries of one request when the transport fails (refused, reset, timed out): within the
client's timeout, all of them together."""
BACKOFF_SECONDS = 0.1
"""The wait before the second try; doubled before each next one."""


class RpcUnavailable(Exception):
    """The node did not answer usefully; try again later."""


class RpcError(Exception):
    """The node answered with a JSON-RPC error (or an answer its ABI does not decode)."""


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


def _topic_address(topic: str) -> str:
    return str(decode(["address"], HexBytes(topic))[0]).lower()


@dataclass(frozen=True)
class LogFilter:
    """Transfer logs of ``token`` to any of ``recipients`` in [from_block, to_block]."""

    token: str
    recipients: tuple[str, ...]
    from_block: int
    to_block: int

    def params(self) -> list[Any]:
        recipients = [encode_hex(encode(["address"], [r.lower()])) for r in self.recipients]
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
    """A Transfer log as the node gave it (hex strings), its arguments decoded by the ABI."""

    address: str
    topics: list[str]
    data: str
    block_number: int
    block_hash: str
    tx_hash: str
    log_index: int

    @property
    def to_address(self) -> str:
        return _topic_address(self.topics[2])

    @property
    def from_address(self) -> str:
        return _topic_address(self.topics[1])

    @property
    def amount(self) -> int:
        """The uint256 value, exact."""
        return int(decode(["uint256"], HexBytes(self.data))[0])


# --------------------------------------------------------------------------- transport


class _NoTimeLeft(requests.RequestException):
    """The client's timeout was spent by earlier attempts: no other is made."""


class _CountingSession(requests.Session):
    """The provider's HTTP session, counting each HTTP request it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        self.sent += 1
        return super().send(request, **kwargs)


class _Provider(HTTPProvider):
    """web3's HTTP provider with three additions: all attempts of one request (web3's
    retries) share the client's timeout; batches are retried like single requests (web3
    retries single ones only); an answer that is not a JSON-RPC object (or, for a batch, a
    list of them with integer ids) is refused as BadResponseFormat."""

    def __init__(self, url: str, timeout: float) -> None:
        self.session = _CountingSession()
        super().__init__(
            url,
            request_kwargs={"timeout": timeout},
            session=self.session,
            exception_retry_configuration=ExceptionRetryConfiguration(
                # Transport failures only: an HTTP error status may carry a JSON-RPC error,
                # and the periodic scanner retries on its own.
                errors=(requests.ConnectionError, requests.Timeout),
                retries=ATTEMPTS,
                backoff_factor=BACKOFF_SECONDS,
            ),
        )
        self.timeout = timeout
        # A contract may revert with OffchainLookup (EIP-3668) to make web3 fetch any URL.
        self.global_ccip_read_enabled = False
        self._deadline = threading.local()

    @contextlib.contextmanager
    def _within_timeout(self) -> Iterator[None]:
        self._deadline.at = time.monotonic() + self.timeout
        try:
            yield
        finally:
            self._deadline.at = None

    def get_request_kwargs(self) -> Any:  # called once per attempt
        kwargs = dict(super().get_request_kwargs())
        deadline = getattr(self._deadline, "at", None)
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _NoTimeLeft(f"{self.endpoint_uri}: timed out after {self.timeout} s")
            kwargs["timeout"] = left
        return kwargs

    @staticmethod
    def decode_rpc_response(raw_response: bytes) -> RPCResponse:
        response: Any = JSONBaseProvider.decode_rpc_response(raw_response)
        if isinstance(response, list):
            if all(
                isinstance(entry, dict)
                and isinstance(entry.get("id"), int)
                and not isinstance(entry.get("id"), bool)
                for entry in response
            ):
                return cast(RPCResponse, response)
        elif isinstance(response, dict):
            return cast(RPCResponse, response)
        raise BadResponseFormat(f"not a JSON-RPC answer: {str(response)[:100]}")

    def make_request(self, method: RPCEndpoint, params: Any) -> RPCResponse:
        with self._within_timeout():
            response: Any = super().make_request(method, params)
        if not isinstance(response, dict):
            raise BadResponseFormat(f"{method}: a list answered a single request")
        return cast(RPCResponse, response)

    def make_batch_request(
        self, batch_requests: list[tuple[RPCEndpoint, Any]]
    ) -> list[RPCResponse] | RPCResponse:
        config = self.exception_retry_configuration
        retried = all(
            check_if_retry_on_failure(method, config.method_allowlist)
            for method, _params in batch_requests
        )
        attempts = config.retries if retried else 1
        with self._within_timeout():
            for attempt in range(attempts):
                try:
                    return super().make_batch_request(batch_requests)
                except tuple(config.errors):
                    if attempt == attempts - 1:
                        raise
                    time.sleep(config.backoff_factor * 2**attempt)
        raise AssertionError("unreachable")


# --------------------------------------------------------------------------- the client


class RpcClient:
    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url
        self._provider = _Provider(url, timeout)
        # No middleware: raw calls keep the node's JSON (hex strings), typed ones are
        # formatted by their web3 methods.
        self._w3 = Web3(self._provider, middleware=[])
        self._transfer = self._w3.eth.contract(abi=ERC20_ABI).events.Transfer()

    @property
    def timeout(self) -> float:
        """Seconds one call may take, all its tries together (a batch is one call)."""
        return self._provider.timeout

    @timeout.setter
    def timeout(self, value: float) -> None:
        self._provider.timeout = value

    @property
    def requests_made(self) -> int:
        """HTTP requests sent so far (a batch is one; a retried attempt is another)."""
        return self._provider.session.sent

    @requests_made.setter
    def requests_made(self, value: int) -> None:
        self._provider.session.sent = value

    # ------------------------------------------------------------------ errors

    @contextlib.contextmanager
    def _asking(self, what: str) -> Iterator[None]:
        """web3's exceptions as ours: a JSON-RPC error (or a revert, or an answer the ABI
        does not decode) is RpcError; no answer or garbage is RpcUnavailable."""
        try:
            yield
        except Web3RPCError as exc:
            raise self._rpc_error(what, exc) from exc
        except ContractLogicError as exc:
            raise RpcError(f"{what}: reverted: {exc.message or exc}") from exc
        except BadFunctionCallOutput as exc:
            raise RpcError(f"{what}: the answer does not decode: {exc}") from exc
        except (
            requests.RequestException,
            BadResponseFormat,
            json.JSONDecodeError,
            UnicodeDecodeError,
        ) as exc:
            raise RpcUnavailable(f"{self.url}: {type(exc).__name__}") from exc

    @staticmethod
    def _rpc_error(what: str, exc: Web3RPCError) -> RpcError:
        error: Any = (exc.rpc_response or {}).get("error")
        if not isinstance(error, dict):
            return RpcError(f"{what}: {exc.message}")
        kind = RangeTooLarge if what == "eth_getLogs" and _is_too_large(error) else RpcError
        return kind(f"{what}: {error.get('message', error)}")

    @staticmethod
    def _checksum(address: str) -> ChecksumAddress:
        try:
            return Web3.to_checksum_address(address)
        except (ValueError, TypeError) as exc:
            raise RpcError(f"{address!r} is not an address") from exc

    # ------------------------------------------------------------------ raw JSON-RPC

    def call(self, method: str, params: list[Any]) -> Any:
        """One call; its result as the node's JSON."""
        with self._asking(method):
            return self._w3.manager.request_blocking(RPCEndpoint(method), params)

    def _exchange(self, calls: Sequence[tuple[str, list[Any]]]) -> list[RPCResponse]:
        """Several calls in one HTTP request: each one's JSON-RPC answer, in order."""
        if not calls:
            return []
        with self._asking("batch"):
            answers = self._provider.make_batch_request(
                [(RPCEndpoint(method), params) for method, params in calls]
            )
        if not isinstance(answers, list):  # one error for the whole batch
            raise RpcUnavailable(f"{self.url}: a batch answered {str(answers)[:100]}")
        ids = [int(cast(int, answer["id"])) for answer in answers]  # checked, sorted by web3
        if len(ids) != len(calls) or ids != list(range(ids[0], ids[0] + len(calls))):
            raise RpcUnavailable(f"{self.url}: a batch of {len(calls)} got {len(ids)} answers")
        return answers

    def _result(self, answer: RPCResponse, method: str, params: list[Any]) -> Any:
        with self._asking(method):
            return self._w3.manager.formatted_response(answer, params)

    def batch(self, calls: list[tuple[str, list[Any]]]) -> list[Any]:
        """Several calls in one HTTP request; results (the node's JSON) in the order of
        ``calls``. An error answer to any raises RpcError."""
        answers = self._exchange(calls)
        return [
            self._result(answer, method, params)
            for (method, params), answer in zip(calls, answers, strict=True)
        ]

    # ------------------------------------------------------------------ the calls we make

    def chain_id(self) -> int:
        with self._asking("eth_chainId"):
            return self._w3.eth.chain_id

    def block_number(self) -> int:
        with self._asking("eth_blockNumber"):
            return self._w3.eth.block_number

    def head(self) -> tuple[int, int]:
        """The latest block's number and timestamp (seconds), in one call."""
        with self._asking("eth_getBlockByNumber"):
            try:
                block = self._w3.eth.get_block("latest")
            except BlockNotFound as exc:
                raise RpcUnavailable(f"{self.url}: no latest block") from exc
        return block["number"], block["timestamp"]

    def finalized_block_number(self) -> int:
        with self._asking("eth_getBlockByNumber"):
            return self._w3.eth.get_block("finalized")["number"]

    def blocks(self, numbers: list[int]) -> dict[int, dict[str, Any]]:
        """Header fields (hash, timestamp: the node's hex strings) of several blocks in one
        request; a block the node does not have is left out."""
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
        others' answers. A transport failure raises RpcUnavailable. A log that the Transfer
        event's ABI does not decode (not an ERC-20 transfer) is left out."""
        calls = [("eth_getLogs", f.params()) for f in filters]
        answers: list[list[Log] | RpcError] = []
        for (method, params), answer in zip(calls, self._exchange(calls), strict=True):
            try:
                entries = self._result(answer, method, params)
            except RpcError as exc:
                answers.append(exc)
                continue
            answers.append(self._transfers(entries))
        return answers

    def _transfers(self, entries: Any) -> list[Log]:
        if not isinstance(entries, list):
            raise RpcUnavailable(f"{self.url}: eth_getLogs answered {str(entries)[:100]}")
        logs = []
        for entry in entries:
            try:
                if entry.get("removed"):
                    continue
                found = Log(
                    address=str(entry["address"]).lower(),
                    topics=[str(topic) for topic in entry["topics"]],
                    data=str(entry["data"]),
                    block_number=int(entry["blockNumber"], 16),
                    block_hash=str(entry["blockHash"]),
                    tx_hash=str(entry["transactionHash"]),
                    log_index=int(entry["logIndex"], 16),
                )
                self._transfer.process_log(entry)
            except (Web3Exception, DecodingError) as exc:
                log.warning(
                    "log is not an ERC-20 Transfer", extra={"log": entry, "reason": str(exc)}
                )
                continue
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise RpcUnavailable(f"{self.url}: a malformed log: {exc!r}") from exc
            logs.append(found)
        return logs

    def balances(self, addresses: list[str], blocks: list[int]) -> dict[tuple[str, int], int]:
        """Native balances of each address at each block, in one request."""
        pairs = [(a, b) for a in addresses for b in blocks]
        if not pairs:
            return {}
        checksummed = {a: self._checksum(a) for a in addresses}
        with self._asking("eth_getBalance"), self._w3.batch_requests() as batch:
            for address, block in pairs:
                batch.add(self._w3.eth.get_balance(checksummed[address], block))
            results = batch.execute()
        if len(results) != len(pairs):  # web3 pairs answers with calls as they come
            raise RpcUnavailable(f"{self.url}: {len(pairs)} balances got {len(results)} answers")
        return {pair: int(cast(int, result)) for pair, result in zip(pairs, results, strict=True)}

    def receipt(self, tx_hash: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self.call("eth_getTransactionReceipt", [tx_hash])
        return result

    def transaction_and_receipt(
        self, tx_hash: str
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The transaction (None: unknown to the node) and its receipt (None: not mined
        yet, or unknown), in one request; both as the node's JSON."""
        tx, receipt = self.batch(
            [("eth_getTransactionByHash", [tx_hash]), ("eth_getTransactionReceipt", [tx_hash])]
        )
        return tx, receipt

    def eth_call(self, to: str, data: str) -> str:
        """The hex-encoded answer of a call at the latest block (RpcError: reverted)."""
        address = self._checksum(to)
        with self._asking("eth_call"):
            return self._w3.eth.call({"to": address, "data": HexStr(data)}).to_0x_hex()

    def code(self, address: str) -> str:
        """The contract code at ``address`` ("0x": none, an account or nothing)."""
        checksummed = self._checksum(address)
        with self._asking("eth_getCode"):
            return self._w3.eth.get_code(checksummed).to_0x_hex()

    # ------------------------------------------------------------------ contracts

    def read(self, address: str, abi: ABI, function: str, *args: Any) -> Any:
        """A view function of the contract at ``address``, its arguments encoded and its
        answer decoded by ``abi`` (a tuple for several outputs). RpcError: it reverted, or
        its answer does not decode (no such function, no contract there)."""
        contract = self._w3.eth.contract(address=self._checksum(address), abi=abi)
        with self._asking(f"{function}() at {address}"):
            return contract.get_function_by_name(function)(*args).call()

    def erc20_decimals(self, address: str) -> int | None:
        """The token's ``decimals()``; None: no such function (or no contract) there."""
        try:
            return int(self.read(address, ERC20_ABI, "decimals"))
        except RpcError:
            return None

    def erc20_symbol(self, address: str) -> str | None:
        """The token's ``symbol()`` as its ABI's string, or as bytes32 (older tokens such as
        MKR); None: no such function (or no contract) there."""
        contract = self._w3.eth.contract(address=self._checksum(address), abi=ERC20_ABI)
        try:
            data = self.eth_call(contract.address, contract.encode_abi("symbol"))
        except RpcError:
            return None
        raw = HexBytes(data)
        if not raw:
            return None
        try:
            return str(self._w3.codec.decode(["string"], raw)[0])
        except (DecodingError, OverflowError, UnicodeDecodeError):
            if len(raw) != 32:
                return None
            word: bytes = self._w3.codec.decode(["bytes32"], raw)[0]
            return word.rstrip(b"\0").decode("utf-8", "replace")
