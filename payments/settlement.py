"""What an invoice's amounts mean: settled (the order paid), expired (paid late or partly),
money to refund; and the operator's acceptance of a late payment.

``recompute`` derives an invoice's state from what the scanner recorded, under the order's
and the invoice's row locks; settling is done once, and moves the order to paid in the same
transaction (``reservations.services.mark_paid``, which announces ``order.paid``)."""

from __future__ import annotations

import logging
from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from payments import integrity
from payments.events import invoice_exception
from payments.models import Invoice, Transfer, units
from reservations import incidents
from reservations import services as reservations
from reservations.errors import BookingRefused, refusal
from reservations.models import Credit, Order

log = logging.getLogger(__name__)


def _counted(invoice: Invoice, native: tuple[int, int, int] | None) -> tuple[int, int, int, int]:
    """(seen, confirmed, mined by the deadline, confirmed of that): exact integers of base
    units, from the native scan or the invoice's transfers (summed as Python ints: never a
    Decimal context's rounding). What counts as on time is what was mined by the invoice's
    deadline, by block time."""
    stored = (
        units(invoice.amount_seen),
        units(invoice.amount_confirmed),
        units(invoice.amount_on_time),
    )
    if invoice.asset.is_native:
        seen, confirmed, on_time = native if native is not None else stored
        if invoice.status in Invoice.CLOSED_STATUSES:
            # A sweep from the address lowers its balance: what was confirmed stays counted.
            seen = max(seen, stored[0])
            confirmed = max(confirmed, stored[1])
            on_time = max(on_time, stored[2])
        # The balance only grows at a deposit address: what was there by the deadline and
        # is confirmed is the smaller of the two.
        return seen, confirmed, on_time, min(on_time, confirmed)
    counted = list(invoice.transfers.exclude(status=Transfer.STATUS_ORPHANED))
    seen = sum(units(t.amount) for t in counted)
    confirmed = sum(units(t.amount) for t in counted if t.status == Transfer.STATUS_CONFIRMED)
    in_time = [t for t in counted if t.block_time <= invoice.expires_at]
    on_time = sum(units(t.amount) for t in in_time)
    on_time_confirmed = sum(
        units(t.amount) for t in in_time if t.status == Transfer.STATUS_CONFIRMED
    )
    return seen, confirmed, on_time, on_time_confirmed


def refund_owed(
    status: str,
    *,
    due: int,
    confirmed: int,
    refunded: int,
    cancelled: bool = False,
    credited: int = 0,
) -> int:
    """What is to be sent back, in base units: confirmed money beyond what the invoice keeps —
    the amount due once it is settled, less the credits taken as money (``credited``: time an
    incident took, reservations.incidents); nothing once its order was cancelled: all of it
    goes back; nothing while it is open (the payer may still complete it); nothing kept once
    it expired (paid late, or a second invoice of a paid order) or was refunded — less what
    was already sent back."""
    if status in Invoice.OPEN_STATUSES:
        return 0
    kept = max(0, due - credited) if status == Invoice.STATUS_SETTLED and not cancelled else 0
    return max(0, confirmed - kept - refunded)


def credited_units(order: Order) -> int:
    """The credits of ``order`` taken as money, in its settled invoice's base units."""
    total = Credit.objects.filter(
        order=order, status=Credit.Status.MONEY, amount_units__isnull=False
    ).aggregate(total=Sum("amount_units"))["total"]
    return units(total or 0)


def credit_as_money(credit_id: int) -> bool:
    """A credit taken as money: its part of what the order's settled invoice took is
    written on it once (a conditional update) and the invoice recomputed, so that it is
    owed back (``amount_to_refund``, the refund flow asks for the address). False: nothing
    to do (another status, written already, or no settled invoice)."""
    credit = Credit.objects.select_related("order").get(pk=credit_id)
    if credit.status != Credit.Status.MONEY or credit.amount_units is not None:
        return False
    invoice = Invoice.objects.filter(
        order_id=credit.order_id, status=Invoice.STATUS_SETTLED
    ).first()
    if invoice is None:
        log.warning("credit without a settled invoice", extra={"credit": credit.pk})
        return False
    amount = incidents.units_of(credit, units(invoice.amount_due))
    written = Credit.objects.filter(pk=credit.pk, amount_units__isnull=True).update(
        amount_units=Decimal(amount)
    )
    if written:
        recompute(invoice.pk)
    return bool(written)


