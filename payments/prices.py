"""USD prices for the native coin, read on-chain from a Chainlink-style feed."""

from __future__ import annotations

import time
from decimal import Decimal

from payments.models import Asset
from payments.nodes import NodeClient
from payments.rpc import LATEST_ROUND_DATA

FEED_DECIMALS = 8
SANE_USD_PER_ETH = (Decimal(10), Decimal(1_000_000))


class PriceUnavailable(Exception):
    """The feed is stale, absurd or unreachable: the coin is not offered until it is fixed."""


def usd_per_unit(asset: Asset, client: NodeClient, *, now: float | None = None) -> Decimal:
    """USD for one whole coin (1 ETH); 1 for stablecoins, priced at face value."""
    if not asset.is_native:
        return Decimal(1)
    if not asset.price_feed_address:
        raise PriceUnavailable(f"{asset} has no price feed")
    raw = client.eth_call(asset.price_feed_address, LATEST_ROUND_DATA)
    words = [int(raw[2 + 64 * i : 2 + 64 * (i + 1)], 16) for i in range(5)]
    answer = words[1] - (1 << 256) if words[1] >> 255 else words[1]  # int256
    updated_at = words[3]
    age = (now or time.time()) - updated_at
    if age > asset.feed_max_age_seconds:
        raise PriceUnavailable(f"{asset}: the price is {int(age)} s old")
    price = Decimal(answer) / (Decimal(10) ** FEED_DECIMALS)
    if not SANE_USD_PER_ETH[0] <= price <= SANE_USD_PER_ETH[1]:
        raise PriceUnavailable(f"{asset}: {price} USD is not a believable price")
    return price
