"""A chain's RPC endpoints behind one client: failover, health, and witnesses for a quorum.

A chain has its ``rpc_url`` and any number of extra ``RpcEndpoint`` rows. Every call goes to
the current endpoint; one that cannot be reached, answers garbage or serves another chain is
marked failed (its row says when and why, and it is tried after the healthy ones for
PAYMENT_ENDPOINT_BACKOFF_SECONDS) and the next one answers instead — within the same scan
cycle. Only when none answers does the caller see RpcUnavailable (the invoices then say
"checking is delayed").

With ``Chain.quorum`` above one, the other endpoints are the witnesses: a transfer counts as
confirmed only once that many endpoints returned the same log in the same block
(payments.services), so one lying or compromised provider cannot settle an order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from django.conf import settings
from django.core.cache import cache
from django.db.models import F
from django.utils import timezone
from eth_typing import ABI

from payments.models import Chain, RpcEndpoint
from payments.rpc import Log, LogFilter, RpcClient, RpcError, RpcUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")


class ChainMismatch(Exception):
    """The RPC node serves another chain than the configuration says: it is not used."""


class NodeClient(Protocol):
    """What the payment code asks of a node (an RpcClient, or a chain's Nodes)."""

    @property
    def url(self) -> str: ...

    @property
    def requests_made(self) -> int: ...

    def call(self, method: str, params: list[Any]) -> Any: ...
    def batch(self, calls: list[tuple[str, list[Any]]]) -> list[Any]: ...
    def chain_id(self) -> int: ...
    def block_number(self) -> int: ...
    def head(self) -> tuple[int, int]: ...
    def finalized_block_number(self) -> int: ...
    def blocks(self, numbers: list[int]) -> dict[int, dict[str, Any]]: ...
    def logs_many(self, filters: list[LogFilter]) -> list[list[Log] | RpcError]: ...
    def balances(self, addresses: list[str], blocks: list[int]) -> dict[tuple[str, int], int]: ...
    def transaction_and_receipt(
        self, tx_hash: str
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]: ...
    def eth_call(self, to: str, data: str) -> str: ...
    def code(self, address: str) -> str: ...
    def read(self, address: str, abi: ABI, function: str, *args: Any) -> Any: ...
    def erc20_decimals(self, address: str) -> int | None: ...
    def erc20_symbol(self, address: str) -> str | None: ...


@dataclass(frozen=True)
class Endpoint:
    url: str
    label: str
    row_id: int | None = None
    """The RpcEndpoint row; None for the chain's own ``rpc_url``."""


def _failed_key(chain: Chain, url: str) -> str:
    return f"payments:endpoint-failed:{chain.pk}:{url}"


def endpoints_of(chain: Chain) -> list[Endpoint]:
    """The chain's active endpoints in the order to try them: its ``rpc_url`` first, then
    the extra ones by priority — except that those which failed recently come last."""
    found = [Endpoint(chain.rpc_url, "rpc_url")] if chain.rpc_url else []
    found += [
        Endpoint(row.url, row.label or row.url, row.pk)
        for row in RpcEndpoint.objects.filter(chain=chain, is_active=True).order_by(
            "priority", "pk"
        )
    ]
    unique: list[Endpoint] = []
    for endpoint in found:
        if endpoint.url not in {e.url for e in unique}:
            unique.append(endpoint)
    failed = cache.get_many([_failed_key(chain, e.url) for e in unique])
    return sorted(unique, key=lambda e: _failed_key(chain, e.url) in failed)


class Nodes:
    """The chain's endpoints as one NodeClient (see the module's docstring)."""

    def __init__(self, chain: Chain, endpoints: list[Endpoint] | None = None) -> None:
        self.chain = chain
        self.endpoints = endpoints if endpoints is not None else endpoints_of(chain)
        if not self.endpoints:
            raise RpcUnavailable(f"{chain}: no RPC endpoint configured")
        self._clients: dict[int, RpcClient] = {}
        self._healthy: set[int] = set()
        self._current = 0

    # ------------------------------------------------------------------ health

    @property
    def url(self) -> str:
        return self.endpoints[self._current].url

    @property
    def requests_made(self) -> int:
        return sum(client.requests_made for client in self._clients.values())

    def _client(self, i: int) -> RpcClient:
        client = self._clients.get(i)
        if client is None:
            client = RpcClient(self.endpoints[i].url, timeout=settings.PAYMENT_RPC_TIMEOUT)
            self._clients[i] = client
            served = client.chain_id()
            if served != self.chain.chain_id:
                raise ChainMismatch(
                    f"{self.endpoints[i].url} serves chain {served}, not {self.chain.chain_id}"
                )
        return client

    def _ok(self, i: int) -> None:
        if i in self._healthy:
            return
        self._healthy.add(i)
        endpoint = self.endpoints[i]
        cache.delete(_failed_key(self.chain, endpoint.url))
        if endpoint.row_id is not None:
            RpcEndpoint.objects.filter(pk=endpoint.row_id).update(
                last_ok_at=timezone.now(), failures=0
            )

    def _failed(self, i: int, exc: Exception) -> None:
        endpoint = self.endpoints[i]
        self._healthy.discard(i)
        self._clients.pop(i, None)  # checked again (chain id) if it is tried again
        backoff = settings.PAYMENT_ENDPOINT_BACKOFF_SECONDS
        cache.set(_failed_key(self.chain, endpoint.url), "1", backoff)
        if endpoint.row_id is not None:
            RpcEndpoint.objects.filter(pk=endpoint.row_id).update(
                failures=F("failures") + 1,
                last_error=f"{type(exc).__name__}: {exc}"[:300],
                last_error_at=timezone.now(),
            )
        log.warning(
            "rpc endpoint failed",
            extra={"chain": self.chain.chain_id, "endpoint": endpoint.label, "error": str(exc)},
        )

    def _run(self, work: Callable[[RpcClient], T]) -> T:
        """``work`` on the current endpoint, failing over to the next ones in turn."""
        failures: list[Exception] = []
        for i in [*range(self._current, len(self.endpoints)), *range(self._current)]:
            try:
                result = work(self._client(i))
            except (RpcUnavailable, ChainMismatch) as exc:
                self._failed(i, exc)
                failures.append(exc)
                continue
            # A JSON-RPC error (RpcError: a revert, a refused query) is the node's answer,
            # not its failure: it reaches the caller as it is.
            self._current = i
            self._ok(i)
            return result
        if all(isinstance(exc, ChainMismatch) for exc in failures):
            raise failures[-1]
        raise RpcUnavailable("; ".join(f"{type(exc).__name__}: {exc}" for exc in failures))

    def witnesses(self, count: int) -> list[RpcClient]:
        """Up to ``count`` endpoints other than the current one that answer for this chain
        (for a quorum); those that do not are marked failed and skipped."""
        found: list[RpcClient] = []
        for i in range(len(self.endpoints)):
            if i == self._current or len(found) >= count:
                continue
            try:
                found.append(self._client(i))
            except (RpcUnavailable, RpcError, ChainMismatch) as exc:
                self._failed(i, exc)
        return found

    def witness_failed(self, client: RpcClient, exc: Exception) -> None:
        for i, known in list(self._clients.items()):
            if known is client:
                self._failed(i, exc)

    # ------------------------------------------------------------------ the calls

    def call(self, method: str, params: list[Any]) -> Any:
        return self._run(lambda c: c.call(method, params))

    def batch(self, calls: list[tuple[str, list[Any]]]) -> list[Any]:
        return self._run(lambda c: c.batch(calls))

    def chain_id(self) -> int:
        """The chain id an endpoint serves (checked, once per endpoint, when first used)."""
        return self._run(lambda c: self.chain.chain_id)

    def block_number(self) -> int:
        return self._run(lambda c: c.block_number())

    def head(self) -> tuple[int, int]:
        return self._run(lambda c: c.head())

    def finalized_block_number(self) -> int:
        return self._run(lambda c: c.finalized_block_number())

    def blocks(self, numbers: list[int]) -> dict[int, dict[str, Any]]:
        return self._run(lambda c: c.blocks(numbers))

    def logs_many(self, filters: list[LogFilter]) -> list[list[Log] | RpcError]:
        return self._run(lambda c: c.logs_many(filters))

    def balances(self, addresses: list[str], blocks: list[int]) -> dict[tuple[str, int], int]:
        return self._run(lambda c: c.balances(addresses, blocks))

    def transaction_and_receipt(
        self, tx_hash: str
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        return self._run(lambda c: c.transaction_and_receipt(tx_hash))

    def eth_call(self, to: str, data: str) -> str:
        return self._run(lambda c: c.eth_call(to, data))

    def code(self, address: str) -> str:
        return self._run(lambda c: c.code(address))

    def read(self, address: str, abi: ABI, function: str, *args: Any) -> Any:
        return self._run(lambda c: c.read(address, abi, function, *args))

    def erc20_decimals(self, address: str) -> int | None:
        return self._run(lambda c: c.erc20_decimals(address))

    def erc20_symbol(self, address: str) -> str | None:
        return self._run(lambda c: c.erc20_symbol(address))


def client_for(chain: Chain) -> Nodes:
    """The chain's RPC endpoints as one client (failover: Nodes), after checking that one of
    them serves that chain id (ChainMismatch when none does)."""
    nodes = Nodes(chain)
    nodes.chain_id()
    return nodes


def confirmed_height(chain: Chain, client: NodeClient, head: int) -> int:
    """The newest block with enough confirmations (or the node's finalized one)."""
    if chain.use_finalized_tag:
        return client.finalized_block_number()
    return head - chain.confirmations + 1
