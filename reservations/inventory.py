"""Lots taken out of service, and the bookings moved off them.

A lot in maintenance or retired takes no new holds (placing reads the lot's status under its
row lock), but the holds it already carries stay until the operator moves each to a free lot
of the same kind or settles it with the researcher. The exclusion constraint on holds keeps
guarding every move: a lot is never given to two overlapping windows.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from reservations import availability, notifications
from reservations.errors import BookingRefused, LotNotFree, MoveRefused, refusal
from reservations.events import booking_moved
from reservations.models import Hold, Lot, Order
from reservations.services import Actor, is_exclusion_violation, record_note

log = logging.getLogger(__name__)


def bookings_on(lot: Lot, *, now: datetime | None = None) -> QuerySet[Hold]:
    """The counting holds (held or booked) on ``lot`` whose period has not ended, soonest
    first, with their orders: the bookings that taking the lot out of service affects."""
    return (
        Hold.objects.filter(
            lot=lot, status__in=Hold.COUNTING, period__endswith__gt=now or timezone.now()
        )
        .select_related("order", "lot__host")
        .order_by("period", "pk")
    )


def set_lot_status(lot: Lot, status: str, *, actor: Actor) -> list[Hold]:
    """Give ``lot`` the status ``status``; return the bookings still on it when that status
    takes it out of service (empty for an active lot).

    Guarantees: one conditional UPDATE, nothing written when the lot has that status already.
    Placing reads a lot's status under the lot's row lock, which this UPDATE holds until
    commit: a placement either committed before (and its hold is among those returned, read
    after the update) or sees the new status and passes the lot over. Each affected order
    gets an audit entry when the status actually changed. The holds stay where they are:
    moving them (``move_booking``) or settling them is the operator's decision.
    """
    if status not in Lot.Status.values:
        raise ValueError(f"unknown lot status {status!r}")
    with transaction.atomic():
        changed = Lot.objects.filter(pk=lot.pk).exclude(status=status).update(status=status)
        lot.status = status
        if status == Lot.Status.ACTIVE:
            return []
        affected = list(bookings_on(lot))
        if changed:
            for order in {hold.order_id: hold.order for hold in affected}.values():
                record_note(
                    order,
                    actor=actor,
                    reason=f"lot {lot} set to {status} while this order's booking is on it",
                )
    if changed:
        log.info(
            "lot status set", extra={"lot": lot.pk, "status": status, "affected": len(affected)}
        )
    return affected


def free_lots_for(hold: Hold) -> list[Lot]:
    """The active lots of the hold's kind with no counting hold overlapping its period (its
    turnaround included), by id. For a counting hold its own lot is never among them.

    Read without locks, to offer choices: ``move_booking`` decides under the locks, and the
    exclusion constraint has the last word.
    """
    kind = Order.objects.values_list("kind_id", flat=True).get(pk=hold.order_id)
    return list(availability.free_lots_in(kind, hold.period).select_related("host"))


def move_booking(hold: Hold, to_lot: Lot, *, actor: Actor, reason: str, mail: bool = True) -> Hold:
    """Move one counting hold to ``to_lot``: same order, period and status, another lot of
    the same kind that is in service (active, or a spare) and free for the whole period.
    Returns the new hold.

    All or nothing, in one transaction: the old hold is released and the new one inserted,
    an audit entry says "booking moved from <lot> to <lot>: <reason>", receivers of
    ``events.booking_moved`` run (any of them may veto with ``MoveRefused``) and, after
    commit, the researcher is mailed in the order's language (unless ``mail`` is False: a
    replacement mails what it did itself). Raises ``MoveRefused`` (the
    hold no longer counts, the order ended, the same lot, another kind, a lot not active, a
    receiver's veto) or its subclass ``LotNotFree`` (another hold overlaps on ``to_lot``),
    and ``BookingRefused`` for an empty reason; then nothing changed.
    """
    if not reason.strip():
        raise BookingRefused({"reason": [refusal("required")]})
    with transaction.atomic():
        # Locks: the order's row (its holds change only under it), then both lots' rows in
        # id order, as placing locks lots: a placement or another move meeting us waits for
        # the row instead of deadlocking in the exclusion check.
        order = Order.objects.select_for_update(of=("self",)).get(pk=hold.order_id)
        lots = {
            lot.pk: lot
            for lot in Lot.objects.select_for_update(of=("self",))
            .select_related("host")
            .filter(pk__in={hold.lot_id, to_lot.pk})
            .order_by("pk")
        }
        old = Hold.objects.filter(pk=hold.pk).first()
        if old is None or old.status not in Hold.COUNTING:
            raise MoveRefused.because("move_not_counting")
        if not order.is_holding:
            raise MoveRefused.because("move_order_ended")
        old.lot = lots[old.lot_id]
        if to_lot.pk == old.lot_id:
            raise MoveRefused.because("move_same_lot", lot=old.lot)
        target = lots.get(to_lot.pk)
        if target is None:
            raise Lot.DoesNotExist(f"lot {to_lot.pk} does not exist")
        if target.host.kind_id != order.kind_id:
            raise MoveRefused.because("move_other_kind", lot=target, kind=order.kind)
        if target.status not in Lot.IN_SERVICE:
            raise MoveRefused.because(
                "move_lot_not_active", lot=target, status=target.get_status_display()
            )

        status, now = old.status, timezone.now()
        released = Hold.objects.filter(pk=old.pk, status__in=Hold.COUNTING).update(
            status=Hold.Status.RELEASED, released_at=now
        )
        if released != 1:
            raise MoveRefused.because("move_not_counting")
        old.status, old.released_at = Hold.Status.RELEASED, now
        try:
            with transaction.atomic():  # the refused insert rolls back on its own
                new = Hold.objects.create(order=order, lot=target, period=old.period, status=status)
        except IntegrityError as exc:
            if not is_exclusion_violation(exc):
                raise
            raise LotNotFree.because("move_lot_not_free", lot=target) from None
        record_note(
            order, actor=actor, reason=f"booking moved from {old.lot} to {target}: {reason}"
        )
        booking_moved.send(sender=Hold, order=order, old_hold=old, new_hold=new)
        if mail:
            notifications.enqueue_order_mail(order, "booking_moved")
    log.info(
        "booking moved",
        extra={"order": order.reference, "from_lot": old.lot_id, "to_lot": target.pk},
    )
    return new
