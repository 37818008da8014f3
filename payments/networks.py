"""Presets for the public networks an operator may accept payments on (``manage.py
load_networks``); the local dev chain (payments.devchain, chain id 31337) stays the default.

Every chain id and contract address below was checked against public documentation; the
``source`` next to each is where. Only the issuers' own tokens are listed: native USDC from
Circle (never the bridged USDC.e / USDbC), and USDT as Tether issues it on that network
(on Ethereum the original contract; on Arbitrum, OP Mainnet and Polygon PoS the contract is
Tether's omnichain USDT0, whose ``symbol()`` is what the contract says, e.g. "USD₮0"). Base
has no USDT from Tether (only bridged ones), so none is listed there.

How a payment counts as confirmed: every preset uses the node's ``finalized`` block
(``use_finalized_tag``), the chain's own guarantee that the block cannot be reorganised.
``confirmations`` is then set to about the depth at which finality arrives, so that the
payment panel counts towards a meaningful figure and so that a chain switched to counting
confirmations instead keeps about the same safety; it is never below ``min_confirmations``,
the depth Circle's CCTP waits for hard finality on that chain. ``reorg_window`` (the blocks
read again every scan) covers the usual distance from the head to the finalized block,
``finality_seconds``, with room to spare: a payment is re-checked until it is final.

No native-coin price feed is preset: Chainlink publishes its feed addresses only through
its live directory, which could not be checked here, and the feeds on the rollups would also
need the sequencer-uptime check that payments.prices does not make. The native coins are
therefore created inactive and unpriced; an operator who wants them adds a verified feed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

CIRCLE_USDC = "https://developers.circle.com/stablecoins/usdc-contract-addresses"
"""Circle's list of USDC contracts per chain (native USDC)."""
CIRCLE_FINALITY = "https://developers.circle.com/cctp/v1/required-block-confirmations"
"""How many blocks Circle's CCTP waits for hard finality per source chain."""
CHAINLIST = "https://github.com/ethereum-lists/chains/blob/master/_data/chains/eip155-{id}.json"
"""The chain registry behind chainlist.org: chain id, name, native currency."""
TETHER_USDT0 = (
    "https://github.com/tetherto/wdk-protocol-bridge-usdt0-evm/blob/main/src/usdt0-protocol-evm.js"
)
"""Tether's own USDT0 bridge library (USDT on Ethereum; the USDT0 deployments per chain)."""


@dataclass(frozen=True)
class TokenPreset:
    symbol: str
    """Exactly what the contract's ``symbol()`` answers (the integrity check compares)."""
    contract_address: str
    """EIP-55 checksummed."""
    decimals: int
    issuer: str
    source: str
    """Where the address was checked."""


@dataclass(frozen=True)
class NetworkPreset:
    key: str
    chain_id: int
    name: str
    native_symbol: str
    block_time_seconds: Decimal
    """Approximate; for sizing the windows below."""
    use_finalized_tag: bool
    confirmations: int
    min_confirmations: int
    """The least confirmations that stand in for finality on this chain (Circle's CCTP)."""
    finality_seconds: int
    """About how far behind the head the finalized block usually is (a generous figure)."""
    reorg_window: int
    block_range_limit: int
    tokens: tuple[TokenPreset, ...]
    aliases: tuple[str, ...] = ()
    chain_source: str = ""
    price_feed_address: str = ""
    """A verified Chainlink-style native/USD feed; none is preset (see the module docstring)."""

    @property
    def finality_blocks(self) -> int:
        """``finality_seconds`` in blocks: the least re-check window."""
        return math.ceil(Decimal(self.finality_seconds) / self.block_time_seconds)


ETHEREUM = NetworkPreset(
    key="ethereum",
    aliases=("mainnet", "eth"),
    chain_id=1,
    chain_source=CHAINLIST.format(id=1),
    name="Ethereum",
    native_symbol="ETH",
    block_time_seconds=Decimal(12),
    # Finalized after two epochs: usually 64-95 blocks behind the head, 13-19 minutes
    # (Circle waits ~65 blocks: CIRCLE_FINALITY). Deeper only while finality stalls, which
    # the scanner reports as a reorganisation deeper than the window.
    use_finalized_tag=True,
    confirmations=65,
    min_confirmations=65,
    finality_seconds=19 * 60,
    reorg_window=128,
    block_range_limit=2000,
    tokens=(
        TokenPreset(
            symbol="USDC",
            contract_address="0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48",
            decimals=6,
            issuer="Circle",
            source=CIRCLE_USDC,
        ),
        TokenPreset(
            symbol="USDT",
            contract_address="0xdAC17F958D2ee523a2206206994597C13D831ec7",
            decimals=6,
            issuer="Tether",
            source=TETHER_USDT0,  # USDT_MAINNET_ADDRESS there
        ),
    ),
)

BASE = NetworkPreset(
    key="base",
    chain_id=8453,
    chain_source=CHAINLIST.format(id=8453),
    name="Base",
    native_symbol="ETH",
    block_time_seconds=Decimal(2),
    # OP Stack: a block is finalized once the batch holding it is in a finalized Ethereum
    # block, "typically around 20-30 minutes" (Optimism's docs, stack/transactions/
    # transaction-finality); Circle waits for ~65 Ethereum blocks after the batch.
    use_finalized_tag=True,
    confirmations=600,
    min_confirmations=390,  # ~65 Ethereum blocks (13 minutes) in 2-second blocks
    finality_seconds=30 * 60,
    reorg_window=1200,
    block_range_limit=2000,
    tokens=(
        TokenPreset(
            symbol="USDC",
            contract_address="0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
            decimals=6,
            issuer="Circle",
            # also the Superchain token list: github.com/ethereum-optimism/
            # ethereum-optimism.github.io/blob/master/data/USDC/data.json ("base")
            source=CIRCLE_USDC,
        ),
        # No USDT: Tether issues none on Base; the Superchain token list has only a bridged
        # "Stargate USD₮0 (Bridged)" there.
    ),
)

