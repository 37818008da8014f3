"""The access window's guards, each on its own: one run of a job at a time, a revocation per
lot, a lead that never cuts into the previous booking, lots out of service left alone, a run
that stops when its grant closes, and grants for jobs provisioned before grants existed."""

from __future__ import annotations

import importlib
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.core import mail
from django.db import transaction
from django.utils import timezone

from provisioning import access, schedule, services
from provisioning.models import AccessGrant, ProvisioningJob
from reservations.models import Host, Lot, Order
from reservations.services import mark_paid, place_order, system
from tests.concurrency import at_once
from tests.conftest import RequestFactory, build_inventory
from tests.provisioning.clock import Clock, SimulatedHost
from tests.provisioning.test_provisioning import OPERATOR


def approved(make_request: RequestFactory, starts_at: datetime, **fields: Any) -> Order:
    order = place_order(make_request(starts_at=starts_at, window_days=3, **fields))
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="paid")
    services.approve_order(order, actor=OPERATOR)
    return order


def keys_file(hosts: SimulatedHost, job: ProvisioningJob, account: str) -> Path:
    return hosts.root / job.lot.host.name / "home" / account / ".ssh" / "authorized_keys"


def one_lot_only() -> Lot:
    """The H200 inventory reduced to one lot in service."""
    first, second = Lot.objects.filter(host__kind__slug="h200").order_by("gpu_a")
    Lot.objects.filter(pk=second.pk).update(status=Lot.Status.RETIRED)
    return first


@pytest.mark.django_db(transaction=True)
def test_two_runs_of_one_job_at_once_deliver_it_once_and_keep_the_keys(
    make_request: RequestFactory, tmp_path: Path, soon: datetime
) -> None:
    build_inventory()
    order = approved(make_request, soon)
    job = ProvisioningJob.objects.select_related("lot__host").get(order=order)
    assert access.open_grant(job, now=soon) is not None
    hosts = SimulatedHost(root=tmp_path / "hosts", clock=Clock(soon))
    outcomes = at_once(2, lambda _i: services.run_job(job.pk, hosts, now=soon).status)
    assert not [outcome for outcome in outcomes if isinstance(outcome, Exception)]
    job.refresh_from_db()
    assert job.status == ProvisioningJob.Status.READY
    assert job.attempts == 1  # one run claimed it; the other found it taken and left it
    (account,) = job.accounts
    assert order.ssh_keys.get().public_key in keys_file(hosts, job, account).read_text()
    assert hosts.calls.count(("prepare_access", account)) == 1
    # A stray message after delivery changes nothing either.
    assert services.run_job(job.pk, hosts, now=soon).status == ProvisioningJob.Status.READY
    assert order.ssh_keys.get().public_key in keys_file(hosts, job, account).read_text()


@pytest.mark.django_db
def test_a_host_that_is_down_keeps_only_its_own_lot_closed(
    make_request: RequestFactory, tmp_path: Path, soon: datetime, settings: Any
) -> None:
    settings.ADMINS = [("Operator", "desk@example.org")]
    build_inventory()
    first, second = Lot.objects.filter(host__kind__slug="h200").order_by("gpu_a")
    other = Host.objects.create(name="test-h200-b", kind=first.host.kind, address="127.0.0.1")
    Lot.objects.filter(pk=second.pk).update(host=other)
    order = approved(make_request, soon, lot_count=2)
    hosts = SimulatedHost(root=tmp_path / "hosts", clock=Clock(soon))

    def start(job_id: int) -> None:
        services.run_job(job_id, hosts, now=soon)

    schedule.tick(now=soon, start=start, backend=hosts)
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_ACTIVE

    end = order.ends_at
    hosts.clock.now = end
    hosts.down_hosts = {first.host.name}
    mail.outbox.clear()
    assert services.revoke_due(now=end, backend=hosts) == 0  # not complete: one lot is not
    on_first = AccessGrant.objects.get(order=order, lot=first)
    on_second = AccessGrant.objects.get(order=order, lot=second)
    assert on_first.closed_at is None
    assert "connection refused" in on_first.revoke_error
    assert on_second.closed_at == end  # the reachable host's lot is revoked all the same
    assert [m.subject for m in mail.outbox] == [
        f"[Django] Revocation failed: {order.reference} on {first}"
    ]
    assert services.revoke_due(now=end + timedelta(minutes=1), backend=hosts) == 0
    assert len(mail.outbox) == 1  # told once

    hosts.down_hosts = set()
    assert services.revoke_due(now=end + timedelta(minutes=2), backend=hosts) == 1
    on_first.refresh_from_db()
    assert on_first.closed_at == end + timedelta(minutes=2)
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_COMPLETED


