"""How payments reacts to what happened (infra.events): connected when this module is
imported, from PaymentsConfig.ready(). Each receiver is idempotent: a retry changes nothing
that was done already."""

from __future__ import annotations

import logging

from django.db.models import Q

from payments import receipts, settlement, tasks
from payments.events import refund_sent
from payments.models import Invoice
from reservations.events import credit_decided, order_cancelled, order_paid, order_paid_late
from reservations.models import Order

log = logging.getLogger(__name__)


@order_cancelled.receiver(dispatch_uid="payments: close a cancelled order's invoices")
def close_invoices_of_cancelled_order(*, order_id: int, **_: object) -> None:
    """A cancelled order keeps none of its money: each invoice that received some is
    recomputed, so that what it holds is flagged for refund (``amount_to_refund``, a note in
    the order's history, the researcher mailed for an address)."""
    received = Invoice.objects.filter(order_id=order_id).filter(
        Q(amount_confirmed__gt=0) | Q(amount_seen__gt=0)
    )
    for pk in received.values_list("pk", flat=True):
        settlement.recompute(pk)


@order_paid.receiver(dispatch_uid="payments: number the receipt of a paid order")
@order_paid_late.receiver(dispatch_uid="payments: number the receipt of a late-paid order")
def number_receipt(*, order_id: int, **_: object) -> None:
    """A paid order has its receipt at once, numbered: the order page links it from then
    on, and the desk's order page and receipt list show the same receipt (not an empty
    section until the researcher first opens it)."""
    receipts.issue_receipt(Order.objects.get(pk=order_id))


@refund_sent.receiver(dispatch_uid="payments: verify a refund at once")
def verify_refund_at_once(*, refund_id: int, **_: object) -> None:
    """Verify and mail now rather than at the next beat cycle; with the broker away, beat's
    own cycle does it (the Refund row is the truth)."""
    try:
        tasks.check_refunds.delay()
    except Exception:  # any broker failure
        log.warning("refund check not queued; beat runs it", extra={"refund": refund_id})


@credit_decided.receiver(dispatch_uid="payments: owe back a credit taken as money")
def owe_credit(*, credit_id: int, **_: object) -> None:
    """A credit taken as money is owed back from the order's settled invoice (nothing for a
    credit offered, taken as time or refused)."""
    settlement.credit_as_money(credit_id)
