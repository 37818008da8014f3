"""The network presets (payments.networks) are consistent, without asking any network: chain
ids and contracts as documented, confirmation rules that cover each chain's finality; and
``load_networks`` loads them inactive, idempotently, never touching the dev chain, and
nothing on such a chain is invoiced before its coins are checked against a node that answers.
"""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.forms.models import model_to_dict
from django.test import Client
from eth_utils import is_checksum_address

from accounts.models import User
from payments import devchain, invoicing
from payments.admin import AssetForm
from payments.models import Asset, Chain, DepositAddress, Invoice
from payments.networks import PRESETS, NetworkPreset, preset_named
from payments.rpc import RpcUnavailable
from reservations.errors import MESSAGES
from reservations.models import Order

DOCUMENTED_CHAIN_IDS = {
    "ethereum": 1,
    "base": 8453,
    "arbitrum": 42161,
    "optimism": 10,
    "polygon": 137,
}
"""chainlist.org (ethereum-lists/chains, _data/chains/eip155-<id>.json)."""
NATIVE = {"ethereum": "ETH", "base": "ETH", "arbitrum": "ETH", "optimism": "ETH", "polygon": "POL"}
CIRCLE_USDC = {
    "ethereum": "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48",
    "base": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
    "arbitrum": "0xaf88d065e77c8cC2239327C5EDb3A432268e5831",
    "optimism": "0x0b2C639c533813f4Aa9D7837CAf62653d097Ff85",
    "polygon": "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359",
}
"""Circle's USDC contract addresses page, mainnet table (native USDC)."""
BRIDGED = {
    "0xFF970A61A04b1cA14834A43f5dE4533eBDDB5CC8",  # USDC.e, Arbitrum
    "0x7F5c764cBc14f9669B88837ca1490cCa17c31607",  # USDC.e, OP Mainnet
    "0x2791Bca1f2de4661ED88A30C99A7a9449Aa84174",  # USDC.e, Polygon PoS
    "0xd9aAEc86B65D86f6A7B5B1b0c42FFA531710b6CA",  # USDbC, Base
    "0x94b008aA00579c1307B0EF2c499aD98a8ce58e58",  # bridged USDT, OP Mainnet
    "0xfde4C96c8593536E31F229EA8f37b2ADa2699bb2",  # bridged USDT, Base
}
"""Bridged stand-ins that must never be preset as the issuer's coin."""
STABLE_SYMBOLS = {"USDC", "USDT", "USD₮0", "USDT0"}
STATED_MINIMUM_CONFIRMATIONS = {
    "ethereum": 64,  # two epochs
    "base": 390,  # ~65 Ethereum blocks (13 minutes) after the batch, in 2-second blocks
    "optimism": 390,
    "arbitrum": 3120,  # the same 13 minutes in 250-ms blocks
    "polygon": 33,  # milestones
}
"""The least confirmations that may stand in for finality: what Circle's CCTP waits for
hard finality per chain (developers.circle.com/cctp/v1/required-block-confirmations)."""

presets = pytest.mark.parametrize("preset", list(PRESETS.values()), ids=list(PRESETS))


def all_tokens() -> list[tuple[NetworkPreset, Any]]:
    return [(preset, token) for preset in PRESETS.values() for token in preset.tokens]


# --------------------------------------------------------------------------- the data


def test_the_five_networks_with_their_documented_chain_ids() -> None:
    assert {key: preset.chain_id for key, preset in PRESETS.items()} == DOCUMENTED_CHAIN_IDS
    assert len({preset.chain_id for preset in PRESETS.values()}) == len(PRESETS)
    assert devchain.CHAIN_ID not in {preset.chain_id for preset in PRESETS.values()}
    assert {key: preset.native_symbol for key, preset in PRESETS.items()} == NATIVE
    for preset in PRESETS.values():
        assert preset.chain_source.endswith(f"eip155-{preset.chain_id}.json")


def test_names_and_aliases_are_unambiguous() -> None:
    names = [name for p in PRESETS.values() for name in (p.key, *p.aliases)]
    assert len(names) == len(set(names))
    assert preset_named(" OP ") is PRESETS["optimism"]
    assert preset_named("Arbitrum-One") is PRESETS["arbitrum"]


