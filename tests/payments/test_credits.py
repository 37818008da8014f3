"""A credit for time a lot was not usable (issue 33), taken as time or as money, against a
real anvil: paid by a real transfer and settled by the scanner, the credit as money is owed
back in the invoice's base units (and stays owed through the next scans); as time, the window
ends later on the same lots and nothing is owed; an operator's refusal is mailed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange  # type: ignore[import-untyped]

from payments import invoicing, refund_due, scanning
from payments.models import Chain, Invoice
from provisioning import access, services
from provisioning.models import AccessGrant, ProvisioningJob
from reservations import incidents
from reservations.models import Credit, Hold, Order
from reservations.services import Actor, place_order
from tests.conftest import Payments, RequestFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("eager_tasks")]

RESEARCHER = Actor("researcher")
OPERATOR = Actor("operator@example.org")


def paid_and_approved(payments: Payments, order: Order) -> Invoice:
    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(2)
    assert scanning.scan_chain(Chain.objects.get(pk=payments.chain.pk)).settled == [invoice.pk]
    services.approve_order(Order.objects.get(pk=order.pk), actor=OPERATOR)
    return Invoice.objects.get(pk=invoice.pk)


def credited(order: Order, hours: int) -> Credit:
    """An incident of ``hours`` from the window's start on the order's lot, ended: credited."""
    order = Order.objects.get(pk=order.pk)
    lot = order.holds.get(status="booked").lot
    incident, _opened = incidents.open_incident(
        order, lot, kind="acceptance", summary="test", at=order.starts_at, at_acceptance=True
    )
    credit = incidents.end_incident(incident, at=order.starts_at + timedelta(hours=hours), why="t")
    assert credit is not None
    return credit


def test_a_credit_taken_as_money_is_owed_back_in_base_units(
    payments: Payments, order: Order, django_capture_on_commit_callbacks: Any
) -> None:
    invoice = paid_and_approved(payments, order)
    due = int(invoice.amount_due)
    assert int(invoice.amount_to_refund) == 0
    credit = credited(order, 6)

    with django_capture_on_commit_callbacks(execute=True):
        incidents.take_as_money(credit, actor=RESEARCHER)

    credit.refresh_from_db()
    # 6 hours of a 3-day window of one lot: exactly a twelfth of the 500 USDC paid.
    assert credit.amount_units is not None
    assert int(credit.amount_units) == due * 6 // 72 == 41_666_666
    invoice.refresh_from_db()
    assert int(invoice.amount_to_refund) == 41_666_666
    assert refund_due.owed_units(invoice) == 41_666_666
    assert refund_due.why(order, invoice) == "credited"
    # The next scans recompute the invoice: the credit stays owed, and is owed once.
    payments.dev.mine(3)
    scanning.scan_chain(Chain.objects.get(pk=payments.chain.pk))
    with django_capture_on_commit_callbacks(execute=True):  # a second delivery: nothing more
        incidents.credit_decided.deliver({"order_id": order.pk, "credit_id": credit.pk})
    invoice.refresh_from_db()
    assert int(invoice.amount_to_refund) == 41_666_666
    with pytest.raises(incidents.CreditRefused) as refused:
        incidents.take_as_time(credit, actor=RESEARCHER)
    assert refused.value.code == "credit_decided"


def test_a_credit_taken_as_time_ends_the_window_later_and_owes_nothing(
    payments: Payments, order: Order, django_capture_on_commit_callbacks: Any
) -> None:
    invoice = paid_and_approved(payments, order)
    job = ProvisioningJob.objects.get(order=order)
    end = Order.objects.get(pk=order.pk).ends_at
    grant = access.open_grant(job, now=order.starts_at)
    assert grant is not None
    assert grant.window_end == end
    hold_end = order.holds.get(status="booked").period.upper
    credit = credited(order, 6)

    with django_capture_on_commit_callbacks(execute=True):
        extended = incidents.take_as_time(credit, actor=RESEARCHER)

    assert extended.ends_at == end + timedelta(hours=6)
    assert Order.objects.get(pk=order.pk).ends_at == end + timedelta(hours=6)
    assert order.holds.get(status="booked").period.upper == hold_end + timedelta(hours=6)
    assert AccessGrant.objects.get(pk=grant.pk).window_end == end + timedelta(hours=6)
    credit.refresh_from_db()
    assert credit.status == Credit.Status.TIME
    assert credit.amount_units is None
    invoice.refresh_from_db()
    assert int(invoice.amount_to_refund) == 0
    # Access is not revoked at the old end any more, only at the new one.
    assert services.revoke_due(now=end + timedelta(hours=1), backend=_Nothing()) == 0
    assert Order.objects.get(pk=order.pk).status != Order.STATUS_COMPLETED


def test_time_is_refused_when_the_lots_are_booked_right_after(
    payments: Payments,
    order: Order,
    make_request: RequestFactory,
    django_capture_on_commit_callbacks: Any,
) -> None:
    paid_and_approved(payments, order)
    lot = order.holds.get(status="booked").lot
    hold_end = order.holds.get(status="booked").period.upper
    nxt = place_order(make_request(lot_count=1, window_days=3, starts_at=hold_end))
    # the next booking sits right after ours on the same lot (turnaround included)
    Hold.objects.filter(order=nxt).update(
        lot=lot, period=DateTimeTZRange(hold_end, hold_end + timedelta(days=3), "[)")
    )
    credit = credited(order, 6)
    with pytest.raises(incidents.CreditRefused) as refused:
        incidents.take_as_time(credit, actor=RESEARCHER)
    assert refused.value.code == "lots_not_free"
    credit.refresh_from_db()
    assert credit.status == Credit.Status.OFFERED  # nothing changed: money is still open
    assert order.holds.get(status="booked").period.upper == hold_end


def test_an_operator_refuses_a_credit_only_with_a_reason_which_is_mailed(
    payments: Payments, order: Order, django_capture_on_commit_callbacks: Any
) -> None:
    paid_and_approved(payments, order)
    credit = credited(order, 2)
    with pytest.raises(incidents.CreditRefused):
        incidents.refuse(credit, actor=OPERATOR, reason="  ")
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        incidents.refuse(credit, actor=OPERATOR, reason="the card was fine: a job of yours hung it")
    credit.refresh_from_db()
    assert credit.status == Credit.Status.REFUSED
    (sent,) = [m for m in mail.outbox if "refused" in m.subject]
    assert "the card was fine: a job of yours hung it" in sent.body
    with pytest.raises(incidents.CreditRefused):
        incidents.take_as_money(credit, actor=RESEARCHER)


class _Nothing:
    """A backend that must not be reached (nothing is due)."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the host was reached: {name}")
