"""How provisioning reacts to what happened (infra.events; ``booking_moved`` is a question
asked inside the move's transaction): connected when this module is imported, from
ProvisioningConfig.ready(). Each receiver is idempotent."""

from __future__ import annotations

from django.conf import settings

from provisioning import access, keys, replacement, schedule, services
from provisioning.events import access_opened, lot_held, order_approved
from provisioning.models import AccessGrant, ProvisioningJob
from reservations import incidents
from reservations.events import booking_moved, credit_decided, order_paid, ssh_keys_changed
from reservations.models import Order
from reservations.services import system

booking_moved.connect(access.follow_moved_booking, dispatch_uid="provisioning-move")


@order_paid.receiver(dispatch_uid="provisioning: approve a paid order without the operator")
def auto_approve(*, order_id: int, **_: object) -> None:
    """With PROVISIONING_AUTO_APPROVE, a paid order is approved at once (the demo, or an
    operator who approves every payment anyway). Already approved: nothing to do."""
    if not settings.PROVISIONING_AUTO_APPROVE:
        return
    order = Order.objects.get(pk=order_id)
    if order.status == Order.STATUS_PAID:
        services.approve_order(order, actor=system("auto-approve"))


@order_approved.receiver(dispatch_uid="provisioning: start what is due of an approved order")
def start_what_is_due(*, order_id: int, **_: object) -> None:
    """What is due now of an approved order (a window within the preparation lead, or
    started) starts at once; the rest by the periodic tick, which also catches up here."""
    schedule.tick(order_id=order_id)


@ssh_keys_changed.receiver(dispatch_uid="provisioning: install changed keys")
def install_changed_keys(*, order_id: int, **_: object) -> None:
    """Each lot of the order under an open grant gets its keys installed (the task finds
    out whether access is open, and reads the keys from the database)."""
    jobs = ProvisioningJob.objects.filter(order_id=order_id, grant__closed_at__isnull=True)
    for job_id in jobs.values_list("pk", flat=True):
        keys.enqueue(job_id)


@lot_held.receiver(dispatch_uid="provisioning: replace a lot that failed its acceptance")
def replace_failed_lot(*, job_id: int, **_: object) -> None:
    """A lot held because its report does not accept it: an incident, and the booking on a
    spare where one is free (a lot the operator held is not an incident)."""
    job = ProvisioningJob.objects.select_related("lot__host").get(pk=job_id)
    failed = not services.acceptance(job)[0]
    # Seen at the job's last recorded step (the report's), on the clock that ran it.
    replacement.after_failure(job_id, failed=failed, now=job.heartbeat_at)


@access_opened.receiver(dispatch_uid="provisioning: end the incidents access answers")
def end_incidents(*, order_id: int, job_id: int, **_: object) -> None:
    """Access open on a lot: the incidents it answers (its own, or those of the lot it
    replaced) end when the keys went in, and the time lost is credited."""
    grant = AccessGrant.objects.select_related("order", "lot").filter(job_id=job_id).first()
    if grant is not None and grant.keys_at is not None:
        incidents.end_on_access(grant.order, grant.lot, at=grant.keys_at)


@credit_decided.receiver(dispatch_uid="provisioning: access follows a credit taken as time")
def follow_credit(*, order_id: int, **_: object) -> None:
    """A credit taken as time moved the order's end: its open grants end there too."""
    access.follow_extension(Order.objects.get(pk=order_id))
