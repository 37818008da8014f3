"""The desk's lists fit the work (issue 13, item 4): the order list shows each window's start
and end, the payment's state and what the order waits on a person for (the same conditions
as Today); it finds an order by reference, e-mail, deposit address or transaction hash; a
lot's page lists its bookings; holds have a list; the jobs list keeps long errors short."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from itertools import count
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import User
from desk import today as desk
from payments.models import Chain, DepositAddress, Invoice, Transfer
from provisioning.models import ProvisioningJob
from reservations.models import Hold, Order
from reservations.services import mark_paid, place_order, system
from tests.conftest import Inventory, RequestFactory

pytestmark = pytest.mark.django_db

ORDERS = "/admin/reservations/order/"
_index = count(1)


@pytest.fixture
def operator(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("op@example.org", "a-long-password-1"))
    return client


def invoice_for(order: Order, **fields: Any) -> Invoice:
    """An invoice of ``order`` on a test chain (500 USDC due, open for an hour)."""
    chain, _ = Chain.objects.get_or_create(
        chain_id=31_999, defaults={"name": "Desk chain", "rpc_url": "http://127.0.0.1:1"}
    )
    usdc, _ = chain.assets.get_or_create(
        symbol="USDC", defaults={"contract_address": "0x" + "1" * 40, "decimals": 6}
    )
    n = next(_index)
    now = timezone.now()
    values: dict[str, Any] = {
        "amount_due": Decimal(500_000_000),
        "usd_due": Decimal(500),
        "usd_per_unit": Decimal(1),
        "created_block": 1,
        "expires_at": now + timedelta(hours=1),
        "monitor_until": now + timedelta(hours=20),
        **fields,
    }
    address = DepositAddress.objects.create(chain=chain, index=n, address=f"0x{n:040x}")
    return Invoice.objects.create(order=order, asset=usdc, deposit_address=address, **values)


def row_of(html: str, reference: str) -> str:
    """The order list's row holding ``reference``."""
    start = html.index(f">{reference}</a>")
    return html[start : html.index("</tr>", start)]


