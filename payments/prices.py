"""USD prices for the native coin, read on-chain from a Chainlink-style feed."""

from __future__ import annotations

import time
from decimal import Decimal

from eth_typing import ABI

from payments.models import Asset
from payments.nodes import NodeClient
from payments.rpc import DECIMALS_FUNCTION, RpcError

FEED_DECIMALS = 8
AGGREGATOR_V3_ABI: ABI = [
    DECIMALS_FUNCTION,
    {
        "type": "function",
        "name": "latestRoundData",
        "stateMutability": "view",
        "inputs": [],
        "outputs": [
            {"name": "roundId", "type": "uint80"},
            {"name": "answer", "type": "int256"},
            {"name": "startedAt", "type": "uint256"},
            {"name": "updatedAt", "type": "uint256"},
            {"name": "answeredInRound", "type": "uint80"},
        ],
    },
]
"""What is read of a Chainlink-style feed (AggregatorV3Interface)."""
SANE_USD_PER_ETH = (Decimal(10), Decimal(1_000_000))


class PriceUnavailable(Exception):
    """The feed is stale, absurd or unreachable: the coin is not offered until it is fixed."""


def usd_per_unit(asset: Asset, client: NodeClient, *, now: float | None = None) -> Decimal:
    """USD for one whole coin (1 ETH); 1 for stablecoins, priced at face value."""
    if not asset.is_native:
        return Decimal(1)
    if not asset.price_feed_address:
        raise PriceUnavailable(f"{asset} has no price feed")
    _round, answer, _started_at, updated_at, _answered_in = client.read(
        asset.price_feed_address, AGGREGATOR_V3_ABI, "latestRoundData"
    )
    age = (now or time.time()) - updated_at
    if age > asset.feed_max_age_seconds:
        raise PriceUnavailable(f"{asset}: the price is {int(age)} s old")
    price = Decimal(answer) / (Decimal(10) ** FEED_DECIMALS)
    if not SANE_USD_PER_ETH[0] <= price <= SANE_USD_PER_ETH[1]:
        raise PriceUnavailable(f"{asset}: {price} USD is not a believable price")
    return price


def feed_decimals(feed: str, client: NodeClient) -> int | None:
    """The feed's ``decimals()``; None: no such function (or no contract) there."""
    try:
        return int(client.read(feed, AGGREGATOR_V3_ABI, "decimals"))
    except RpcError:
        return None
