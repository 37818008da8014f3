"""The order page's payment panel over HTTP: choose a coin, see what to pay, "I've paid"."""

from __future__ import annotations

import html as html_module
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
import segno
from django.core import mail
from django.test import Client
from django.utils import timezone

from payments import invoicing, scanning
from payments.expiry import expire_unpaid_holds
from payments.models import Chain, Invoice
from reservations.models import Order
from reservations.templatetags.money import units
from tests.conftest import Payments

pytestmark = pytest.mark.django_db


def page(client: Client, order: Order, language: str = "en") -> str:
    return client.get(f"/{language}/orders/{order.reference}/{order.secret}/").content.decode()


def base(order: Order, language: str = "en") -> str:
    return f"/{language}/orders/{order.reference}/{order.secret}/payment"


def test_the_researcher_chooses_a_coin_and_sees_where_and_how_much(
    client: Client, payments: Payments, order: Order
) -> None:
    html = page(client, order)
    assert "Choose how to pay:" in html
    response = client.post(f"{base(order)}/asset/", {"asset": payments.usdc.pk})
    assert response.status_code == 302
    invoice = Invoice.objects.get(order=order)
    html = page(client, order)
    assert invoice.deposit_address.address in html
    assert '<code id="pay-amount" data-testid="amount">500</code> USDC' in html
    assert "<svg" in html  # the QR code
    assert "I&#x27;ve paid" in html or "I've paid" in html


def test_the_panel_speaks_french(client: Client, payments: Payments, order: Order) -> None:
    invoicing.create_invoice(order, payments.usdc)
    html = page(client, order, "fr")
    assert "J\u2019ai payé" in html
    assert "En attente de votre paiement." in html


