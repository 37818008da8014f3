"""Against a real anvil: the payment configuration cannot sell a lot for nothing (issue 11,
findings 1-3).

Only an active coin on an active chain is invoiced, whatever the form posts; a payment to an
invoice whose chain was turned off afterwards is recorded but never settles by itself; a
coin whose contract contradicts its configuration (decimals, symbol, chain id) is neither
saved in the desk nor invoiced; and one index of the operator's key is one address on one
chain only, so a payment sent on the wrong network never reaches another order's invoice.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from accounts.models import User
from api.models import ApiToken
from payments import claims, devchain, invoicing, scanning, settlement, tasks
from payments.admin import AssetForm
from payments.derivation import address_at, fingerprint
from payments.devchain import DevChain
from payments.models import Asset, Chain, DepositAddress, Invoice, Transfer
from payments.rpc import RpcClient
from reservations.errors import BookingRefused
from reservations.models import Order, OrderEvent
from reservations.services import Actor, place_order
from tests.conftest import Payments, RequestFactory

pytestmark = pytest.mark.django_db

OTHER_CHAIN_ID = 31338


@pytest.fixture
def operator_mail(settings: Any) -> list[Any]:
    settings.ADMINS = [("Operator", "desk@example.org")]
    return mail.outbox


@pytest.fixture(scope="module")
def other_anvil() -> Iterator[str]:
    """A second chain (another chain id) with the same contracts at the same addresses."""
    port = devchain.free_port()
    process = devchain.start_anvil(port, chain_id=OTHER_CHAIN_ID)
    url = f"http://127.0.0.1:{port}"
    DevChain(url).deploy()
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def state(invoice: Invoice) -> tuple[str, str]:
    invoice.refresh_from_db()
    return invoice.status, invoice.exception


def scan(chain: Chain) -> scanning.ScanReport:
    return scanning.scan_chain(Chain.objects.get(pk=chain.pk))


def api_token(order: Order) -> str:
    user = User.objects.create_user("ada@example.org")
    Order.objects.filter(pk=order.pk).update(user=user)
    return ApiToken.issue(user, "pipeline")[1]


def choose_by_api(client: Client, order: Order, token: str, symbol: str) -> Any:
    return client.post(
        f"/api/v1/orders/{order.reference}/invoice/",
        {"asset": symbol},
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )


# --------------------------------------------------------------------------- 1: inactive


def test_the_order_page_cannot_invoice_a_coin_on_an_inactive_chain(
    client: Client, payments: Payments, order: Order
) -> None:
    # A retired network, marked inactive; its coin's own row is still active.
    Chain.objects.filter(pk=payments.chain.pk).update(is_active=False)
    response = client.post(
        f"/en/orders/{order.reference}/{order.secret}/payment/asset/",
        {"asset": payments.usdc.pk},
        follow=True,
    )
    assert "Choose one of the offered options." in response.content.decode()
    assert not Invoice.objects.exists()
    assert not DepositAddress.objects.exists()


@pytest.mark.parametrize("turned_off", ["chain", "asset"])
def test_the_service_refuses_a_coin_that_is_not_offered(
    payments: Payments, order: Order, turned_off: str
) -> None:
    if turned_off == "chain":
        Chain.objects.filter(pk=payments.chain.pk).update(is_active=False)
    else:
        Asset.objects.filter(pk=payments.usdc.pk).update(is_active=False)
    with pytest.raises(BookingRefused) as refused:
        invoicing.create_invoice(order, payments.usdc)  # the caller's stale object says active
    assert refused.value.error_dict["asset"][0].code == "invalid_choice"
    assert not Invoice.objects.exists()


def test_the_service_refuses_the_current_invoice_again_once_its_chain_is_turned_off(
    payments: Payments, order: Order
) -> None:
    invoicing.create_invoice(order, payments.usdc)
    Chain.objects.filter(pk=payments.chain.pk).update(is_active=False)
    with pytest.raises(BookingRefused) as refused:
        invoicing.create_invoice(order, payments.usdc)
    assert refused.value.error_dict["asset"][0].code == "invalid_choice"


def test_a_payment_on_a_chain_turned_off_is_recorded_but_never_settles_by_itself(
    payments: Payments, order: Order, operator_mail: list[Any], eager_tasks: None
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)  # made while the chain was active
    Chain.objects.filter(pk=payments.chain.pk).update(is_active=False)  # then retired
    tx = payments.dev.pay_invoice(invoice)  # tokens anyone may mint there
    payments.dev.mine(3)

    # Beat still scans a chain with watched invoices: the money is recorded, not settled.
    tasks.scan_open_invoices()
    assert Transfer.objects.filter(invoice=invoice, tx_hash=tx).exists()
    assert state(invoice) == (Invoice.STATUS_PROCESSING, "")
    # "I've paid" verifies the same way.
    claims.claim_payment(invoice, tx)
    claims.verify_claim(invoice.pk)
    assert state(invoice) == (Invoice.STATUS_PROCESSING, "")
    assert Invoice.objects.get(pk=invoice.pk).claim_result == "pays_invoice"
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_AWAITING_PAYMENT

    # The operator is told once, and the order's history says what happened.
    held = [m for m in operator_mail if "inactive chain or coin is held" in m.subject]
    assert len(held) == 1
    assert order.reference in held[0].subject
    assert OrderEvent.objects.filter(order=order, reason__contains="is held, not settled").count()

    # After the deadline: paid after expiry, for the operator to accept or refund.
    Invoice.objects.filter(pk=invoice.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    scan(payments.chain)
    assert state(invoice) == (Invoice.STATUS_EXPIRED, Invoice.EXCEPTION_PAID_LATE)
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_AWAITING_PAYMENT
    assert len([m for m in operator_mail if "is held" in m.subject]) == 1
    settlement.accept_late_payment(invoice, actor=Actor("operator"))
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_PAID


def test_a_payment_in_a_coin_turned_off_settles_once_it_is_turned_on_again(
    payments: Payments, order: Order
) -> None:
    invoice = invoicing.create_invoice(order, payments.eth)
    Asset.objects.filter(pk=payments.eth.pk).update(is_active=False)
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(3)
    scan(payments.chain)
    assert state(invoice) == (Invoice.STATUS_PROCESSING, "")
    Asset.objects.filter(pk=payments.eth.pk).update(is_active=True)
    scan(payments.chain)
    assert state(invoice) == (Invoice.STATUS_SETTLED, "")
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_PAID


# --------------------------------------------------------------------------- 2: decimals


@pytest.fixture
def usdt_18(payments: Payments) -> str:
    """A USDT whose contract counts in 10⁻¹⁸ (as on BNB Chain), with tokens for the payer."""
    return payments.dev.deploy_token("Tether USD", "USDT", 18, mint=10**6 * 10**18)


def test_a_contract_with_18_decimals_configured_as_6_is_never_invoiced(
    client: Client, payments: Payments, order: Order, usdt_18: str, operator_mail: list[Any]
) -> None:
    # Saved past the desk (a fixture, a script, a row from before the check).
    usdt = Asset.objects.create(
        chain=payments.chain, symbol="USDT", contract_address=usdt_18, decimals=6
    )
    with pytest.raises(BookingRefused) as refused:
        invoicing.create_invoice(order, usdt)
    assert refused.value.error_dict["asset"][0].code == "asset_misconfigured"
    assert "Choose another coin" in refused.value.messages[0]
    assert usdt not in invoicing.offered_assets()

    token = api_token(order)
    answer = choose_by_api(client, order, token, "USDT")
    assert answer.status_code == 400
    assert answer.json()["code"] == "asset_misconfigured"
    page = client.post(
        f"/en/orders/{order.reference}/{order.secret}/payment/asset/",
        {"asset": usdt.pk},
        follow=True,
    ).content.decode()
    assert "does not match the payment network" in page
    assert not Invoice.objects.exists()

    # The operator hears of it once, with what is wrong.
    alerts = [m for m in operator_mail if "does not match the chain" in m.subject]
    assert len(alerts) == 1
    assert "has 18 decimals, the configuration says 6" in alerts[0].body

    # Fixed: invoiced at its true scale, $500 as 500 × 10¹⁸ units.
    Asset.objects.filter(pk=usdt.pk).update(decimals=18)
    invoice = invoicing.create_invoice(order, usdt)
    assert invoice.amount_due == Decimal(500) * 10**18


def test_a_wrong_symbol_or_an_address_without_a_contract_is_refused_before_invoicing(
    payments: Payments, order: Order, usdt_18: str
) -> None:
    wrong_symbol = Asset.objects.create(
        chain=payments.chain, symbol="DAI", contract_address=usdt_18, decimals=18
    )
    no_contract = Asset.objects.create(
        chain=payments.chain, symbol="USDT", contract_address=devchain.PAYER, decimals=6
    )
    for asset in (wrong_symbol, no_contract):
        with pytest.raises(BookingRefused) as refused:
            invoicing.create_invoice(order, asset)
        assert refused.value.error_dict["asset"][0].code == "asset_misconfigured"
    assert not Invoice.objects.exists()


def test_the_check_before_invoicing_asks_the_contract_and_is_then_kept_for_a_while(
    payments: Payments, order: Order, settings: Any
) -> None:
    settings.PAYMENT_ASSET_CHECK_SECONDS = 300
    client = RpcClient(payments.chain.rpc_url)
    first = invoicing.create_invoice(order, payments.usdc, client=client)
    # eth_chainId, eth_getCode, decimals(), symbol(), then the chain head.
    assert client.requests_made == 5
    Invoice.objects.filter(pk=first.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    invoicing.create_invoice(order, payments.usdc, client=client)  # a new USDC invoice
    assert client.requests_made == 6  # only the chain head: the check is remembered


ASSET_FORM = {
    "symbol": "USDT",
    "decimals": "6",
    "price_feed_address": "",
    "feed_max_age_seconds": "3600",
    "invoice_minutes": "0",
    "is_active": "on",
    "display_order": "0",
}


def test_the_desk_refuses_to_save_a_coin_its_contract_contradicts(
    client: Client, payments: Payments, usdt_18: str
) -> None:
    client.force_login(User.objects.create_superuser("op@example.org", "a-long-password-1"))
    url = "/admin/payments/asset/add/"
    base = {**ASSET_FORM, "chain": payments.chain.pk, "contract_address": usdt_18}
    cases: list[tuple[dict[str, str], str]] = [
        ({}, "has 18 decimals, the configuration says 6"),
        ({"decimals": "18", "symbol": "USDC.e"}, "is &#x27;USDT&#x27;"),
        ({"contract_address": devchain.PAYER}, "there is no contract at"),
    ]
    for change, error in cases:
        response = client.post(url, {**base, **change})
        assert response.status_code == 200, change
        html = response.content.decode()
        assert error in html, change
        assert "Nothing was saved." in html
        assert not Asset.objects.filter(symbol__in=("USDT", "USDC.e")).exists()

    assert client.post(url, {**base, "decimals": "18"}).status_code == 302
    assert Asset.objects.get(symbol="USDT").decimals == 18


def test_the_desk_refuses_an_active_coin_it_cannot_check_and_saves_an_inactive_one(
    client: Client, payments: Payments
) -> None:
    client.force_login(User.objects.create_superuser("op@example.org", "a-long-password-1"))
    dead = Chain.objects.create(
        chain_id=11155111,
        name="Retired testnet",
        rpc_url=f"http://127.0.0.1:{devchain.free_port()}",  # nothing listens
    )
    data = {**ASSET_FORM, "chain": dead.pk, "contract_address": devchain.USDC}
    response = client.post("/admin/payments/asset/add/", data)
    assert response.status_code == 200
    assert "cannot be asked" in response.content.decode()
    assert "Save it inactive" in response.content.decode()
    assert not Asset.objects.filter(chain=dead).exists()

    inactive = {key: value for key, value in data.items() if key != "is_active"}
    assert client.post("/admin/payments/asset/add/", inactive).status_code == 302
    assert not Asset.objects.get(chain=dead).is_active


def test_the_desk_refuses_a_chain_id_its_node_does_not_serve(
    payments: Payments, other_anvil: str
) -> None:
    # The configuration says the dev chain; the node serves another one.
    Chain.objects.filter(pk=payments.chain.pk).update(rpc_url=other_anvil)
    form = AssetForm(
        data={**ASSET_FORM, "chain": payments.chain.pk, "contract_address": devchain.FAKE_USDC},
    )
    assert not form.is_valid()
    assert f"serves chain id {OTHER_CHAIN_ID}, not {devchain.CHAIN_ID}" in str(form.errors)


def chain_page(chain: Chain, **changes: str) -> dict[str, Any]:
    """The chain's change form in the desk, its coins inline, as a browser posts it."""
    data: dict[str, Any] = {
        "chain_id": chain.chain_id,
        "name": chain.name,
        "rpc_url": chain.rpc_url,
        "confirmations": chain.confirmations,
        "block_range_limit": chain.block_range_limit,
        "reorg_window": chain.reorg_window,
        "quorum": chain.quorum,
        "is_active": "on",
        "endpoints-TOTAL_FORMS": 0,
        "endpoints-INITIAL_FORMS": 0,
        "endpoints-MIN_NUM_FORMS": 0,
        "endpoints-MAX_NUM_FORMS": 1000,
        "assets-TOTAL_FORMS": chain.assets.count(),
        "assets-INITIAL_FORMS": chain.assets.count(),
        "assets-MIN_NUM_FORMS": 0,
        "assets-MAX_NUM_FORMS": 1000,
    }
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
            "is_active": "on",
            "display_order": asset.display_order,
        }
        data.update({f"assets-{i}-{name}": value for name, value in fields.items()})
    data.update(changes)
    return {key: value for key, value in data.items() if value != "off"}


