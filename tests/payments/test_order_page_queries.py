"""How many SQL statements the hot pages may cost (issue 15): the order page in each
state, and what it no longer does on every view (a QR code made anew, a refunds query over
every invoice of the year)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from payments import invoicing, panel
from payments.models import Invoice
from reservations.models import Order
from tests.conftest import Payments

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def each_view_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every view in a second of its own: the page is rendered (its fragments cached), never
    the whole page served from the cache as within one second, so that what is counted is
    the cost of a render however fast the test runs."""
    from pages import order_page as module

    seconds = iter(range(1_000_000_000, 2_000_000_000, 10))
    monkeypatch.setattr(module, "_second", lambda: next(seconds))


def order_page(client: Client, order: Order) -> str:
    response = client.get(f"/en/orders/{order.reference}/{order.secret}/")
    assert response.status_code == 200
    return response.content.decode()


def settle(invoice: Invoice, order: Order) -> None:
    """The invoice paid in full and the order paid, as the scanner leaves them."""
    Invoice.objects.filter(pk=invoice.pk).update(
        status=Invoice.STATUS_SETTLED,
        amount_seen=invoice.amount_due,
        amount_confirmed=invoice.amount_due,
        settled_at=timezone.now(),
    )
    Order.objects.filter(pk=order.pk).update(status=Order.STATUS_PAID)


def test_an_order_awaiting_its_coin_costs_four_statements(
    client: Client, order: Order, django_assert_max_num_queries: Any
) -> None:
    order_page(client, order)  # the summary's fragment cached, as on every later view
    with django_assert_max_num_queries(4):  # order, its invoices, billing details, SSH keys
        html = order_page(client, order)
    assert "Choose how to pay:" in html


def test_an_order_with_an_invoice_to_pay_costs_four_statements(
    client: Client, payments: Payments, order: Order, django_assert_max_num_queries: Any
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    order_page(client, order)
    with django_assert_max_num_queries(4):  # no refunds query: nothing was ever paid in
        html = order_page(client, order)
    assert invoice.deposit_address.address in html
    assert "<svg" in html


def test_a_paid_order_costs_at_most_seven_statements(
    client: Client, payments: Payments, order: Order, django_assert_max_num_queries: Any
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    settle(invoice, order)
    order_page(client, order)
    # order, invoices, transfers (confirmations, tx hashes), refunds of the paid invoice,
    # billing details, SSH keys — and no second read of the invoices for the receipt.
    with django_assert_max_num_queries(7):
        html = order_page(client, order)
    assert "receipt" in html.lower()
    assert "<svg" not in html  # nothing left to pay: no QR code made or shown


def test_the_qr_code_is_made_once_for_the_same_request(
    client: Client, payments: Payments, order: Order, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []
    real = panel.segno.make

    def counting(content: str, **kwargs: Any) -> Any:
        made.append(content)
        return real(content, **kwargs)

    panel.qr_svg.cache_clear()
    monkeypatch.setattr(panel.segno, "make", counting)
    invoice = invoicing.create_invoice(order, payments.usdc)
    first = order_page(client, order)
    second = order_page(client, order)
    assert len(made) == 1, made
    assert made[0] == panel.payment_uri(invoice)
    svg = first[first.index("<svg") : first.index("</svg>")]
    assert svg
    assert svg in second  # the same code, from the cache


def test_the_qr_code_follows_what_is_still_due(
    client: Client, payments: Payments, order: Order
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    before = panel.payment_uri(invoice)
    Invoice.objects.filter(pk=invoice.pk).update(amount_seen=invoice.amount_due // 2)
    invoice.refresh_from_db()
    after = panel.payment_uri(invoice)
    assert before != after
    html = order_page(client, order)
    assert panel.qr_svg(after) in html
    assert panel.qr_svg(before) not in html