@pytest.mark.django_db
def test_the_lead_never_cuts_into_the_previous_booking_of_the_lot(
    make_request: RequestFactory, tmp_path: Path, soon: datetime, settings: Any
) -> None:
    settings.PROVISIONING_PREPARE_LEAD = timedelta(hours=6)
    settings.RESERVATION_TURNAROUND = timedelta(hours=1)
    build_inventory()
    lot = one_lot_only()
    before = place_order(make_request(starts_at=soon, window_days=3))  # paid, approved later
    with transaction.atomic():
        assert mark_paid(before, actor=system("test"), reason="paid")
    after = approved(make_request, before.ends_at + timedelta(hours=1))
    hosts = SimulatedHost(root=tmp_path / "hosts", clock=Clock(soon))
    started: list[int] = []

    inside_before = after.starts_at - timedelta(hours=6)  # still inside `before`'s window
    assert schedule.tick(now=inside_before, start=started.append, backend=hosts).prepared == 0
    assert not AccessGrant.objects.filter(lot=lot).exists()
    # `before`, approved during its own window, still gets its lot.
    services.approve_order(before, actor=OPERATOR)
    assert schedule.tick(now=inside_before, start=started.append, order_id=before.pk).prepared
    assert AccessGrant.objects.get(lot=lot).order_id == before.pk
    # Its turnaround past and its access removed, the next booking's turn comes.
    assert services.revoke_due(now=before.ends_at, backend=hosts) == 1
    free = before.ends_at + timedelta(hours=1)
    assert schedule.tick(now=free - timedelta(minutes=1), start=started.append).prepared == 0
    assert schedule.tick(now=free, start=started.append).prepared == 1
    assert AccessGrant.objects.get(order=after).opened_at == free


@pytest.mark.django_db
def test_a_lot_out_of_service_is_neither_prepared_nor_opened(
    make_request: RequestFactory, soon: datetime
) -> None:
    build_inventory()
    order = approved(make_request, soon)
    job = ProvisioningJob.objects.get(order=order)
    Lot.objects.filter(pk=job.lot_id).update(status=Lot.Status.MAINTENANCE)
    started: list[int] = []
    assert schedule.tick(now=soon, start=started.append).prepared == 0
    assert started == []
    Lot.objects.filter(pk=job.lot_id).update(status=Lot.Status.ACTIVE)
    assert schedule.tick(now=soon, start=started.append).prepared == 1
    assert started == [job.pk]


class ClosingMidway(SimulatedHost):
    """The window's revocation closes the grant while the job is assigning the cards."""

    def script(self, host: Host, name: str, *args: str) -> None:
        super().script(host, name, *args)
        if name == "assign_cards":
            job = ProvisioningJob.objects.get(grant__isnull=False)
            assert access.close_grant(job, now=self.clock.now)


@pytest.mark.django_db
def test_a_run_stops_at_the_next_step_once_its_grant_is_closed(
    make_request: RequestFactory, tmp_path: Path, soon: datetime
) -> None:
    build_inventory()
    order = approved(make_request, soon)
    job = ProvisioningJob.objects.get(order=order)
    assert access.open_grant(job, now=soon) is not None
    hosts = ClosingMidway(root=tmp_path / "hosts", clock=Clock(soon))
    job = services.run_job(job.pk, hosts, now=soon)
    assert job.steps_done == ProvisioningJob.STEPS.index("assign_cards")  # not recorded
    assert hosts.benchmarks == []  # nothing more ran on the cards
    (account,) = [a for a, _c in services.accounts_for(job)]
    assert keys_file(hosts, job, account).read_text() == ""