def test_the_order_list_shows_the_window_the_payment_and_the_next_action(
    operator: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    waiting = place_order(make_request(lot_count=1, window_days=3))
    invoice_for(waiting)
    paid = place_order(make_request(lot_count=1, window_days=7))
    invoice_for(paid, status=Invoice.STATUS_SETTLED, amount_seen=Decimal(500_000_000))
    assert mark_paid(paid, actor=system("test"), reason="paid")

    html = operator.get(ORDERS).content.decode()
    row = row_of(html, paid.reference)
    assert "→" in row  # start → end
    assert paid.ends_at.strftime("%Y") in row
    assert ">settled<" in row or "settled" in row
    assert 'data-testid="next-action">approve<' in row
    row = row_of(html, waiting.reference)
    assert "waiting for payment" in row
    assert "next-action" not in row  # waiting on the researcher, not the operator


def test_each_of_todays_conditions_is_the_orders_next_action_until_handled(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    def action(order: Order) -> str:
        return desk.next_action(desk.with_next_action(Order.objects.filter(pk=order.pk)).get())

    late = place_order(make_request(lot_count=1, window_days=3))
    invoice = invoice_for(
        late,
        status=Invoice.STATUS_EXPIRED,
        exception=Invoice.EXCEPTION_PAID_LATE,
        amount_seen=Decimal(500_000_000),
        amount_confirmed=Decimal(500_000_000),
        expires_at=timezone.now() - timedelta(hours=1),
    )
    assert action(late) == "decide_payment"
    Invoice.objects.filter(pk=invoice.pk).update(exception="")  # decided: refund it
    assert action(late) == "refund"  # expired with money on it: owed back
    Invoice.objects.filter(pk=invoice.pk).update(amount_refunded=Decimal(500_000_000))
    assert action(late) == ""

    order = place_order(make_request(lot_count=1, window_days=3))
    assert mark_paid(order, actor=system("test"), reason="paid")
    assert action(order) == "approve"
    Order.objects.filter(pk=order.pk).update(status=Order.STATUS_APPROVED)
    job = ProvisioningJob.objects.create(
        order=order, lot=order.holds.get().lot, status=ProvisioningJob.Status.FAILED
    )
    assert action(order) == "provisioning"
    ProvisioningJob.objects.filter(pk=job.pk).update(status=ProvisioningJob.Status.READY)
    assert action(order) == ""

    waiting = {o.reference for o in desk.needing_action(Order.objects.all())}
    assert waiting == set()


def test_the_next_action_filter_lists_only_the_orders_waiting_on_the_operator(
    operator: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    quiet = place_order(make_request(lot_count=1, window_days=3))
    paid = place_order(make_request(lot_count=1, window_days=3))
    assert mark_paid(paid, actor=system("test"), reason="paid")
    for query in ("action=any", "action=approve"):
        html = operator.get(f"{ORDERS}?{query}").content.decode()
        assert f">{paid.reference}</a>" in html
        assert f">{quiet.reference}</a>" not in html
    html = operator.get(f"{ORDERS}?action=refund").content.decode()
    assert f">{paid.reference}</a>" not in html


def test_an_order_is_found_by_its_deposit_address_or_a_transaction_hash(
    operator: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request(lot_count=1, window_days=3))
    other = place_order(make_request(lot_count=1, window_days=3, contact_email="grace@example.org"))
    invoice = invoice_for(order, claim_tx_hash="0x" + "c" * 64)
    invoice_for(other)
    Transfer.objects.create(
        chain=invoice.deposit_address.chain,
        tx_hash="0x" + "a" * 64,
        log_index=0,
        invoice=invoice,
        from_address="0x" + "9" * 40,
        amount=Decimal(1),
        block_number=5,
        block_hash="0x" + "b" * 64,
        block_time=timezone.now(),
    )
    for term in (
        invoice.deposit_address.address.upper().replace("0X", "0x"),  # any case
        "0x" + "a" * 64,
        "0x" + "c" * 64,
        order.reference,
        order.contact_email,
    ):
        html = operator.get(ORDERS, {"q": term}).content.decode()
        assert f">{order.reference}</a>" in html, term
        assert f">{other.reference}</a>" not in html, term


def test_a_lots_page_lists_its_bookings_now_and_ahead(
    operator: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request(lot_count=1, window_days=3))
    lot = order.holds.get().lot
    html = operator.get(f"/admin/reservations/lot/{lot.pk}/change/").content.decode()
    part = html[html.index('data-testid="lot-bookings-now"') :]
    assert f'href="/admin/reservations/order/{order.pk}/change/">{order.reference}</a>' in part
    Hold.objects.filter(order=order).update(status=Hold.Status.RELEASED, released_at=timezone.now())
    html = operator.get(f"/admin/reservations/lot/{lot.pk}/change/").content.decode()
    assert "No booking now or ahead on this lot." in html


def test_holds_have_a_list_that_reads_but_never_edits(
    operator: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request(lot_count=1, window_days=3))
    html = operator.get("/admin/reservations/hold/?when=ahead").content.decode()
    assert order.reference in html
    assert operator.get("/admin/reservations/hold/add/").status_code == 403
    past = operator.get("/admin/reservations/hold/?when=past").content.decode()
    assert order.reference not in past


def test_the_jobs_list_shows_an_errors_last_line_cut_short(
    operator: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request(lot_count=1, window_days=3))
    long_line = "OSError: " + "x" * 400
    ProvisioningJob.objects.create(
        order=order,
        lot=order.holds.get().lot,
        status=ProvisioningJob.Status.FAILED,
        error=f"Traceback (most recent call last):\n  File 'a.py'\n{long_line}",
    )
    html = operator.get("/admin/provisioning/provisioningjob/").content.decode()
    assert "Traceback" not in html
    assert "OSError: " + "x" * 100 in html
    assert "x" * 150 + "<" not in html  # cut in the cell (the whole line is its title)


def test_the_refunds_filter_lists_what_todays_refunds_due_lists(
    operator: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    """An expired invoice with money on it is owed back though amount_to_refund is 0: the
    desk's "All" link (refund_owed=yes) must show it, as "Refunds due" does."""
    order = place_order(make_request(lot_count=1, window_days=3))
    invoice = invoice_for(
        order,
        status=Invoice.STATUS_EXPIRED,
        amount_seen=Decimal(200_000_000),
        amount_confirmed=Decimal(200_000_000),
        expires_at=timezone.now() - timedelta(hours=1),
    )
    due = {s.key: s for s in desk.sections()}["refunds"]
    assert [item.url for item in due.items] == [f"/admin/payments/invoice/{invoice.pk}/change/"]
    listed = operator.get(due.all_url).content.decode()
    assert f"/admin/payments/invoice/{invoice.pk}/change/" in listed
    nothing = operator.get("/admin/payments/invoice/?refund_owed=no").content.decode()
    assert f"/admin/payments/invoice/{invoice.pk}/change/" not in nothing
