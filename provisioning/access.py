"""Access grants: whose a lot's cards are, and when, kept in the database.

An ``AccessGrant`` is one order's use of one lot, from the start of its preparation (the
account, the environment, the acceptance benchmark on the cards; no keys yet) to the
confirmed removal of its access on the host (and at least the booking's turnaround after
its window). Its
exclusion constraint (models.AccessGrant) makes the guarantee: at no instant do two orders
have access to one lot. This module is the one place that opens and closes grants, each by
an insert or a conditional update with an audit event:

- ``open_grant``: the cards become the order's for preparation; refused while another grant
  on the lot is open or its turnaround has not passed (the constraint says no), and earlier
  than PROVISIONING_PREPARE_LEAD before the window's start (a check constraint says no);
- ``record_keys``: the researcher's keys went in (only inside the paid window: checked in
  the database as well);
- ``close_grant``: the host confirmed the revocation; the lot is free again after the
  turnaround;
- ``revocation_failed``: the host could not remove the access; the grant stays open, so the
  next tenant waits, and the operator is told once.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import mail_admins
from django.db import IntegrityError, transaction
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange  # type: ignore[import-untyped]

from provisioning.models import AccessGrant, ProvisioningJob
from reservations.errors import MoveRefused
from reservations.models import Hold, Lot, Order
from reservations.services import record_note, system

log = logging.getLogger(__name__)

ACTOR = system("access")


def prepare_from(order: Order) -> datetime:
    """The earliest a lot of ``order`` may be prepared: its window's start less the lead."""
    lead: timedelta = settings.PROVISIONING_PREPARE_LEAD
    return order.starts_at - lead


def turnaround(job: ProvisioningJob) -> timedelta:
    """The turnaround frozen into the booking's hold (the setting if the hold is gone)."""
    period = (
        Hold.objects.filter(order_id=job.order_id, lot_id=job.lot_id)
        .order_by("-created_at")
        .values_list("period", flat=True)
        .first()
    )
    if period is not None and period.upper is not None:
        return max(period.upper - job.order.ends_at, timedelta(0))
    frozen: timedelta = settings.RESERVATION_TURNAROUND
    return frozen


def open_grant(job: ProvisioningJob, *, now: datetime) -> AccessGrant | None:
    """The lot's cards become the job's order's, from ``now``: the job may prepare them.

    None (and nothing written) when it is too early, the window is over, or the lot is not
    free: another order's booking of it has not ended yet (its window and turnaround), or
    another order's grant is open (a revocation not confirmed) or was closed too recently
    (the database's constraint says no). An already open grant of this job is returned.
    """
    grant, _created = take_lot(job, now=now)
    return grant


def take_lot(job: ProvisioningJob, *, now: datetime) -> tuple[AccessGrant | None, bool]:
    """``open_grant``, saying whether this call opened the grant (then, and only then, the
    caller starts the job: two ticks never start it twice)."""
    order = job.order
    if now < prepare_from(order) or now >= order.ends_at:
        return None, False
    try:
        with transaction.atomic():
            # The job's row lock orders this with another tick and with a move of its
            # booking (follow_moved_booking): the grant is on the lot the job has now.
            lot_id = (
                ProvisioningJob.objects.select_for_update()
                .values_list("lot_id", flat=True)
                .get(pk=job.pk)
            )
            existing = AccessGrant.objects.filter(job=job).first()
            if existing is not None:
                return (existing if existing.closed_at is None else None), False
            if now < order.starts_at and _booked_by_another(job, lot_id, now, order.starts_at):
                return None, False
            grant = AccessGrant.objects.create(
                job=job,
                lot_id=lot_id,
                order=order,
                period=DateTimeTZRange(now, None, "[)"),
                prepare_from=prepare_from(order),
                window_start=order.starts_at,
                window_end=order.ends_at,
                opened_at=now,
            )
            # A heartbeat with the grant: the job is the tick's to start now, not "stalled".
            ProvisioningJob.objects.filter(pk=job.pk).update(heartbeat_at=now)
            lot = job.lot if job.lot_id == lot_id else Lot.objects.get(pk=lot_id)
            record_note(order, actor=ACTOR, reason=f"{lot}: the cards are this order's")
    except IntegrityError:  # the lot is another order's now (the exclusion constraint)
        return None, False
    return grant, True


def _booked_by_another(job: ProvisioningJob, lot_id: int, since: datetime, until: datetime) -> bool:
    """Another order's booking (its window and turnaround) still covers part of the lot's
    time before this window starts: the lead must not cut into it."""
    return (
        Hold.objects.filter(
            lot_id=lot_id,
            status__in=Hold.COUNTING,
            period__overlap=DateTimeTZRange(since, until, "[)"),
        )
        .exclude(order_id=job.order_id)
        .exists()
    )