@pytest.mark.django_db
def test_jobs_provisioned_before_grants_existed_get_one_and_early_keys_go_back(
    make_request: RequestFactory, soon: datetime
) -> None:
    build_inventory()
    first, second = Lot.objects.filter(host__kind__slug="h200").order_by("gpu_a")
    running = approved(make_request, soon)
    early = approved(make_request, soon + timedelta(days=20))
    on_the_same_lot = approved(make_request, soon + timedelta(days=30))
    now = timezone.now()
    Order.objects.filter(pk=running.pk).update(
        starts_at=now - timedelta(hours=1), ends_at=now + timedelta(days=2)
    )
    # As the old code left them: delivered at approval, no grants at all; the two later
    # windows on one lot, both "ready" at once.
    ProvisioningJob.objects.filter(order=running).update(lot=first)
    ProvisioningJob.objects.filter(order__in=(early, on_the_same_lot)).update(lot=second)
    ProvisioningJob.objects.update(status=ProvisioningJob.Status.READY, steps_done=7, ready_at=now)
    migration = importlib.import_module("provisioning.migrations.0003_access_grants")
    migration.grants_for_jobs_already_started(apps, None)

    grants = {g.order_id: g for g in AccessGrant.objects.all()}
    assert set(grants) == {running.pk, early.pk}  # one lot, one order at a time
    running_grant = grants[running.pk]
    assert running_grant.keys_at == now  # inside its window: its access is recorded
    assert running_grant.closed_at is None
    assert grants[early.pk].keys_at is None
    early_job = ProvisioningJob.objects.get(order=early)
    # Its keys are emptied when the tick resumes it (from the step that empties them).
    assert (early_job.status, early_job.steps_done) == (ProvisioningJob.Status.PENDING, 1)
    waiting = ProvisioningJob.objects.get(order=on_the_same_lot)
    assert (waiting.status, waiting.steps_done) == (ProvisioningJob.Status.PENDING, 0)


@pytest.mark.django_db
def test_a_benchmark_still_running_when_the_window_ends_is_stopped_with_its_workers(
    make_request: RequestFactory, tmp_path: Path, soon: datetime
) -> None:
    build_inventory()
    order = approved(make_request, soon)
    job = ProvisioningJob.objects.select_related("lot__host").get(order=order)
    assert access.open_grant(job, now=soon) is not None
    ProvisioningJob.objects.filter(pk=job.pk).update(
        status=ProvisioningJob.Status.RUNNING,
        steps_done=ProvisioningJob.STEPS.index("run_validation"),
    )
    hosts = SimulatedHost(root=tmp_path / "hosts", clock=Clock(order.ends_at))
    out = hosts.host_root(job.lot.host) / "reports" / f"job-{job.pk}.json"
    worker_pid = tmp_path / "worker.pid"
    # A benchmark as the backend starts it (its own process group), with a worker process.
    benchmark = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; "
            "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
            f"open({str(worker_pid)!r}, 'w').write(str(w.pid)); time.sleep(120)",
            "--out",
            str(out),
        ],
        start_new_session=True,
    )
    for _ in range(100):
        if worker_pid.exists() and worker_pid.read_text():
            break
        time.sleep(0.05)
    child = int(worker_pid.read_text())
    assert services.revoke_due(now=order.ends_at, backend=hosts) == 1
    assert ("stop_validation", f"job-{job.pk}") in hosts.calls
    assert benchmark.wait(timeout=10) == -signal.SIGKILL
    for _ in range(100):  # the worker went with its group
        if (
            not Path(f"/proc/{child}").exists()
            or "zombie" in Path(f"/proc/{child}/status").read_text()
        ):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the benchmark's worker is still running")
    assert AccessGrant.objects.get(job=job).closed_at == order.ends_at