def test_the_chain_page_refuses_a_node_of_another_chain_and_saves_a_chain_turned_off(
    client: Client, payments: Payments, other_anvil: str
) -> None:
    client.force_login(User.objects.create_superuser("op@example.org", "a-long-password-1"))
    url = f"/admin/payments/chain/{payments.chain.pk}/change/"
    response = client.post(url, chain_page(payments.chain, rpc_url=other_anvil))
    assert response.status_code == 200
    assert f"serves chain id {OTHER_CHAIN_ID}, not {devchain.CHAIN_ID}" in response.content.decode()
    assert Chain.objects.get(pk=payments.chain.pk).rpc_url == payments.chain.rpc_url

    # Retiring a chain whose node is gone needs no node.
    gone = f"http://127.0.0.1:{devchain.free_port()}"
    response = client.post(url, chain_page(payments.chain, rpc_url=gone, is_active="off"))
    assert response.status_code == 302
    assert not Chain.objects.get(pk=payments.chain.pk).is_active


# --------------------------------------------------------------------------- 3: one index space


def test_two_chains_never_share_a_deposit_address(
    payments: Payments, order: Order, make_request: RequestFactory, other_anvil: str
) -> None:
    other = Chain.objects.create(
        chain_id=OTHER_CHAIN_ID, name="Second chain", rpc_url=other_anvil, confirmations=2
    )
    usdc_there = Asset.objects.create(
        chain=other, symbol="USDC", contract_address=devchain.USDC, decimals=6
    )
    second = place_order(make_request(lot_count=1, window_days=3))
    here = invoicing.create_invoice(order, payments.usdc)
    there = invoicing.create_invoice(second, usdc_there)
    assert here.deposit_address.address != there.deposit_address.address
    assert here.deposit_address.index != there.deposit_address.index

    # Paid on the wrong network, to the first order's address: it reaches no invoice there.
    DevChain(other_anvil).pay_token(here.deposit_address.address, int(here.amount_due))
    DevChain(other_anvil).mine(3)
    scan(other)
    assert state(there) == (Invoice.STATUS_NEW, "")
    assert Order.objects.get(pk=second.pk).status == Order.STATUS_AWAITING_PAYMENT


def test_indexes_used_before_one_index_space_are_never_handed_out_again(
    payments: Payments, order: Order, other_anvil: str
) -> None:
    other = Chain.objects.create(chain_id=OTHER_CHAIN_ID, name="Second", rpc_url=other_anvil)
    # As the per-chain allocator left them: indexes 0-4 on one chain, 0-6 on the other.
    for chain, count in ((payments.chain, 5), (other, 7)):
        DepositAddress.objects.bulk_create(
            DepositAddress(chain=chain, index=i, address=address_at(i)) for i in range(count)
        )
    invoice = invoicing.create_invoice(order, payments.usdc)
    assert invoice.deposit_address.index == 7
    assert invoice.deposit_address.address == address_at(7)
    assert invoice.deposit_address.xpub_fingerprint == fingerprint()
