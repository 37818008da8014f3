"""When an unpaid order's hold ends: decided by the chain, up to the deadline, by block time.

A payment mined before the hold's deadline is on time, however late a stalled worker or a
slow node lets us see it. So an order with invoices is expired only once every chain its
invoices are on has been read up to the deadline (``Chain.read_through``, set by a full
scan cycle): then what was mined by the deadline decides —

- a full payment mined in time is settled by the scanner (the order is paid), or, while it
  still confirms, keeps the lots at most ``PAYMENT_CONFIRMING_GRACE`` after the deadline;
- less than due (nothing, or a partial or dust payment) ends the hold at the deadline like
  an unpaid one: the lots are released and a partial amount is left expired and
  ``paid_partial`` — for the operator to refund;
- a chain that cannot be read (node down) keeps the hold, the page saying that checking is
  delayed, at most ``PAYMENT_EXPIRY_MAX_WAIT`` after the deadline: then the hold ends and
  the invoices are flagged ``unverified_at_expiry`` for the operator.

``close_at_deadline`` is the one function that decides, under the order's row lock. Beat's
``expire_unpaid_holds`` calls ``expire_due_orders``, which first reads the chains that are
behind (a stalled scanner cannot make it expire too early); the scanner calls it for its
chain at the end of each cycle. The order itself is expired, and its lots released, by
``reservations.services.release_unpaid``, which announces ``order.expired``.
"""

from __future__ import annotations

import logging
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from payments import scanning
from payments.models import Chain, Invoice, Transfer
from payments.nodes import ChainMismatch
from payments.rpc import RpcError, RpcUnavailable
from reservations import services as reservations
from reservations.models import Order

log = logging.getLogger(__name__)

EXPIRED = "expired"
"""The hold ended: lots released, the order expired."""
KEPT_CONFIRMING = "confirming"
"""A full payment mined in time is still confirming: the hold stays (within the grace)."""
KEPT_UNREAD = "waiting_for_chain"
"""An invoice's chain is not read up to the deadline yet: the hold stays (within the wait)."""
NOT_DUE = "not_due"
"""The order is not awaiting payment (paid, cancelled, expired) or its hold has time left."""


def read_up_to(chain: Chain, moment: datetime) -> bool:
    """Whether every block of ``chain`` up to ``moment`` has been read for its invoices."""
    return chain.read_through is not None and chain.read_through >= moment


def _due_by(invoice: Invoice, deadline: datetime) -> datetime:
    return min(invoice.expires_at, deadline)


def on_time_amount(invoice: Invoice) -> Decimal:
    """What reached the invoice's address in blocks up to its deadline (block time)."""
    if invoice.asset.is_native:
        return invoice.amount_on_time  # the balance at its deadline block (the scanner)
    total = (
        Transfer.objects.filter(invoice=invoice, block_time__lte=invoice.expires_at)
        .exclude(status=Transfer.STATUS_ORPHANED)
        .aggregate(total=Sum("amount"))["total"]
    )
    return total or Decimal(0)


def close_at_deadline(order_id: int, *, now: datetime | None = None) -> str:
    """Decide an unpaid order whose hold time has passed: expire it (releasing its lots) or
    keep it for a payment mined in time. Returns EXPIRED, KEPT_CONFIRMING, KEPT_UNREAD or
    NOT_DUE.

    Race-safe and idempotent: the order's row is locked, then its invoices'; the expiry is
    reservations.release_unpaid's conditional transition (audit event, mail), so of two
    callers only one expires it. Reads nothing from the chain itself: what the scanner
    recorded, and how far it read (``Chain.read_through``).
    """
    now = now or timezone.now()
    with transaction.atomic():
        # Locks: the order's row, then its invoices' (the order recompute takes them in).
        order = Order.objects.select_for_update().get(pk=order_id)
        deadline = order.hold_expires_at
        if order.status != Order.STATUS_AWAITING_PAYMENT or deadline > now:
            return NOT_DUE
        invoices = list(
            Invoice.objects.select_for_update(of=("self",))
            .filter(order=order)
            .exclude(status__in=Invoice.CLOSED_STATUSES)
            .select_related("asset__chain")
            .order_by("pk")
        )
        overdue = now - deadline
        unread = [i for i in invoices if not read_up_to(i.asset.chain, _due_by(i, deadline))]
        if unread and overdue < settings.PAYMENT_EXPIRY_MAX_WAIT:
            return KEPT_UNREAD
        on_time = {i.pk: on_time_amount(i) for i in invoices}
        confirming = [i for i in invoices if i not in unread and on_time[i.pk] >= i.amount_due]
        if confirming and overdue < settings.PAYMENT_CONFIRMING_GRACE:
            return KEPT_CONFIRMING
        unverified = unread + confirming
        for invoice in invoices:
            if invoice in unverified:
                # Still watched; the operator checks what it shows.
                Invoice.objects.filter(pk=invoice.pk).update(unverified_at_expiry=True)
            elif invoice.status in Invoice.OPEN_STATUSES:
                Invoice.objects.filter(pk=invoice.pk).update(
                    status=Invoice.STATUS_EXPIRED,
                    exception=_exception_at_deadline(invoice, on_time[invoice.pk]),
                    amount_on_time=on_time[invoice.pk],
                )
        reason = _reason(invoices, on_time, unread, confirming)
        reservations.release_unpaid(order, now=now, reason=reason)
    if unverified:
        log.warning(
            "hold ended unverified",
            extra={"order": order.reference, "invoices": [i.pk for i in unverified]},
        )
    return EXPIRED