ARBITRUM = NetworkPreset(
    key="arbitrum",
    aliases=("arbitrum-one", "arb"),
    chain_id=42161,
    chain_source=CHAINLIST.format(id=42161),
    name="Arbitrum One",
    native_symbol="ETH",
    block_time_seconds=Decimal("0.25"),
    # Finalized once the sequencer's batch is in a finalized Ethereum block: ~18 minutes
    # (Wormhole's consistency levels; Circle: ~65 Ethereum blocks after the batch); blocks
    # come every ~250 ms, so that is several thousand blocks.
    use_finalized_tag=True,
    confirmations=4800,
    min_confirmations=3120,  # ~65 Ethereum blocks (13 minutes) in 250-ms blocks
    finality_seconds=30 * 60,
    reorg_window=9600,
    block_range_limit=2000,
    tokens=(
        TokenPreset(
            symbol="USDC",
            contract_address="0xaf88d065e77c8cC2239327C5EDb3A432268e5831",
            decimals=6,
            issuer="Circle",
            source=CIRCLE_USDC,  # native USDC; the bridged USDC.e is 0xFF970A61…
        ),
        TokenPreset(
            symbol="USD₮0",
            contract_address="0xFd086bC7CD5C481DCC9C85ebE478A1C0b69FCbb9",
            decimals=6,
            issuer="Tether (USDT0)",
            # Tether's library tests use it on chain 42161 (tests/usdt0-protocol-evm.test.js);
            # its symbol() since the USDT0 upgrade: github.com/OffchainLabs/
            # arbitrum-token-lists/pull/158
            source=TETHER_USDT0,
        ),
    ),
)

OPTIMISM = NetworkPreset(
    key="optimism",
    aliases=("op", "op-mainnet"),
    chain_id=10,
    chain_source=CHAINLIST.format(id=10),
    name="OP Mainnet",
    native_symbol="ETH",
    block_time_seconds=Decimal(2),
    # OP Stack, as Base.
    use_finalized_tag=True,
    confirmations=600,
    min_confirmations=390,
    finality_seconds=30 * 60,
    reorg_window=1200,
    block_range_limit=2000,
    tokens=(
        TokenPreset(
            symbol="USDC",
            contract_address="0x0b2C639c533813f4Aa9D7837CAf62653d097Ff85",
            decimals=6,
            issuer="Circle",
            source=CIRCLE_USDC,  # native USDC; the bridged USDC.e is 0x7F5c764c…
        ),
        TokenPreset(
            symbol="USD₮0",
            contract_address="0x01bFF41798a0BcF287b996046Ca68b395DbC1071",
            decimals=6,
            issuer="Tether (USDT0)",
            # The Superchain token list ("USD₮0 is the omnichain deployment of USDT"); the
            # older bridged USDT 0x94b008aA… is not Tether's.
            source=(
                "https://github.com/ethereum-optimism/ethereum-optimism.github.io/blob/"
                "master/data/USD%E2%82%AE0/data.json"
            ),
        ),
    ),
)

POLYGON = NetworkPreset(
    key="polygon",
    aliases=("polygon-pos", "matic", "pol"),
    chain_id=137,
    chain_source=CHAINLIST.format(id=137),
    name="Polygon PoS",
    native_symbol="POL",
    block_time_seconds=Decimal(2),
    # Deterministic finality by milestones (PIP-11), served as the "finalized" tag; Circle
    # waits ~33 blocks (75-120 s). Before milestones Polygon reorganised deeply (157 blocks in
    # February 2023): the re-check window still covers that, and 64 confirmations stand in
    # for finality with a margin should the tag be switched off.
    use_finalized_tag=True,
    confirmations=64,
    min_confirmations=33,
    finality_seconds=120,
    reorg_window=256,
    block_range_limit=2000,
    tokens=(
        TokenPreset(
            symbol="USDC",
            contract_address="0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359",
            decimals=6,
            issuer="Circle",
            # also circle.com/blog/what-you-need-to-know-native-usdc-on-polygon-pos (the
            # bridged USDC.e is 0x2791bca1…)
            source=CIRCLE_USDC,
        ),
        TokenPreset(
            symbol="USDT0",
            contract_address="0xc2132D05D31c914a87C6611C10748AEb04B58e8F",
            decimals=6,
            issuer="Tether (USDT0)",
            # Polygon's token list: the PoS USDT upgraded to USDT0 in August 2025, symbol
            # "USDT0", bridge adapter 0x6BA10300… (Tether's Polygon OFT in TETHER_USDT0's
            # src/config.js)
            source="https://github.com/0xPolygon/polygon-token-list/pull/760",
        ),
    ),
)

PRESETS: dict[str, NetworkPreset] = {
    preset.key: preset for preset in (ETHEREUM, BASE, ARBITRUM, OPTIMISM, POLYGON)
}
"""By key, in a stable order."""


class UnknownNetwork(KeyError):
    pass


def preset_named(name: str) -> NetworkPreset:
    """The preset a key or alias names (any case); UnknownNetwork otherwise."""
    wanted = name.strip().lower()
    for preset in PRESETS.values():
        if wanted == preset.key or wanted in preset.aliases:
            return preset
    raise UnknownNetwork(name)


def known_names() -> str:
    return ", ".join(PRESETS)
