"""The node client (payments.rpc, on web3.py) against a real anvil: what it counts, decodes
and raises. A small HTTP proxy in front of anvil plays the node that refuses one query of a
batch, mangles an answer or answers garbage."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from web3 import Web3

from payments import devchain, prices
from payments.rpc import Log, LogFilter, RangeTooLarge, RpcClient, RpcError, RpcUnavailable
from tests.conftest import Payments

pytestmark = pytest.mark.django_db

RECIPIENT = "0x" + "ab" * 20
OTHER = "0x" + "cd" * 20

Rewrite = Callable[[Any, Any], Any]
"""(the request's JSON, anvil's answer) -> the answer to give (bytes: sent as they are)."""


@dataclass
class Proxy:
    url: str
    rewrite: Rewrite = field(default=lambda _request, answer: answer)
    posts: int = 0


@pytest.fixture
def proxy(anvil_url: str) -> Iterator[Proxy]:
    """An HTTP proxy to anvil whose answers ``rewrite`` changes."""
    state = Proxy(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            state.posts += 1
            body = self.rfile.read(int(self.headers["Content-Length"]))
            forwarded = urllib.request.Request(
                anvil_url, data=body, headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(forwarded, timeout=10) as response:
                answer = json.loads(response.read())
            rewritten = state.rewrite(json.loads(body), answer)
            out = rewritten if isinstance(rewritten, bytes) else json.dumps(rewritten).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def paid(payments: Payments, units: int, *, to: str = RECIPIENT) -> tuple[str, str]:
    """A fresh token with ``units`` minted to the payer, all sent to ``to``: (token, tx)."""
    token = payments.dev.deploy_token("Big", "BIG", 18, mint=units)
    tx = payments.dev.pay_token(Web3.to_checksum_address(to), units, token=token)
    return token, tx


# --------------------------------------------------------------------------- counting


def test_a_batch_of_five_calls_is_one_request(payments: Payments) -> None:
    client = RpcClient(payments.dev.url)
    head = client.block_number()
    assert client.requests_made == 1
    blocks = client.blocks([head - i for i in range(5)])
    assert client.requests_made == 2
    assert sorted(blocks) == list(range(head - 4, head + 1))
    client.balances([devchain.PAYER, RECIPIENT], [head - 1, head])  # web3's batch_requests
    assert client.requests_made == 3
    filters = [LogFilter(devchain.USDC, (RECIPIENT,), 0, head) for _ in range(5)]
    assert client.logs_many(filters) == [[]] * 5
    assert client.requests_made == 4


def test_blocks_keep_the_nodes_hex_fields_and_the_head_is_decoded(payments: Payments) -> None:
    client = RpcClient(payments.dev.url)
    number, timestamp = client.head()
    block = client.blocks([number])[number]
    assert int(block["timestamp"], 16) == timestamp
    assert block["hash"] == payments.dev.w3.eth.get_block(number)["hash"].to_0x_hex()
    assert client.blocks([number + 1000]) == {}  # a block the node does not have: left out


def test_a_json_rpc_error_raises_rpc_error_and_is_not_retried(payments: Payments) -> None:
    client = RpcClient(payments.dev.url)
    with pytest.raises(RpcError, match="eth_getLogs"):
        client.call("eth_getLogs", [{"fromBlock": "not a block"}])
    assert client.requests_made == 1


# --------------------------------------------------------------------------- Transfer logs


@pytest.mark.parametrize("units", [2**200, 2**256 - 1])
def test_a_transfer_amount_is_decoded_exactly(payments: Payments, units: int) -> None:
    token, tx = paid(payments, units)
    client = RpcClient(payments.dev.url)
    head = client.block_number()
    [found] = client.token_transfers(token, [RECIPIENT, OTHER], 0, head)
    assert found.amount == units
    assert (found.from_address, found.to_address) == (devchain.PAYER.lower(), RECIPIENT)
    assert (found.address, found.tx_hash) == (token.lower(), tx)
    receipt = payments.dev.w3.eth.get_transaction_receipt(tx)  # type: ignore[arg-type]
    assert (found.block_number, found.block_hash) == (
        receipt["blockNumber"],
        receipt["blockHash"].to_0x_hex(),
    )
    assert client.blocks([found.block_number])[found.block_number]["hash"] == found.block_hash


def test_a_log_the_transfer_abi_does_not_decode_is_left_out(
    payments: Payments, proxy: Proxy
) -> None:
    token = payments.dev.deploy_token("Big", "BIG", 18, mint=7)
    for units in (5, 2):
        payments.dev.pay_token(Web3.to_checksum_address(RECIPIENT), units, token=token)

    def no_value_in_the_first(_request: Any, answer: Any) -> Any:
        if not isinstance(answer, list):
            return answer
        answer[0]["result"][0]["data"] = "0x"  # a Transfer without its value word
        return answer

    proxy.rewrite = no_value_in_the_first
    client = RpcClient(proxy.url)
    [answer] = client.logs_many([LogFilter(token, (RECIPIENT,), 0, client.block_number())])
    assert isinstance(answer, list)
    assert [entry.amount for entry in answer] == [2]


def test_logs_many_answers_each_filter_with_its_logs_or_its_own_error(
    payments: Payments, proxy: Proxy
) -> None:
    token, _tx = paid(payments, 7)

    def refuse_some(request: Any, answer: Any) -> Any:
        if not isinstance(answer, list):
            return answer
        by_id = {entry["id"]: entry for entry in answer}
        for entry in request:
            query = entry["params"][0]
            if query["fromBlock"] == "0x1":
                by_id[entry["id"]] = {
                    "jsonrpc": "2.0",
                    "id": entry["id"],
                    "error": {"code": -32005, "message": "query returned more than 10000 results"},
                }
            elif query["fromBlock"] == "0x2":
                by_id[entry["id"]] = {
                    "jsonrpc": "2.0",
                    "id": entry["id"],
                    "error": {"code": -32000, "message": "header not found"},
                }
        return list(reversed(by_id.values()))  # any order: matched by id

    proxy.rewrite = refuse_some
    client = RpcClient(proxy.url)
    head = client.block_number()
    ok, too_large, other, also_ok = client.logs_many(
        [
            LogFilter(token, (RECIPIENT,), 0, head),
            LogFilter(token, (RECIPIENT,), 1, head),
            LogFilter(token, (RECIPIENT,), 2, head),
            LogFilter(token, (OTHER,), 0, head),
        ]
    )
    assert client.requests_made == 2  # the block number, then one batch
    assert isinstance(ok, list)
    assert [(entry.to_address, entry.amount) for entry in ok] == [(RECIPIENT, 7)]
    assert isinstance(too_large, RangeTooLarge)
    assert "more than 10000 results" in str(too_large)
    assert isinstance(other, RpcError)
    assert not isinstance(other, RangeTooLarge)
    assert also_ok == []
    with pytest.raises(RangeTooLarge):
        client.token_transfers(token, [RECIPIENT], 1, head)


# --------------------------------------------------------------------------- failures


def test_a_dead_port_is_rpc_unavailable_after_a_few_quick_tries() -> None:
    client = RpcClient(f"http://127.0.0.1:{devchain.free_port()}", timeout=5)
    started = time.monotonic()
    with pytest.raises(RpcUnavailable):
        client.chain_id()
    assert client.requests_made == 3  # web3's retries
    with pytest.raises(RpcUnavailable):
        client.blocks([1, 2, 3])
    assert client.requests_made == 6  # batches are retried too
    assert time.monotonic() - started < 3


def test_all_tries_together_stay_within_the_timeout() -> None:
    with socket.socket() as listening:  # accepts connections, never answers
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        client = RpcClient(f"http://127.0.0.1:{listening.getsockname()[1]}", timeout=1)
        started = time.monotonic()
        with pytest.raises(RpcUnavailable):
            client.chain_id()
        assert time.monotonic() - started < 1.8
        started = time.monotonic()
        with pytest.raises(RpcUnavailable):
            client.blocks([1, 2])
        assert time.monotonic() - started < 1.8


@pytest.mark.parametrize(
    "garbage",
    [b"<html>bad gateway</html>", b"5", b'["not", "objects"]', b'{"jsonrpc": "2.0"}'],
)
def test_garbage_is_rpc_unavailable(payments: Payments, proxy: Proxy, garbage: bytes) -> None:
    proxy.rewrite = lambda _request, _answer: garbage
    client = RpcClient(proxy.url)
    with pytest.raises(RpcUnavailable):
        client.chain_id()
    with pytest.raises(RpcUnavailable):
        client.blocks([0, 1])
    assert client.requests_made == 2  # an answer, however bad, is not retried


def test_a_batch_missing_an_answer_is_rpc_unavailable(payments: Payments, proxy: Proxy) -> None:
    proxy.rewrite = lambda _request, answer: answer[:-1]
    with pytest.raises(RpcUnavailable):
        RpcClient(proxy.url).blocks([0, 1, 2])
    with pytest.raises(RpcUnavailable):  # web3's batch_requests
        RpcClient(proxy.url).balances([devchain.PAYER], [0, 1])


# --------------------------------------------------------------------------- through the ABI


BYTES32_SYMBOL = "0x" + "7f" + b"MKR".ljust(32, b"\0").hex() + "60005260206000f3"
"""Runtime code answering any call with one word: bytes32 "MKR" (as MKR's symbol())."""


def test_decimals_and_symbol_are_read_through_the_abi(payments: Payments) -> None:
    client = RpcClient(payments.dev.url)
    assert (client.erc20_decimals(devchain.USDC), client.erc20_symbol(devchain.USDC)) == (
        6,
        "USDC",
    )
    assert client.requests_made == 2
    # An account (no code): nothing decodes; a contract without symbol(): it reverts.
    assert (client.erc20_decimals(devchain.PAYER), client.erc20_symbol(devchain.PAYER)) == (
        None,
        None,
    )
    assert client.erc20_symbol(devchain.ETH_USD_FEED) is None
    assert prices.feed_decimals(devchain.ETH_USD_FEED, client) == prices.FEED_DECIMALS
    old_token = Web3.to_checksum_address("0x" + "4d" * 20)
    payments.dev.w3.provider.make_request("anvil_setCode", [old_token, BYTES32_SYMBOL])  # type: ignore[arg-type]
    assert client.erc20_symbol(old_token) == "MKR"
    assert client.erc20_decimals(old_token) is None  # "MKR…" is no uint8


def test_latest_round_data_is_decoded_through_the_aggregator_abi(payments: Payments) -> None:
    client = RpcClient(payments.dev.url)
    payments.dev.set_price(2_512)
    assert prices.usd_per_unit(payments.eth, client) == Decimal(2_512)
    feed = payments.dev.contract("MockPriceFeed", devchain.ETH_USD_FEED)
    now = payments.dev.w3.eth.get_block("latest")["timestamp"]
    payments.dev.wait(feed.functions.setAnswer(-(10**8), now).transact({"from": devchain.DEPLOYER}))
    _round, answer, _started, updated_at, _answered = client.read(
        devchain.ETH_USD_FEED, prices.AGGREGATOR_V3_ABI, "latestRoundData"
    )
    assert (answer, updated_at) == (-(10**8), now)  # int256: signed
    with pytest.raises(prices.PriceUnavailable, match="not a believable price"):
        prices.usd_per_unit(payments.eth, client)


def test_log_fields_are_the_nodes_strings() -> None:
    topic = "0x" + "00" * 12 + "ab" * 20
    entry = Log(
        address="0x" + "11" * 20,
        topics=["0x" + "dd" * 32, "0x" + "00" * 12 + "cd" * 20, topic],
        data="0x" + (2**255).to_bytes(32, "big").hex(),
        block_number=1,
        block_hash="0x" + "22" * 32,
        tx_hash="0x" + "33" * 32,
        log_index=0,
    )
    assert (entry.from_address, entry.to_address, entry.amount) == (OTHER, RECIPIENT, 2**255)