def _exception_at_deadline(invoice: Invoice, on_time: Decimal) -> str:
    if invoice.amount_seen > on_time:
        return Invoice.EXCEPTION_PAID_LATE
    if max(invoice.amount_seen, on_time) > 0:
        return Invoice.EXCEPTION_PAID_PARTIAL  # less than due in time: to refund
    return invoice.exception


def _reason(
    invoices: list[Invoice],
    on_time: dict[int, Decimal],
    unread: list[Invoice],
    confirming: list[Invoice],
) -> str:
    """The audit trail's words for why the hold ended."""
    if unread:
        numbers = ", ".join(str(i.pk) for i in unread)
        return (
            "hold expired before the chain could be read up to its deadline "
            f"(waited {settings.PAYMENT_EXPIRY_MAX_WAIT}): invoice {numbers} to check by hand"
        )
    if confirming:
        numbers = ", ".join(str(i.pk) for i in confirming)
        return (
            "hold expired while a payment mined in time was still confirming "
            f"(waited {settings.PAYMENT_CONFIRMING_GRACE}): invoice {numbers} to check by hand"
        )
    partial = [i for i in invoices if on_time[i.pk] > 0]
    if partial:
        parts = ", ".join(
            f"invoice {i.pk}: {i.asset.from_units(on_time[i.pk])} of "
            f"{i.asset.from_units(i.amount_due)} {i.asset.symbol}"
            for i in partial
        )
        return f"hold expired with a partial payment ({parts}), to refund"
    return "payment not received before the hold expired"


def expire_due_orders(
    *, now: datetime | None = None, chain: Chain | None = None, limit: int = 500
) -> int:
    """Decide every unpaid order past its hold time (of ``chain``'s invoices only, when
    given: the scanner's call after its cycle); returns how many this call expired.

    Without ``chain`` (beat), a chain not yet read up to a due order's deadline — its
    scanner stalled or behind — is scanned here first; a node that does not answer leaves
    those orders held ("checking is delayed") until it does or the wait ends.
    """
    now = now or timezone.now()
    due = Order.objects.filter(status=Order.STATUS_AWAITING_PAYMENT, hold_expires_at__lte=now)
    if chain is not None:
        due = due.filter(pk__in=Invoice.objects.filter(asset__chain=chain).values("order_id"))
    ids = list(due.order_by("hold_expires_at").values_list("pk", flat=True)[:limit])
    if chain is None:
        behind = {
            i.asset.chain
            for i in Invoice.objects.filter(order_id__in=ids)
            .exclude(status__in=Invoice.CLOSED_STATUSES)
            .select_related("asset__chain", "order")
            if not read_up_to(i.asset.chain, _due_by(i, i.order.hold_expires_at))
        }
        for stale in sorted(behind, key=lambda c: c.pk):
            try:
                scanning.scan_chain(stale, now=now)
            except (RpcUnavailable, RpcError, ChainMismatch) as exc:
                log.warning(
                    "expiry waits for the chain", extra={"chain": stale.chain_id, "error": str(exc)}
                )
    return sum(1 for pk in ids if close_at_deadline(pk, now=now) == EXPIRED)


def expire_unpaid_holds(*, now: datetime | None = None, limit: int = 500) -> int:
    """Beat's: expire every unpaid order past its hold time that no payment mined in time
    keeps, on whichever chains its invoices are; returns how many this call expired."""
    return expire_due_orders(now=now, limit=limit)


def expire_order(order: Order, *, now: datetime | None = None) -> bool:
    """Expire one unpaid order whose hold time has passed and release its lots — unless a
    payment mined before its deadline (by block time) keeps it, or its invoices' chain has
    not been read up to the deadline yet. True if this call expired it."""
    expired = close_at_deadline(order.pk, now=now) == EXPIRED
    if expired:
        order.status = Order.STATUS_EXPIRED
    return expired