def record_keys(job: ProvisioningJob, *, now: datetime) -> bool:
    """The researcher's keys are on the host from ``now`` (once; inside the window only)."""
    return bool(
        AccessGrant.objects.filter(
            job=job,
            closed_at__isnull=True,
            keys_at__isnull=True,
            window_start__lte=now,
            window_end__gt=now,
        ).update(keys_at=now)
    )


def close_grant(job: ProvisioningJob, *, now: datetime, free_now: bool = False) -> bool:
    """The host confirmed that the job's access is gone: the grant closes at ``now`` and
    the lot is free for the next tenant once the booking's turnaround has passed too
    (``free_now``: at once, for a lot whose booking moved elsewhere: a replaced lot)."""
    grant = AccessGrant.objects.filter(job=job, closed_at__isnull=True).first()
    if grant is None:
        return False
    # Free once the access is gone and the booking's turnaround after its window has passed
    # (a late revocation delays the next tenant by its lateness, not by a turnaround more).
    free_from = max(now, grant.opened_at)
    if not free_now:
        free_from = max(free_from, grant.window_end + turnaround(job))
    with transaction.atomic():
        closed = AccessGrant.objects.filter(pk=grant.pk, closed_at__isnull=True).update(
            closed_at=max(now, grant.opened_at),
            period=DateTimeTZRange(grant.opened_at, free_from, "[)"),
            revoke_error="",
        )
        if closed:
            record_note(job.order, actor=ACTOR, reason=f"{job.lot}: access removed")
    return bool(closed)


def revocation_failed(job: ProvisioningJob, error: str, *, now: datetime) -> bool:
    """The host could not remove the job's access: its grant stays open (the next tenant of
    the lot waits) and the operator is alerted, once per grant."""
    grant = AccessGrant.objects.filter(job=job, closed_at__isnull=True).first()
    if grant is None:
        return False
    AccessGrant.objects.filter(pk=grant.pk).update(revoke_error=error[-2000:])
    with transaction.atomic():
        if not AccessGrant.objects.filter(pk=grant.pk, alerted_at__isnull=True).update(
            alerted_at=now
        ):
            return False
        reason = (
            f"{job.lot}: the access could not be removed at the window's end; the lot "
            f"stays closed to the next tenant until it is ({error[-300:]})"
        )
        record_note(job.order, actor=ACTOR, reason=reason)
    waiting = list(
        ProvisioningJob.objects.filter(
            lot_id=job.lot_id,
            status=ProvisioningJob.Status.PENDING,
            grant__isnull=True,
            order__status=Order.STATUS_APPROVED,
        ).values_list("order__reference", flat=True)
    )
    log.error("revocation failed", extra={"order": job.order.reference, "lot": job.lot_id})
    mail_admins(
        f"Revocation failed: {job.order.reference} on {job.lot}",
        f"{reason}\n\nWaiting for this lot: {', '.join(waiting) or 'no booking yet'}.\n"
        "It is retried at every tick; check the host.",
        fail_silently=True,
    )
    return True


def access_opens_at(job: ProvisioningJob) -> datetime:
    """When the researcher's keys went in, or are due to (the window's start)."""
    grant = job.access_grant
    return grant.keys_at if grant is not None and grant.keys_at else job.order.starts_at


def access_closes_at(job: ProvisioningJob) -> datetime:
    """When the access was removed, or is due to be (the window's end)."""
    grant = job.access_grant
    return grant.closed_at if grant is not None and grant.closed_at else job.order.ends_at


def follow_extension(order: Order) -> int:
    """The order's window was extended (reservations.extensions.join, in this transaction):
    its open grants end at its new end, so keys and access continue on the same lots."""
    return AccessGrant.objects.filter(order=order, closed_at__isnull=True).update(
        window_end=order.ends_at
    )


def follow_moved_booking(*, order: Order, old_hold: Hold, new_hold: Hold, **_: object) -> None:
    """``reservations.events.booking_moved``: a lot's job follows its booking to the new lot
    while nothing of the order is on the old one yet; once its preparation has begun there
    (a grant), the move is refused: the operator holds or ends that access first."""
    job = (
        ProvisioningJob.objects.select_for_update()  # ordered with open_grant on this job
        .filter(order=order, lot_id=old_hold.lot_id)
        .first()
    )
    if job is None:
        return
    if job.replaced_at is not None:
        return  # a replacement moves it (provisioning.replacement): a new job for the new lot
    if AccessGrant.objects.filter(job=job).exists():
        raise MoveRefused(
            f"{order.reference} is already being prepared on {old_hold.lot} or has access "
            "there: it cannot be moved to another lot now."
        )
    ProvisioningJob.objects.filter(pk=job.pk).update(lot_id=new_hold.lot_id)
