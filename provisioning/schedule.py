"""The time model of access, found from the database at every tick.

For each booked lot of an approved order (one ProvisioningJob):

- **prepare**: once the lot is free (the previous booking's window and turnaround over,
  checked against its hold; its access removed and confirmed by the host, kept by the
  grant's exclusion constraint) and not earlier than PROVISIONING_PREPARE_LEAD before the
  window's start, the job's access grant opens
  and the job prepares the account, environment and cards and runs the acceptance
  benchmark on them, with no keys on the host;
- **open**: at the window's start the keys go in, the lot is ready, and the order becomes
  active (and is mailed) once every lot is;
- **close**: at the window's end the access is removed on the host and only then is the
  grant closed (services.revoke_due); a host that cannot be reached keeps the lot closed to
  the next tenant and the operator is alerted.

``tick`` does what is due, catching up with anything overdue (a worker or beat that was
down). Beat runs it every PROVISIONING_TICK_SECONDS (on the minute by default), on a worker
of its own (PROVISIONING_CLOCK_QUEUE), and approval runs it for its order at once, so no
schedule lives in a broker's memory (no ``eta``, no ``countdown``). Two ticks at once are
harmless: every change in it is an insert under the constraint or a
conditional update.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from provisioning import access, replacement, services
from provisioning.backends import Backend
from provisioning.models import AccessGrant, ProvisioningJob
from reservations.models import Lot, Order

Start = Callable[[int], None]
"""Starts a job's remaining steps: a Celery message in production, a call in tests."""


@dataclass
class Tick:
    closed: int = 0
    prepared: int = 0
    resumed: int = 0
    opened: int = 0
    reminded: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def tick(
    *,
    now: datetime | None = None,
    start: Start | None = None,
    backend: Backend | None = None,
    order_id: int | None = None,
) -> Tick:
    """Close, prepare, resume and open whatever is due at ``now`` (all orders, or one)."""
    now = now or timezone.now()
    start = start or services.enqueue_job
    done = Tick()
    if order_id is None:
        done.closed = services.revoke_due(now=now, backend=backend)
    done.closed += replacement.close_replaced(now=now, backend=backend, order_id=order_id)
    done.prepared = prepare_due(now=now, start=start, order_id=order_id)
    done.resumed = resume_stalled(now=now, start=start, order_id=order_id)
    done.opened = open_due(now=now, start=start, order_id=order_id)
    if order_id is None:
        done.reminded = services.remind_before_end(now=now)
    return done


def _scheduled(order_id: int | None) -> models.QuerySet[ProvisioningJob]:
    """Jobs of approved orders (or active ones: a spare replacing a lot mid-window) on lots
    in service, active or spare (a lot in maintenance or retired is not prepared nor
    opened: the operator moves its bookings, see reservations.inventory), that no
    replacement took off their lot."""
    jobs = ProvisioningJob.objects.filter(
        order__status__in=(Order.STATUS_APPROVED, Order.STATUS_ACTIVE),
        lot__status__in=Lot.IN_SERVICE,
    )
    jobs = jobs.filter(replaced_at__isnull=True)
    return jobs.filter(order_id=order_id) if order_id is not None else jobs


def prepare_due(*, now: datetime, start: Start, order_id: int | None = None) -> int:
    """Jobs whose preparation is due and whose lot is free get their grant and start."""
    lead: timedelta = settings.PROVISIONING_PREPARE_LEAD
    candidates = (
        _scheduled(order_id)
        .filter(
            status=ProvisioningJob.Status.PENDING,
            grant__isnull=True,
            order__starts_at__lte=now + lead,
            order__ends_at__gt=now,
        )
        .select_related("order", "lot")
        .order_by("order__starts_at", "pk")
    )
    busy = set(
        AccessGrant.objects.filter(
            models.Q(closed_at__isnull=True) | models.Q(period__endswith__gt=now)
        ).values_list("lot_id", flat=True)
    )
    started = 0
    for job in candidates:
        if job.lot_id in busy:
            continue
        _grant, opened = access.take_lot(job, now=now)
        if not opened:
            continue  # not free yet, or another tick took it: that one starts the job
        busy.add(job.lot_id)
        start(job.pk)
        started += 1
    return started


def resume_stalled(*, now: datetime, start: Start, order_id: int | None = None) -> int:
    """Jobs under an open grant that no worker runs (a lost message, a killed worker) are
    started again; they continue after their last recorded step."""
    resumed = 0
    for job_id in _scheduled(order_id).filter(services.stalled(now)).values_list("pk", flat=True):
        # One tick takes it (a conditional update); a run still going loses its claim.
        if (
            ProvisioningJob.objects.filter(pk=job_id)
            .filter(services.stalled(now))
            .update(status=ProvisioningJob.Status.PENDING, heartbeat_at=now, run_token="")
        ):
            start(job_id)
            resumed += 1
    return resumed


def open_due(*, now: datetime, start: Start, order_id: int | None = None) -> int:
    """Prepared jobs whose window has started: their keys go in now."""
    due = _scheduled(order_id).filter(
        status=ProvisioningJob.Status.PREPARED,
        order__starts_at__lte=now,
        order__ends_at__gt=now,
        grant__closed_at__isnull=True,
    )
    opened = 0
    for job_id in due.values_list("pk", flat=True):
        with transaction.atomic():  # one tick takes it: the others see it is not prepared
            taken = ProvisioningJob.objects.filter(
                pk=job_id, status=ProvisioningJob.Status.PREPARED
            ).update(status=ProvisioningJob.Status.PENDING, heartbeat_at=now)
        if taken:
            start(job_id)
            opened += 1
    return opened