def _refund_reason(order: Order, invoice: Invoice, status: str) -> str:
    if status == Invoice.STATUS_SETTLED and order.status == Order.STATUS_CANCELLED:
        return "the order was cancelled after it was paid"
    if status == Invoice.STATUS_SETTLED and credited_units(order):
        return "a credit taken as money: time a lot was not usable"
    if status == Invoice.STATUS_SETTLED:
        return "paid beyond the amount due"
    if status == Invoice.STATUS_INVALID:
        return "arrived after the invoice was refunded"
    others = Invoice.objects.filter(order=order, status=Invoice.STATUS_SETTLED)
    if others.exclude(pk=invoice.pk).exists():
        return "the order is already paid by another invoice"
    if order.status == Order.STATUS_CANCELLED:
        return "the order was cancelled"
    return "arrived after the invoice expired: accept it, or refund it"


def recompute(
    invoice_id: int,
    *,
    native: tuple[int, int, int] | None = None,
    now: datetime | None = None,
) -> bool:
    """Derive the invoice's state from what the chain showed; True if this call settled it.

    ``native``: (seen, confirmed, on time) amounts a native-coin scan just read. What counts
    is what was mined by the invoice's deadline, by block time — not when we looked: a
    payment mined before it settles however late the scanner saw it. Settling is a
    conditional update (status not yet settled), done once, and moves the order to "paid"
    in the same transaction. Past the deadline with less than due mined by it, the invoice
    is expired: "paid_late" when money came after the deadline (the order is left to the
    operator: accept if capacity remains, or refund), "paid_partial" when only part of it
    came before (to refund). The order itself is decided by payments.expiry. A payment in
    a coin or on a chain that is no longer active is recorded, but held (waiting, then
    "paid_late" after the deadline) and never settled by itself; the operator is told
    (integrity.alert_held). A settled or refunded invoice keeps its state; only its
    amounts follow what arrives. Money beyond what the invoice keeps is flagged for refund
    (``amount_to_refund``, exact base units), with a note in the order's history each time
    it grows.
    """
    now = now or timezone.now()
    order_id = Invoice.objects.values_list("order_id", flat=True).get(pk=invoice_id)
    with transaction.atomic():
        # Locks: the order's row, then the invoice's (the order create_invoice takes too).
        order = Order.objects.select_for_update().get(pk=order_id)
        invoice = Invoice.objects.select_for_update().select_related("asset").get(pk=invoice_id)
        seen, confirmed, on_time, on_time_confirmed = _counted(invoice, native)
        due = units(invoice.amount_due)
        settled_at = invoice.settled_at
        status, exception = invoice.status, invoice.exception
        held = False
        if status == Invoice.STATUS_SETTLED:
            if confirmed > due:
                exception = Invoice.EXCEPTION_PAID_OVER
            elif exception == Invoice.EXCEPTION_PAID_OVER:
                exception = Invoice.EXCEPTION_NONE
        elif status != Invoice.STATUS_INVALID:
            status, exception = _decide(invoice, seen, on_time, on_time_confirmed, confirmed, now)
            held = status == Invoice.STATUS_SETTLED and not integrity.accepting(invoice)
            if held:
                # Its chain or coin was turned off (a retired network's tokens may cost
                # nothing): recorded and watched, never settled by itself; the operator decides.
                if now > invoice.expires_at:
                    status, exception = Invoice.STATUS_EXPIRED, Invoice.EXCEPTION_PAID_LATE
                else:
                    status, exception = Invoice.STATUS_PROCESSING, Invoice.EXCEPTION_NONE
            if status == Invoice.STATUS_SETTLED:
                symbol = invoice.asset.symbol
                paid = reservations.mark_paid(
                    order,
                    actor=reservations.system("payment scanner"),
                    reason=f"invoice {invoice.pk}: {invoice.asset.from_units(confirmed)} {symbol}",
                )
                if not paid:  # the hold ended meanwhile: the operator decides
                    status, exception = Invoice.STATUS_EXPIRED, Invoice.EXCEPTION_PAID_LATE
            settled_at = now if status == Invoice.STATUS_SETTLED else None
        owed = refund_owed(
            status,
            due=due,
            confirmed=confirmed,
            refunded=units(invoice.amount_refunded),
            cancelled=order.status == Order.STATUS_CANCELLED,
            credited=credited_units(order) if status == Invoice.STATUS_SETTLED else 0,
        )
        if owed > units(invoice.amount_to_refund):
            amount = invoice.asset.from_units(owed)
            why = _refund_reason(order, invoice, status)
            reservations.record_note(
                order,
                actor=reservations.system("payment scanner"),
                reason=f"invoice {invoice.pk}: {amount} {invoice.asset.symbol} to refund ({why})",
            )
            log.warning("refund owed", extra={"invoice": invoice.pk, "units": str(owed)})
        Invoice.objects.filter(pk=invoice.pk).update(
            status=status,
            exception=exception,
            amount_seen=Decimal(seen),
            amount_confirmed=Decimal(confirmed),
            amount_on_time=Decimal(on_time),
            amount_to_refund=Decimal(owed),
            last_checked_at=now,
            check_delayed=False,
            settled_at=settled_at,
        )
        changed = (status, exception) != (invoice.status, invoice.exception)
        if changed and (exception != Invoice.EXCEPTION_NONE or held):
            invoice_exception.announce(invoice_id=invoice.pk)
    if held:
        integrity.alert_held(invoice)
    settled = invoice.status != Invoice.STATUS_SETTLED and status == Invoice.STATUS_SETTLED
    if settled:
        log.info("invoice settled", extra={"invoice": invoice.pk, "order": order.reference})
    return settled