def test_every_contract_is_checksummed_unique_documented_and_six_decimals() -> None:
    addresses = [token.contract_address for _, token in all_tokens()]
    assert all(is_checksum_address(address) for address in addresses), addresses
    assert len({address.lower() for address in addresses}) == len(addresses)
    assert not {address.lower() for address in addresses} & {b.lower() for b in BRIDGED}
    for _, token in all_tokens():
        assert token.symbol in STABLE_SYMBOLS, token
        assert token.decimals == 6, token
        assert token.source.startswith("https://"), token
        assert len(token.symbol) <= Asset._meta.get_field("symbol").max_length  # type: ignore[operator]
    for key, preset in PRESETS.items():
        usdc = [t for t in preset.tokens if t.symbol == "USDC"]
        assert [(t.contract_address, t.issuer) for t in usdc] == [(CIRCLE_USDC[key], "Circle")]
        assert len({t.symbol for t in preset.tokens}) == len(preset.tokens)
        assert not preset.price_feed_address  # none could be verified: natives stay inactive


def test_usdt_only_where_tether_issues_it() -> None:
    tether = {key for key, p in PRESETS.items() for t in p.tokens if t.issuer.startswith("Tether")}
    assert tether == {"ethereum", "arbitrum", "optimism", "polygon"}  # none on Base


@presets
def test_confirmation_rules_cover_the_chains_finality(preset: NetworkPreset) -> None:
    stated = STATED_MINIMUM_CONFIRMATIONS[preset.key]
    assert preset.min_confirmations >= stated
    # Counting confirmations (the tag off) keeps at least the stated minimum; with the tag on
    # the panel counts towards about where finality arrives.
    assert preset.confirmations >= preset.min_confirmations
    if not preset.use_finalized_tag:
        assert preset.confirmations >= stated
    assert preset.reorg_window >= preset.confirmations
    assert preset.reorg_window >= preset.finality_blocks  # re-checked until final
    assert 1 <= preset.block_range_limit <= 10_000
    assert preset.confirmations <= 32767  # a PositiveSmallIntegerField


@presets
def test_the_models_own_validation_accepts_each_preset(preset: NetworkPreset) -> None:
    chain = Chain(
        chain_id=preset.chain_id,
        name=preset.name,
        rpc_url="https://node.example",
        confirmations=preset.confirmations,
        use_finalized_tag=preset.use_finalized_tag,
        block_range_limit=preset.block_range_limit,
        reorg_window=preset.reorg_window,
        is_active=False,
    )
    chain.full_clean(validate_unique=False, validate_constraints=False)


# --------------------------------------------------------------------------- the command


def load(*args: str) -> str:
    out = StringIO()
    call_command("load_networks", *args, stdout=out, stderr=out)
    return out.getvalue()


def snapshot(chain: Chain) -> dict[str, Any]:
    chain = Chain.objects.get(pk=chain.pk)
    return {
        "chain": model_to_dict(chain),
        "assets": [model_to_dict(a) for a in chain.assets.order_by("pk")],
    }


@pytest.mark.django_db
def test_loading_every_preset_leaves_them_inactive_and_the_dev_chain_as_it_was() -> None:
    dev = devchain.configure("http://127.0.0.1:8545")
    before = snapshot(dev)

    output = load("--all", "--update")  # even --update never reaches the dev chain
    assert snapshot(dev) == before
    assert Chain.objects.filter(is_active=True).get() == dev  # still the only active chain
    assert output.count("created INACTIVE") == len(PRESETS)

    for preset in PRESETS.values():
        chain = Chain.objects.get(chain_id=preset.chain_id)
        assert not chain.is_active
        assert chain.rpc_url == ""
        assert (chain.name, chain.confirmations, chain.use_finalized_tag) == (
            preset.name,
            preset.confirmations,
            preset.use_finalized_tag,
        )
        assert (chain.reorg_window, chain.block_range_limit) == (
            preset.reorg_window,
            preset.block_range_limit,
        )
        tokens = {a.symbol: a for a in chain.assets.exclude(contract_address="")}
        assert {s: (a.contract_address, a.decimals, a.is_active) for s, a in tokens.items()} == {
            t.symbol: (t.contract_address, 6, True) for t in preset.tokens
        }
        native = chain.assets.get(contract_address="")
        assert (native.symbol, native.decimals, native.is_active, native.price_feed_address) == (
            preset.native_symbol,
            18,
            False,
            "",
        )
        for asset in chain.assets.all():
            asset.full_clean()
    # Nothing of theirs is offered: their chains are off; the dev chain's USDC still is, and
    # setting the dev chain up again works as before.
    assert {a.chain_id for a in invoicing.offered_assets()} == {dev.pk}
    assert devchain.configure("http://127.0.0.1:8545") == dev
    assert snapshot(dev) == before


