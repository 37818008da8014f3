"""Access follows the booking exactly: a simulated clock over many orders on few lots.

Two H200 lots on one host carry back-to-back windows (with the turnaround between them), a
two-lot order of two independent experiments, orders approved days early and one approved
after its window started; the host goes down across the first windows' end (the
revocation fails, then recovers) and a worker dies between two steps of one job. At every
tick the schedule runs (provisioning.schedule.tick, as beat runs it), and the invariant is
checked on the host itself (the local backend's sandbox: which accounts exist, which have
keys) and in the database (the grants):

- never two orders with access to one lot (an account prepared or keys installed);
- keys only inside a paid window (or after its end while the host is down, which is then
  the only order on the lot: nobody can reach it and nothing else opens there);
- nothing on a lot before its preparation lead; the benchmark only under an open grant,
  on the lot's own cards.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core import mail
from django.db import IntegrityError, transaction
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange  # type: ignore[import-untyped]

from provisioning import schedule, services
from provisioning.backends import StepFailed
from provisioning.models import AccessGrant, ProvisioningJob
from reservations.models import Host, Lot, Order
from reservations.services import mark_paid, place_order, system
from tests.conftest import RequestFactory, build_inventory
from tests.provisioning.clock import Clock, SimulatedHost, WorkerKilled
from tests.provisioning.test_provisioning import OPERATOR

LEAD = timedelta(hours=6)
TURNAROUND = timedelta(hours=6)
OUTAGE = timedelta(hours=8)


def paid(make_request: RequestFactory, starts_at: datetime, **fields: Any) -> Order:
    order = place_order(make_request(starts_at=starts_at, window_days=3, **fields))
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="paid")
    return order


def job_of(account: str) -> ProvisioningJob:
    """The job an account on the host belongs to (gl-<reference>-<lot>[-a|-b])."""
    for job in ProvisioningJob.objects.select_related("order", "lot"):
        if account in [a for a, _cards in services.accounts_for(job)]:
            return job
    raise AssertionError(f"an account of no order on the host: {account}")


def check_invariant(hosts: SimulatedHost, now: datetime, seen: dict[str, datetime]) -> None:
    on_lot: dict[int, set[str]] = {}
    for host in Host.objects.filter(lots__isnull=False).distinct():
        home = hosts.root / host.name / "home"
        for account in sorted(p.name for p in home.iterdir()) if home.exists() else []:
            job = job_of(account)
            order = job.order
            on_lot.setdefault(job.lot_id, set()).add(order.reference)
            seen.setdefault(account, now)
            # Nothing of an order on a lot before its preparation lead.
            assert seen[account] >= order.starts_at - LEAD, (account, now)
            # Whatever of it is on the host is covered by its open grant.
            assert job.open_grant is not None, (account, now, job.status)
            keys = home / account / ".ssh" / "authorized_keys"
            if keys.exists() and keys.read_text().strip():
                assert order.starts_at <= now, f"keys before the window: {account} at {now}"
                host_down = hosts.down is not None and hosts.down[0] <= now < hosts.down[1]
                assert now < order.ends_at or host_down, f"keys after the window: {account}"
                assert job.open_grant.keys_at is not None
    for lot, orders in on_lot.items():
        assert len(orders) == 1, f"two orders on lot {lot} at {now}: {orders}"
    # The database's own record agrees: no two grants of a lot overlap, ever.
    grants = list(AccessGrant.objects.order_by("lot_id", "opened_at"))
    for before, after in itertools.pairwise(grants):
        if before.lot_id == after.lot_id:
            assert before.closed_at is not None
            assert before.closed_at <= after.opened_at


@pytest.mark.django_db
def test_access_follows_the_booking_at_every_tick_of_the_clock(
    make_request: RequestFactory, tmp_path: Path, soon: datetime, settings: Any
) -> None:
    settings.PROVISIONING_PREPARE_LEAD = LEAD
    settings.RESERVATION_TURNAROUND = TURNAROUND
    settings.ADMINS = [("Operator", "desk@example.org")]
    build_inventory()
    first, second = Lot.objects.filter(host__kind__slug="h200").order_by("gpu_a")
    t0 = soon
    a = paid(make_request, t0)
    b = paid(make_request, t0, usage_mode="independent")
    # Back to back with a and b: the turnaround is the only gap.
    c = paid(make_request, t0 + timedelta(days=3) + TURNAROUND)
    d = paid(make_request, t0 + timedelta(days=3) + TURNAROUND)
    # Both lots at once, two independent experiments; approved only after it started.
    late = paid(make_request, t0 + timedelta(days=8), lot_count=2, usage_mode="independent")
    # Far ahead (the January order of the report): approved today, prepared only at its lead.
    far = paid(make_request, t0 + timedelta(days=14))
    for order in (a, b, c, d, far):
        services.approve_order(order, actor=OPERATOR)  # days before any window

    clock = Clock(t0 - timedelta(days=2))
    hosts = SimulatedHost(root=tmp_path / "hosts", clock=clock)
    # The host is down from the first windows' end for eight hours, longer than the
    # turnaround: their access cannot be removed, and c and d must wait for it.
    hosts.down = (a.ends_at, a.ends_at + OUTAGE)
    # The worker preparing d dies just before the environment step.
    (d_job,) = ProvisioningJob.objects.filter(order=d)
    (d_account, _cards) = services.accounts_for(d_job)[0]
    hosts.kill_before.add(("prepare_environment", d_account))

    messages: list[int] = []
    started: dict[int, int] = {}

    def start(job_id: int) -> None:  # a message to the broker
        messages.append(job_id)
        started[job_id] = started.get(job_id, 0) + 1

    def deliver() -> None:
        """Every message is delivered twice (a broker delivers at least once)."""
        while messages:
            job_id = messages.pop(0)
            for _copy in range(2):
                try:
                    services.run_job(job_id, hosts, now=clock.now)
                except WorkerKilled:
                    pass  # the job keeps its last recorded step; the tick resumes it later
                except StepFailed:
                    pass  # the task would retry; the tick resumes it once it looks stalled

    instants = {
        instant
        for order in (a, b, c, d, late, far)
        for instant in (order.starts_at - LEAD, order.starts_at, order.ends_at)
    }
    end = far.ends_at + timedelta(days=1)
    ticks = sorted(
        {
            clock.now + timedelta(minutes=30 * i)
            for i in range(int((end - clock.now) / timedelta(minutes=30)))
        }
        | instants
    )
    seen: dict[str, datetime] = {}
    active_at: dict[str, datetime] = {}
    for now in ticks:
        clock.now = now
        if now == late.starts_at + timedelta(hours=2):
            services.approve_order(late, actor=OPERATOR)  # approval after the start
            schedule.tick(now=now, start=start, backend=hosts, order_id=late.pk)
            deliver()
        schedule.tick(now=now, start=start, backend=hosts)
        deliver()
        check_invariant(hosts, now, seen)
        for order in Order.objects.filter(status=Order.STATUS_ACTIVE):
            active_at.setdefault(order.reference, now)
        for order in Order.objects.filter(status=Order.STATUS_ACTIVE):
            assert order.starts_at <= now < order.ends_at + OUTAGE

    # Everything ran its course.
    for order in (a, b, c, d, late, far):
        order.refresh_from_db()
        assert order.status == Order.STATUS_COMPLETED, order.reference
        for job in ProvisioningJob.objects.filter(order=order):
            grant = job.access_grant
            assert job.status == ProvisioningJob.Status.REVOKED
            assert grant is not None
            assert grant.keys_at is not None
            assert grant.closed_at is not None
            assert order.starts_at <= grant.keys_at < order.ends_at
            assert grant.opened_at >= order.starts_at - LEAD
    # Early approval: prepared at the lead, opened exactly at the start, closed at the end.
    grant_a = AccessGrant.objects.get(order=a)
    assert grant_a.opened_at == a.starts_at - LEAD
    assert grant_a.keys_at == a.starts_at
    assert active_at[a.reference] == a.starts_at
    far_grant = AccessGrant.objects.get(order=far)
    assert far_grant.opened_at == far.starts_at - LEAD
    assert far_grant.keys_at == far.starts_at
    # The revocation failed while the host was down and went through when it came back; the
    # operator was told once per lot; c and d waited for it and for the turnaround after it.
    back = hosts.down[1]
    for order in (a, b):
        grant = AccessGrant.objects.get(order=order)
        assert grant.closed_at is not None
        assert back <= grant.closed_at < back + timedelta(hours=1)
    alerts = [m for m in mail.outbox if m.subject.startswith("[Django] Revocation failed")]
    assert len(alerts) == 2, [m.subject for m in mail.outbox]
    for order in (c, d):
        grant = AccessGrant.objects.get(order=order)
        previous = AccessGrant.objects.get(lot=grant.lot, order__in=(a, b))
        assert previous.closed_at is not None
        assert grant.opened_at >= previous.closed_at  # not before the host confirmed it
        assert grant.opened_at >= previous.window_end + TURNAROUND
        assert grant.keys_at is not None
        assert grant.keys_at > order.starts_at
    # The killed worker's job was resumed and finished, with its steps done once.
    d_job.refresh_from_db()
    assert d_job.attempts >= 2
    for step in ("prepare_access", "prepare_environment", "assign_cards"):
        assert hosts.calls.count((step, d_account)) == 1, step
    # Each job was started once to prepare and once to open (once in all when its turn came
    # after its start; more for the killed one: resumed); every duplicate delivery found the
    # job taken and did nothing.
    for job in ProvisioningJob.objects.exclude(pk=d_job.pk).select_related("order", "grant"):
        runs = 1 if job.grant.opened_at >= job.order.starts_at else 2
        assert started[job.pk] == runs, (job, started[job.pk])
        assert job.attempts == runs, job
    for job in ProvisioningJob.objects.all():
        for account, _cards in services.accounts_for(job):
            assert hosts.calls.count(("prepare_access", account)) == 1, account
    # Approved after its start: opened at once, and the window was not extended.
    late_grants = AccessGrant.objects.filter(order=late)
    assert late_grants.count() == 2
    for grant in late_grants:
        assert grant.keys_at == late.starts_at + timedelta(hours=2)
        assert grant.closed_at == late.ends_at
    # The benchmark ran on the lot's own cards, under the job's open grant, before the keys.
    assert hosts.benchmarks
    for when, report_name, cards in hosts.benchmarks:
        job = ProvisioningJob.objects.select_related("lot").get(pk=int(report_name.split("-")[1]))
        assert cards == f"{job.lot.gpu_a},{job.lot.gpu_b}"
        grant = AccessGrant.objects.get(job=job)
        assert grant.opened_at <= when
        assert grant.keys_at is None or when <= grant.keys_at
    assert {first.pk, second.pk} == set(AccessGrant.objects.values_list("lot_id", flat=True))


@pytest.mark.django_db
def test_the_database_refuses_a_second_access_on_one_lot(
    make_request: RequestFactory, soon: datetime
) -> None:
    build_inventory()
    lot = Lot.objects.filter(host__kind__slug="h200").order_by("gpu_a").first()
    assert lot is not None
    a = paid(make_request, soon, lot_count=2)
    b = paid(make_request, soon + timedelta(days=10))
    services.approve_order(a, actor=OPERATOR)
    services.approve_order(b, actor=OPERATOR)
    job_a = ProvisioningJob.objects.get(order=a, lot=lot)
    job_b = ProvisioningJob.objects.get(order=b)
    open_a = DateTimeTZRange(soon, None, "[)")
    AccessGrant.objects.create(
        job=job_a,
        lot=lot,
        order=a,
        period=open_a,
        prepare_from=soon - LEAD,
        window_start=a.starts_at,
        window_end=a.ends_at,
        opened_at=soon,
    )
    # Long after a's window: still refused, because a's access was never confirmed removed.
    later = b.starts_at
    with pytest.raises(IntegrityError), transaction.atomic():
        AccessGrant.objects.create(
            job=job_b,
            lot=lot,
            order=b,
            period=DateTimeTZRange(later, None, "[)"),
            prepare_from=later - LEAD,
            window_start=b.starts_at,
            window_end=b.ends_at,
            opened_at=later,
        )
    # Keys outside the paid window, or a grant before the lead: refused by the database too.
    with pytest.raises(IntegrityError), transaction.atomic():
        AccessGrant.objects.filter(job=job_a).update(keys_at=a.ends_at + timedelta(minutes=1))
    with pytest.raises(IntegrityError), transaction.atomic():
        AccessGrant.objects.filter(job=job_a).update(opened_at=soon - LEAD - timedelta(seconds=1))


@pytest.mark.django_db
def test_approval_schedules_and_does_not_deliver(
    make_request: RequestFactory,
    tmp_path: Path,
    soon: datetime,
    django_capture_on_commit_callbacks: Any,
) -> None:
    build_inventory()
    order = paid(make_request, soon)
    hosts = SimulatedHost(root=tmp_path / "hosts", clock=Clock(soon - timedelta(days=2)))
    with django_capture_on_commit_callbacks(execute=True):
        services.approve_order(order, actor=OPERATOR)
    job = ProvisioningJob.objects.get(order=order)
    assert (job.status, job.access_grant) == (ProvisioningJob.Status.PENDING, None)
    # A stray message (or an impatient retry) for the job does nothing before its turn.
    assert services.run_job(job.pk, hosts, now=soon - timedelta(days=1)).steps_done == 0
    assert not (hosts.root / job.lot.host.name / "home").exists()
    assert settings.PROVISIONING_PREPARE_LEAD == LEAD
