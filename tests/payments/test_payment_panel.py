"""The order page's payment panel over HTTP: choose a coin, see what to pay, "I've paid"."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from payments import services
from payments.models import Chain, Invoice
from reservations.models import Order
from reservations.services import expire_unpaid_holds
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
    services.create_invoice(order, payments.usdc)
    html = page(client, order, "fr")
    assert "J\u2019ai payé" in html
    assert "En attente de votre paiement." in html


def test_a_malformed_hash_is_refused_on_the_page(
    client: Client, payments: Payments, order: Order
) -> None:
    invoice = services.create_invoice(order, payments.usdc)
    response = client.post(f"{base(order)}/paid/", {"tx_hash": "0x1234"}, follow=True)
    assert "0x followed by 64 hexadecimal digits" in response.content.decode()
    assert Invoice.objects.get(pk=invoice.pk).claimed_at is None


def test_ive_paid_records_the_claim(
    client: Client, payments: Payments, order: Order, django_capture_on_commit_callbacks: Any
) -> None:
    invoice = services.create_invoice(order, payments.usdc)
    with django_capture_on_commit_callbacks() as callbacks:
        client.post(f"{base(order)}/paid/", {"tx_hash": ""})
    assert len(callbacks) == 1  # the verification task, enqueued after commit
    assert Invoice.objects.get(pk=invoice.pk).claimed_at is not None
    assert "we are checking the chain now" in client.get(f"{base(order)}/").content.decode()


def test_the_panel_shows_progress_partial_payment_and_delays(
    client: Client, payments: Payments, order: Order
) -> None:
    invoice = services.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice, invoice.asset.from_units(invoice.amount_due) / 2)
    services.scan_chain(Chain.objects.get(pk=payments.chain.pk))
    html = client.get(f"{base(order)}/").content.decode()
    assert "Payment seen: 1 of 2 confirmations." in html
    assert "250 USDC received; 250 USDC still due." in html
    Invoice.objects.filter(pk=invoice.pk).update(check_delayed=True)
    assert "Checking is delayed" in client.get(f"{base(order)}/").content.decode()


def test_settling_mails_the_researcher(
    payments: Payments, order: Order, eager_tasks: None, django_capture_on_commit_callbacks: Any
) -> None:
    invoice = services.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(2)
    with django_capture_on_commit_callbacks(execute=True):
        services.scan_chain(Chain.objects.get(pk=payments.chain.pk))
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
    invoice = services.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice)
    services.scan_chain(Chain.objects.get(pk=payments.chain.pk))
    assert Invoice.objects.get(pk=invoice.pk).status == Invoice.STATUS_PROCESSING
    Order.objects.filter(pk=order.pk).update(hold_expires_at=timezone.now() - timedelta(seconds=1))
    assert expire_unpaid_holds() == 0
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_AWAITING_PAYMENT


def test_eth_is_offered_only_while_its_price_is_fresh(
    client: Client, payments: Payments, order: Order
) -> None:
    services.refresh_prices(payments.chain)
    assert [a.symbol for a in services.offered_assets()] == ["USDC", "ETH"]
    assert "ETH · Local dev chain (anvil)" in page(client, order)

    payments.dev.set_price(3000, updated_at=1_000_000)  # stale
    services.refresh_prices(payments.chain)
    assert [a.symbol for a in services.offered_assets()] == ["USDC"]
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
    invoice = services.create_invoice(order, payments.usdc)
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