@pytest.mark.django_db
def test_loading_again_changes_nothing_and_keeps_what_the_operator_edited() -> None:
    load("base", "polygon")
    counts = (Chain.objects.count(), Asset.objects.count())
    base = Chain.objects.get(chain_id=8453)
    Chain.objects.filter(pk=base.pk).update(
        confirmations=20, reorg_window=40, rpc_url="https://operator.example", is_active=True
    )
    edited = snapshot(base)

    output = load("base", "polygon", "--rpc-url", "base=https://other.example")
    assert "exists, left as it is" in output
    assert "was not set" in output
    assert (Chain.objects.count(), Asset.objects.count()) == counts
    assert snapshot(base) == edited

    output = load("base", "--update")
    base.refresh_from_db()
    assert (base.confirmations, base.reorg_window) == (600, 1200)  # the preset's again
    assert (base.rpc_url, base.is_active) == ("https://operator.example", True)  # the operator's
    assert "updated (confirmations, reorg_window)" in output
    assert "already as the preset says" in load("base", "--update")
    assert (Chain.objects.count(), Asset.objects.count()) == counts


@pytest.mark.django_db
def test_an_rpc_url_is_set_but_the_chain_stays_inactive_until_the_operator_activates_it() -> None:
    output = load("base", "arbitrum", "--rpc-url", "base=https://base.example/key")
    base = Chain.objects.get(chain_id=8453)
    assert (base.rpc_url, base.is_active) == ("https://base.example/key", False)
    assert Chain.objects.get(chain_id=42161).rpc_url == ""
    assert "Base (8453): created INACTIVE, RPC URL https://base.example/key" in output
    assert "until you activate it in the desk" in output


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("solana",), "unknown network: 'solana'; known: ethereum, base, arbitrum"),
        (("base", "bsc", "tron"), "unknown networks: 'bsc', 'tron'"),
        ((), "name the networks to load"),
        (("base", "--all"), "not both"),
        (("base", "--rpc-url", "https://x.example"), "takes NETWORK=URL"),
        (("base", "--rpc-url", "bsc=https://x.example"), "unknown network 'bsc'"),
        (("base", "--rpc-url", "polygon=https://x.example"), "polygon is not being loaded"),
        (("base", "--rpc-url", "base=ftp://x.example"), "an http:// or https:// URL"),
    ],
)
def test_unknown_names_and_bad_arguments_are_refused_and_load_nothing(
    args: tuple[str, ...], message: str
) -> None:
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        load(*args)
    assert not Chain.objects.exists()


@pytest.mark.django_db
def test_update_renames_a_coin_by_its_contract_and_leaves_a_symbol_taken_by_another() -> None:
    arbitrum = Chain.objects.create(chain_id=42161, name="Arb", rpc_url="https://a.example")
    # By hand: Tether's contract under the old symbol; "USDC" given to the bridged USDC.e.
    Asset.objects.create(
        chain=arbitrum,
        symbol="USDT",
        contract_address="0xFd086bC7CD5C481DCC9C85ebE478A1C0b69FCbb9",
        decimals=6,
    )
    bridged = Asset.objects.create(
        chain=arbitrum,
        symbol="USDC",
        contract_address="0xFF970A61A04b1cA14834A43f5dE4533eBDDB5CC8",
        decimals=6,
    )
    output = load("arbitrum", "--update")
    assert arbitrum.assets.get(contract_address__startswith="0xFd08").symbol == "USD₮0"
    bridged.refresh_from_db()
    assert (bridged.symbol, bridged.contract_address) == (
        "USDC",
        "0xFF970A61A04b1cA14834A43f5dE4533eBDDB5CC8",
    )
    assert "USDC is configured with another contract" in output
    assert arbitrum.assets.get(contract_address="").symbol == "ETH"


# --------------------------------------------------------------------------- integrity


def dead_url() -> str:
    return f"http://127.0.0.1:{devchain.free_port()}"  # nothing listens


