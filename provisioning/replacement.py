"""A lot that fails is replaced, not left to a complaint.

When a lot's acceptance benchmark fails (``lot.held`` with a report that does not accept
it), an incident opens (reservations.incidents) and, when a lot of the same kind is free for
the booking's period (a spare first), the booking moves there in one transaction:

- the failed job is marked replaced (``replaced_at``): the schedule never prepares nor opens
  it again, and :func:`close_replaced` removes what it prepared on the failed host (a host
  that cannot be reached keeps its grant open and is tried again at the next tick);
- the hold moves (``inventory.move_booking``, audited), a new job is made for the spare,
  which the schedule prepares and validates as any lot, and access opens there with the same
  keys (new accounts, named after the lot, whose ``ssh`` lines the researcher is mailed);
- the failed lot goes to maintenance with the incident as its reason.

The incident ends when access opens on the spare (reservations.incidents.end_on_access),
and the time it took from the window is credited. With no lot free, the failed lot stays
held for the operator (retry, release) and the incident runs to the window's end.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from provisioning import services
from provisioning.backends import Backend, StepFailed
from provisioning.events import lot_replaced
from provisioning.models import ProvisioningJob
from reservations import incidents, inventory, notifications
from reservations.errors import MoveRefused
from reservations.models import Hold, Incident, Lot, Order
from reservations.services import record_note, system

log = logging.getLogger(__name__)

ACTOR = system("replacement")
REPLACEABLE = (
    ProvisioningJob.Status.HELD,
    ProvisioningJob.Status.FAILED,
    ProvisioningJob.Status.READY,  # an incident while access is open (provisioning.health)
)


def incident_kind(report: dict[str, Any]) -> str:
    """What a held lot's report says went wrong: the cards themselves, or the acceptance."""
    devices = report.get("devices")
    if isinstance(devices, dict) and devices.get("ok") is False:
        return Incident.Kind.CARDS
    return Incident.Kind.ACCEPTANCE


def evidence_of(report: dict[str, Any]) -> dict[str, Any]:
    """The parts of a report that show why it failed (kept with the incident)."""
    keys = ("version", "exit_code", "complete", "error", "stand_in", "acceptance", "devices")
    return {key: report[key] for key in keys if key in report}


def after_failure(
    job_id: int, *, now: datetime | None = None, failed: bool
) -> ProvisioningJob | None:
    """A lot was held because its report does not accept it (``failed``; False: the
    operator held it, which is no incident): open the incident and replace the lot where a
    spare is free. The replacement job, or None. Idempotent: a second call finds the
    incident open and the job replaced."""
    if not failed:
        return None
    now = now or timezone.now()
    job = ProvisioningJob.objects.select_related("order", "lot__host").get(pk=job_id)
    if job.status != ProvisioningJob.Status.HELD or job.replaced_at is not None:
        return None
    report = job.report if isinstance(job.report, dict) else {}
    incident, _opened = incidents.open_incident(
        job.order,
        job.lot,
        kind=incident_kind(report),
        summary=job.error.removeprefix("access held: ") or "acceptance not passed",
        evidence=evidence_of(report),
        at=now,
        at_acceptance=True,
    )
    if not settings.PROVISIONING_REPLACE_FAILED_LOTS:
        return None
    return replace(job, incident, now=now)