def test_a_malformed_hash_is_refused_on_the_page(
    client: Client, payments: Payments, order: Order
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    response = client.post(f"{base(order)}/paid/", {"tx_hash": "0x1234"}, follow=True)
    assert "0x followed by 64 hexadecimal digits" in response.content.decode()
    assert Invoice.objects.get(pk=invoice.pk).claimed_at is None


def test_ive_paid_records_the_claim(
    client: Client, payments: Payments, order: Order, django_capture_on_commit_callbacks: Any
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    with django_capture_on_commit_callbacks() as callbacks:
        client.post(f"{base(order)}/paid/", {"tx_hash": ""})
    assert len(callbacks) == 1  # the verification task, enqueued after commit
    assert Invoice.objects.get(pk=invoice.pk).claimed_at is not None
    assert "we are checking the chain now" in client.get(f"{base(order)}/").content.decode()


def test_the_panel_shows_progress_partial_payment_and_delays(
    client: Client, payments: Payments, order: Order
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice, invoice.asset.from_units(invoice.amount_due) / 2)
    scanning.scan_chain(Chain.objects.get(pk=payments.chain.pk))
    html = client.get(f"{base(order)}/").content.decode()
    assert "Partly paid: 250 USDC still due." in html
    assert "250 USDC received; 250 USDC still due." in html
    Invoice.objects.filter(pk=invoice.pk).update(check_delayed=True)
    assert "Checking is delayed" in client.get(f"{base(order)}/").content.decode()


def test_settling_mails_the_researcher(
    payments: Payments, order: Order, eager_tasks: None, django_capture_on_commit_callbacks: Any
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(2)
    with django_capture_on_commit_callbacks(execute=True):
        scanning.scan_chain(Chain.objects.get(pk=payments.chain.pk))
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_PAID
    (message,) = mail.outbox
    assert message.subject == f"Payment received for {order.reference}"


def test_an_expired_hold_mails_the_researcher(
    order: Order, eager_tasks: None, django_capture_on_commit_callbacks: Any
) -> None:
    Order.objects.filter(pk=order.pk).update(hold_expires_at=timezone.now() - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert expire_unpaid_holds() == 1
    (message,) = mail.outbox
    assert "the hold has ended" in message.subject


def test_a_payment_under_way_keeps_the_hold(payments: Payments, order: Order) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice)
    scanning.scan_chain(Chain.objects.get(pk=payments.chain.pk))
    assert Invoice.objects.get(pk=invoice.pk).status == Invoice.STATUS_PROCESSING
    Order.objects.filter(pk=order.pk).update(hold_expires_at=timezone.now() - timedelta(seconds=1))
    assert expire_unpaid_holds() == 0
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_AWAITING_PAYMENT


def test_eth_is_offered_only_while_its_price_is_fresh(
    client: Client, payments: Payments, order: Order
) -> None:
    invoicing.refresh_prices(payments.chain)
    assert [a.symbol for a in invoicing.offered_assets()] == ["USDC", "ETH"]
    assert "ETH · Local dev chain (anvil)" in page(client, order)

    payments.dev.set_price(3000, updated_at=1_000_000)  # stale
    invoicing.refresh_prices(payments.chain)
    assert [a.symbol for a in invoicing.offered_assets()] == ["USDC"]
    html = page(client, order)
    assert "ETH · Local dev chain (anvil)" not in html
    assert "USDC · Local dev chain (anvil)" in html


def test_health_reports_the_chain(client: Client, payments: Payments) -> None:
    assert client.get("/healthz").json()["chain 31337"] == "ok"
    Chain.objects.filter(pk=payments.chain.pk).update(chain_id=1)
    body = client.get("/healthz").json()
    assert body["chain 1"] == "error: serves chain 31337"
    assert body["status"] == "error"


def test_health_counts_a_chains_endpoints_against_its_quorum(
    client: Client, payments: Payments
) -> None:
    from django.core.cache import cache

    from payments.devchain import free_port
    from payments.models import RpcEndpoint

    RpcEndpoint.objects.create(chain=payments.chain, url=f"http://127.0.0.1:{free_port()}")
    response = client.get("/healthz")
    assert response.status_code == 200  # one of two down: degraded, still serving
    assert response.json()["chain 31337"] == "ok: 1 of 2 endpoints answer"
    Chain.objects.filter(pk=payments.chain.pk).update(quorum=2)
    cache.clear()
    response = client.get("/healthz")
    assert response.status_code == 503  # the quorum cannot be met: nothing settles
    assert response.json()["chain 31337"] == "error: 1 of 2 endpoints answer"


def test_the_operator_desk_lists_invoices_and_accepts_a_late_payment(
    client: Client, payments: Payments, order: Order
) -> None:
    from accounts.models import User

    client.force_login(User.objects.create_superuser("op@example.org", "a-long-password-1"))
    invoice = invoicing.create_invoice(order, payments.usdc)
    Invoice.objects.filter(pk=invoice.pk).update(
        status=Invoice.STATUS_EXPIRED,
        exception=Invoice.EXCEPTION_PAID_LATE,
        amount_confirmed=invoice.amount_due,
        amount_seen=invoice.amount_due,
    )
    listing = client.get("/admin/payments/invoice/", {"exception__exact": "paid_late"})
    assert order.reference in listing.content.decode()
    found = client.get("/admin/payments/invoice/", {"q": invoice.deposit_address.address})
    assert order.reference in found.content.decode()
    client.post(
        "/admin/payments/invoice/",
        {"action": "accept_late_payments", "_selected_action": [invoice.pk]},
    )
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_PAID
    for page_url in (
        "/admin/payments/chain/",
        "/admin/payments/transfer/",
        f"/admin/payments/invoice/{invoice.pk}/change/",
    ):
        assert client.get(page_url).status_code == 200


def pay_part(payments: Payments, invoice: Invoice, share: Decimal) -> int:
    """Pays ``share`` of the invoice from the dev wallet and lets the scanner see it; the
    base units still due."""
    asset = invoice.asset
    paid = asset.from_units(invoice.amount_due) * share
    payments.dev.pay_invoice(invoice, paid)
    scanning.scan_chain(Chain.objects.get(pk=payments.chain.pk))
    return int(invoice.amount_due) - asset.to_units(paid)


def qr_of(uri: str) -> str:
    return segno.make(uri, error="m").svg_inline(scale=4, dark="#1b1d22", light="#ffffff")


def test_after_a_partial_token_payment_everything_asks_only_for_what_is_still_due(
    client: Client, payments: Payments, order: Order
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    remaining = pay_part(payments, invoice, Decimal("0.3"))
    invoice.refresh_from_db()
    assert invoice.exception == Invoice.EXCEPTION_PAID_PARTIAL
    still_due = units(payments.usdc.from_units(remaining))
    seen = units(payments.usdc.from_units(invoice.amount_seen))
    uri = (
        f"ethereum:{payments.usdc.contract_address}@{payments.chain.chain_id}/transfer"
        f"?address={invoice.deposit_address.address}&uint256={remaining}"
    )
    html = client.get(f"{base(order)}/").content.decode()
    assert f"Partly paid: {still_due} USDC still due." in html
    assert f"{seen} USDC received; {still_due} USDC still due." in html
    assert f'<code id="pay-amount" data-testid="amount">{still_due}</code> USDC' in html
    assert f'href="{html_module.escape(uri)}"' in html  # "Open in wallet"
    assert qr_of(uri) in html  # the QR code holds the same request
    assert f"uint256={int(invoice.amount_due)}" not in html  # the full amount: nowhere
    assert "Payment seen" not in html  # no "all is well" headline


def test_after_a_partial_eth_payment_the_wallet_request_is_the_wei_still_due(
    client: Client, payments: Payments, order: Order
) -> None:
    invoicing.refresh_prices(payments.chain)
    invoice = invoicing.create_invoice(order, payments.eth)
    remaining = pay_part(payments, invoice, Decimal("0.25"))
    uri = f"ethereum:{invoice.deposit_address.address}@{payments.chain.chain_id}?value={remaining}"
    html = client.get(f"{base(order)}/").content.decode()
    still_due = units(payments.eth.from_units(remaining))
    assert f'<code id="pay-amount" data-testid="amount">{still_due}</code> ETH' in html
    assert f'href="{html_module.escape(uri)}"' in html
    assert qr_of(uri) in html
    assert f"value={int(invoice.amount_due)}" not in html


def test_a_token_invoice_says_the_network_fee_needs_the_chains_own_coin(
    client: Client, payments: Payments, order: Order
) -> None:
    invoicing.refresh_prices(payments.chain)
    invoicing.create_invoice(order, payments.usdc)
    html = client.get(f"{base(order)}/").content.decode()
    assert (
        "To send USDC, you also need a little ETH on Local dev chain (anvil) for the network fee."
        in html
    )
    invoicing.create_invoice(order, payments.eth)
    assert 'data-testid="fee-note"' not in client.get(f"{base(order)}/").content.decode()


def test_the_fee_coin_is_the_presets_native_coin(payments: Payments) -> None:
    from payments.networks import POLYGON
    from payments.panel import fee_coin

    assert fee_coin(payments.chain) == "ETH"  # the dev chain's configured native coin
    Chain.objects.filter(pk=payments.chain.pk).update(chain_id=POLYGON.chain_id)
    assert fee_coin(Chain.objects.get(pk=payments.chain.pk)) == POLYGON.native_symbol


def test_without_javascript_there_is_no_dead_button_and_the_deadline_is_written_out(
    client: Client, payments: Payments, order: Order
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    html = client.get(f"{base(order)}/").content.decode()
    copies = [line for line in html.splitlines() if 'class="secondary copy"' in line]
    assert len(copies) == 2
    assert all(" hidden>" in line for line in copies)
    deadline = timezone.localtime(invoice.expires_at).isoformat()
    assert f'<time datetime="{deadline}" data-testid="time-left" data-countdown' in html
    left = int((invoice.expires_at - timezone.now()).total_seconds())
    shown = int(html.split('data-seconds-left="')[1].split('"')[0])
    assert left - 5 <= shown <= left + 1


def test_a_payment_in_full_that_is_confirming_asks_for_nothing_more(
    client: Client, payments: Payments, order: Order
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice)
    scanning.scan_chain(Chain.objects.get(pk=payments.chain.pk))
    html = client.get(f"{base(order)}/").content.decode()
    assert "Payment seen: 1 of 2 confirmations." in html
    assert 'data-testid="amount"' not in html
    assert "ethereum:" not in html
    assert "<svg" not in html


def test_the_panel_is_never_kept_by_a_cache(
    client: Client, payments: Payments, order: Order
) -> None:
    invoicing.create_invoice(order, payments.usdc)
    response = client.get(f"{base(order)}/")
    assert "no-store" in response["Cache-Control"]


def test_an_unpaid_order_puts_its_payment_panel_first_on_a_phone(
    client: Client, order: Order
) -> None:
    assert 'class="quote-panel pay-first"' in page(client, order)
    Order.objects.filter(pk=order.pk).update(status=Order.STATUS_CANCELLED)
    assert 'class="quote-panel"' in page(client, order)


def test_an_invoice_that_expired_partly_paid_says_so_and_asks_for_nothing(
    client: Client, payments: Payments, order: Order
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    pay_part(payments, invoice, Decimal("0.5"))
    Invoice.objects.filter(pk=invoice.pk).update(
        status=Invoice.STATUS_EXPIRED, exception=Invoice.EXCEPTION_PAID_PARTIAL
    )
    html = client.get(f"{base(order)}/").content.decode()
    assert "This invoice expired before the full amount arrived." in html
    assert "before a payment arrived" not in html
    assert "still due" not in html
    assert "ethereum:" not in html