ASSET_FORM = {
    "symbol": "USDC",
    "decimals": "6",
    "price_feed_address": "",
    "feed_max_age_seconds": "3600",
    "invoice_minutes": "0",
    "is_active": "on",
    "display_order": "1",
}


@pytest.mark.django_db
def test_a_coin_of_an_inactive_preset_chain_saves_though_its_node_is_unreachable(
    client: Client,
) -> None:
    load("base", "--rpc-url", f"base={dead_url()}")
    base = Chain.objects.get(chain_id=8453)
    usdc = base.assets.get(symbol="USDC")
    data = {**ASSET_FORM, "chain": base.pk, "contract_address": usdc.contract_address}
    form = AssetForm(data=data, instance=usdc)
    assert form.is_valid(), form.errors  # not checked yet: checked when the chain is activated

    client.force_login(User.objects.create_superuser("op@example.org", "a-long-password-1"))
    response = client.post(f"/admin/payments/asset/{usdc.pk}/change/", data)
    assert response.status_code == 302
    response = client.post(
        "/admin/payments/asset/add/",
        {**data, "symbol": "TEST", "contract_address": devchain.FAKE_USDC},
    )
    assert response.status_code == 302
    assert base.assets.filter(symbol="TEST", is_active=True).exists()


@pytest.mark.django_db
def test_nothing_is_invoiced_on_a_preset_chain_before_its_node_answers(
    client: Client, order: Order
) -> None:
    load("base", "--rpc-url", f"base={dead_url()}")
    base = Chain.objects.get(chain_id=8453)
    usdc = base.assets.get(symbol="USDC")

    # In the desk, activating the chain checks its active coins first: the node must answer.
    client.force_login(User.objects.create_superuser("op@example.org", "a-long-password-1"))
    response = client.post(
        f"/admin/payments/chain/{base.pk}/change/", chain_form(base, is_active="on")
    )
    assert response.status_code == 200
    assert "cannot be asked" in response.content.decode()
    assert not Chain.objects.get(pk=base.pk).is_active

    # Turned on behind the desk's back: still no invoice until the coin is checked.
    Chain.objects.filter(pk=base.pk).update(is_active=True)
    with pytest.raises(RpcUnavailable):
        invoicing.create_invoice(order, usdc)
    response = client.post(
        f"/en/orders/{order.reference}/{order.secret}/payment/asset/",
        {"asset": usdc.pk},
        follow=True,
    )
    assert str(MESSAGES["chain_unreachable"]) in response.content.decode()
    assert not Invoice.objects.exists()
    assert not DepositAddress.objects.exists()


def chain_form(chain: Chain, **changes: str) -> dict[str, Any]:
    """The chain's change form as a browser posts it: its fields, no extra endpoints, its
    coins inline (as they are)."""
    data: dict[str, Any] = {
        "name": chain.name,
        "chain_id": chain.chain_id,
        "rpc_url": chain.rpc_url,
        "confirmations": chain.confirmations,
        "block_range_limit": chain.block_range_limit,
        "reorg_window": chain.reorg_window,
        "quorum": chain.quorum,
        "endpoints-TOTAL_FORMS": 0,
        "endpoints-INITIAL_FORMS": 0,
        "endpoints-MIN_NUM_FORMS": 0,
        "endpoints-MAX_NUM_FORMS": 1000,
        "assets-TOTAL_FORMS": chain.assets.count(),
        "assets-INITIAL_FORMS": chain.assets.count(),
        "assets-MIN_NUM_FORMS": 0,
        "assets-MAX_NUM_FORMS": 1000,
    }
    if chain.use_finalized_tag:
        data["use_finalized_tag"] = "on"
    if chain.is_active:
        data["is_active"] = "on"
    for i, asset in enumerate(chain.assets.order_by("pk")):
        fields = {
            "id": asset.pk,
            "chain": chain.pk,
            "symbol": asset.symbol,
            "contract_address": asset.contract_address,
            "decimals": asset.decimals,
            "price_feed_address": asset.price_feed_address,
            "feed_max_age_seconds": asset.feed_max_age_seconds,
            "invoice_minutes": asset.invoice_minutes,
            "display_order": asset.display_order,
        }
        if asset.is_active:
            fields["is_active"] = "on"
        data.update({f"assets-{i}-{name}": value for name, value in fields.items()})
    data.update(changes)
    return data