def replace(job: ProvisioningJob, incident: Incident, *, now: datetime) -> ProvisioningJob | None:
    """Move ``job``'s booking to a free lot of its kind (a spare first); the new job, or
    None (nothing changed) when none is free, the order's window is over, or the job is no
    longer held, failed or open (REPLACEABLE)."""
    with transaction.atomic():
        # Locks: the order's row, then the job's (as moving a booking does).
        order = Order.objects.select_for_update().get(pk=job.order_id)
        locked = (
            ProvisioningJob.objects.select_for_update(of=("self",))
            .select_related("lot__host")
            .get(pk=job.pk)
        )
        if (
            locked.replaced_at is not None
            or locked.status not in REPLACEABLE
            or order.status not in (Order.STATUS_APPROVED, Order.STATUS_ACTIVE)
            or order.ends_at <= now
        ):
            return None
        hold = Hold.objects.filter(order=order, lot=locked.lot, status__in=Hold.COUNTING).first()
        spare = incidents.spare_for(hold, failed=locked.lot) if hold is not None else None
        if hold is None or spare is None:
            record_note(
                order,
                actor=ACTOR,
                reason=f"{locked.lot}: no lot of the kind is free to replace it; held for the "
                "operator, the time lost is credited",
            )
            return None
        try:
            with transaction.atomic():
                ProvisioningJob.objects.filter(pk=locked.pk).update(replaced_at=now)
                locked.replaced_at = now
                inventory.move_booking(
                    hold,
                    spare,
                    actor=ACTOR,
                    reason=f"replaces a failed lot ({incident.summary[:200]})",
                    mail=False,
                )
        except MoveRefused as refused:  # taken meanwhile: the next failure tick tries again
            log.warning(
                "replacement refused", extra={"order": order.reference, "why": str(refused)}
            )
            return None
        new = ProvisioningJob.objects.create(order=order, lot=spare)
        new.lot = spare
        ssh = [new.ssh_command(account) for account, _cards in services.accounts_for(new)]
        incidents.record_replacement(incident, spare, ssh)
        failed = locked.lot
        inventory.set_lot_status(failed, Lot.Status.MAINTENANCE, actor=ACTOR)
        record_note(
            order,
            actor=ACTOR,
            reason=f"{failed} replaced by {spare}: the spare is prepared and validated, "
            f"{failed} goes to maintenance ({incident.summary[:200]})",
        )
        notifications.enqueue_order_mail(order, "lot_replaced")
        lot_replaced.announce(order_id=order.pk, job_id=locked.pk, replacement_job_id=new.pk)
    log.info(
        "lot replaced", extra={"order": order.reference, "from_lot": failed.pk, "to_lot": spare.pk}
    )
    return new


def close_replaced(
    *, now: datetime, backend: Backend | None = None, order_id: int | None = None
) -> int:
    """What replaced jobs prepared on their failed lots is removed (the benchmark stopped,
    the accounts revoked) and their grants closed, free at once: the lot is in maintenance
    and the booking elsewhere. A lot replaced while its access was open stays reachable
    until PROVISIONING_REPLACED_ACCESS_GRACE after access opens on the spare (the
    researcher copies files off it), or to the window's end. A host that cannot be reached
    keeps the grant open until a later tick reaches it."""
    jobs = (
        ProvisioningJob.objects.filter(replaced_at__isnull=False)
        .exclude(status=ProvisioningJob.Status.REVOKED)
        .select_related("order", "lot__host", "grant")
    )
    if order_id is not None:
        jobs = jobs.filter(order_id=order_id)
    closed = 0
    for job in jobs:
        if not closing(job, now):
            continue
        try:
            closed += services.revoke_lot(job, backend, now=now, free_now=True)
        except StepFailed as exc:
            log.warning("replaced lot not reached", extra={"job": job.pk, "error": str(exc)})
    return closed


def closing(job: ProvisioningJob, now: datetime) -> bool:
    """Whether a replaced job's access is to be removed now (see :func:`close_replaced`)."""
    grant = job.access_grant
    if grant is None or grant.keys_at is None or now >= job.order.ends_at:
        return True  # never opened to the researcher: nothing of theirs to copy off it
    return now >= open_until(job)


def open_until(job: ProvisioningJob) -> datetime:
    """Until when a lot replaced while its access was open stays reachable: the grace after
    access opened on the spare (the window's end until it has)."""
    moved = (
        Incident.objects.filter(order_id=job.order_id, lot_id=job.lot_id, replacement__isnull=False)
        .order_by("-started_at")
        .first()
    )
    if moved is None or moved.ended_at is None:
        return job.order.ends_at
    return min(job.order.ends_at, moved.ended_at + settings.PROVISIONING_REPLACED_ACCESS_GRACE)