def _decide(
    invoice: Invoice, seen: int, on_time: int, on_time_confirmed: int, confirmed: int, now: datetime
) -> tuple[str, str]:
    """The state of an invoice not yet settled nor refunded, from its exact amounts: what
    was mined by its deadline counts, however late the scanner saw it."""
    due = units(invoice.amount_due)
    if on_time_confirmed >= due:
        over = Invoice.EXCEPTION_PAID_OVER if confirmed > due else Invoice.EXCEPTION_NONE
        return Invoice.STATUS_SETTLED, over
    if on_time >= due:
        return Invoice.STATUS_PROCESSING, Invoice.EXCEPTION_NONE  # paid in time, confirming
    if seen > on_time:
        return Invoice.STATUS_EXPIRED, Invoice.EXCEPTION_PAID_LATE
    if now > invoice.expires_at:
        partial = Invoice.EXCEPTION_PAID_PARTIAL if seen > 0 else Invoice.EXCEPTION_NONE
        return Invoice.STATUS_EXPIRED, partial
    if seen > 0:
        return Invoice.STATUS_PROCESSING, Invoice.EXCEPTION_PAID_PARTIAL
    return Invoice.STATUS_NEW, Invoice.EXCEPTION_NONE


def accept_late_payment(invoice: Invoice, *, actor: reservations.Actor) -> None:
    """The operator accepts a payment that arrived after expiry: the order is paid — its
    window booked again if the lots are still free (else LotUnavailable: refund instead).

    Where accepting does not apply it is refused (BookingRefused with the reason) and
    nothing changes: an invoice already settled; an order already paid (by another invoice:
    this payment is to be refunded) or cancelled; an invoice without a late payment, or
    whose late payment is less than was due, or whose refund is being verified.
    """
    with transaction.atomic():
        # Locks: the order's row, then the invoice's.
        order = Order.objects.select_for_update().get(pk=invoice.order_id)
        locked = Invoice.objects.select_for_update().select_related("asset").get(pk=invoice.pk)
        paid_elsewhere = (
            Invoice.objects.filter(order=order, status=Invoice.STATUS_SETTLED)
            .exclude(pk=locked.pk)
            .exists()
        )
        if locked.status == Invoice.STATUS_SETTLED:
            raise BookingRefused({"invoice": [refusal("already_settled")]})
        if paid_elsewhere or order.status in Order.PAID_STATUSES:
            raise BookingRefused({"invoice": [refusal("already_paid")]})
        if order.status == Order.STATUS_CANCELLED:
            raise BookingRefused({"invoice": [refusal("order_cancelled")]})
        if (
            locked.status != Invoice.STATUS_EXPIRED
            or locked.exception != Invoice.EXCEPTION_PAID_LATE
        ):
            raise BookingRefused({"invoice": [refusal("not_a_late_payment")]})
        due, confirmed = units(locked.amount_due), units(locked.amount_confirmed)
        if confirmed < due:
            raise BookingRefused({"invoice": [refusal("late_payment_short")]})
        if locked.refunds.filter(status="sent").exists():  # the money is on its way back
            raise BookingRefused({"invoice": [refusal("refund_being_verified")]})
        reason = f"late payment accepted (invoice {locked.pk})"
        if order.status == Order.STATUS_AWAITING_PAYMENT:
            reservations.mark_paid(order, actor=actor, reason=reason)
        else:  # expired: booked again if the lots are free, else LotUnavailable
            reservations.reinstate_paid(order, actor=actor, reason=reason)
        owed = refund_owed(
            Invoice.STATUS_SETTLED,
            due=due,
            confirmed=confirmed,
            refunded=units(locked.amount_refunded),
        )
        Invoice.objects.filter(pk=locked.pk).update(
            status=Invoice.STATUS_SETTLED, settled_at=timezone.now(), amount_to_refund=owed
        )
