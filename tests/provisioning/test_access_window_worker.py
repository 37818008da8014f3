"""The access window with a real Celery worker and beat, over SSH to a real sshd on loopback:
approval prepares the lot (account, cards, the benchmark really running) with no keys on the
host; the keys appear at the window's start, put there by the beat's tick; the window's end
removes them and frees the lot.

The window starts far enough ahead for the preparation to finish on a loaded machine; once
the lot is prepared, the whole window is brought forward to a few seconds from then (see
``bring_forward``), so the test does not sit idle until the original start."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.db import transaction
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange  # type: ignore[import-untyped]
from django.db.models import F
from django.utils import timezone

from provisioning import schedule, services
from provisioning.models import AccessGrant, ProvisioningJob
from provisioning.ssh import SshBackend
from reservations.models import Hold, Host, Order
from reservations.services import mark_paid, place_order, system
from tests.conftest import RequestFactory, build_inventory
from tests.provisioning.test_provisioning import OPERATOR
from tests.sshd import Sshd, start_sshd
from tests.workers import WorkerProcess, start_worker, wait_for

LEAD_TO_START = timedelta(seconds=100)
"""How far ahead the window starts: room for the preparation (the benchmark on the CPU)."""
SOON_AFTER = timedelta(seconds=6)
"""Once prepared, the window starts this long after: beat's one-second ticks run several
times before it, with no keys on the host."""


def bring_forward(order: Order, starts_at: datetime) -> Order:
    """The order's window moved earlier to start at ``starts_at`` (the same length): the
    order, its holds and its open grant's copy of the window, shifted alike in one
    transaction, as if the clock had run faster while nothing was due. What the test watches
    (no keys before the start, the beat's tick putting them in at it) is unchanged."""
    shift = order.starts_at - starts_at
    with transaction.atomic():
        Order.objects.filter(pk=order.pk).update(
            starts_at=F("starts_at") - shift, ends_at=F("ends_at") - shift
        )
        for hold in Hold.objects.filter(order=order):
            lower, upper = hold.period.lower, hold.period.upper
            hold.period = DateTimeTZRange(lower - shift, upper - shift, "[)")
            hold.save(update_fields=["period"])
        AccessGrant.objects.filter(order=order).update(
            window_start=F("window_start") - shift, window_end=F("window_end") - shift
        )
    return Order.objects.get(pk=order.pk)


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    yield from start_sshd(tmp_path_factory.mktemp("sshd"))


@pytest.fixture
def host_paths(tmp_path: Path) -> dict[str, Path]:
    return {"root": tmp_path / "host-root", "dir": tmp_path / "var-lib-gpulots"}


@pytest.fixture
def worker_with_beat(
    transactional_db: None, sshd: Sshd, host_paths: dict[str, Path], tmp_path: Path
) -> Iterator[WorkerProcess]:
    """A worker with beat inside it, ticking every second, provisioning over SSH."""
    yield from start_worker(
        beat_schedule=tmp_path / "beat-schedule",
        environ={
            "PROVISIONING_TICK_SECONDS": "1",
            "PROVISIONING_BACKEND": "ssh",
            "PROVISIONING_SSH_KEY": sshd.client_key,
            "PROVISIONING_REMOTE_DIR": str(host_paths["dir"]),
            "PROVISIONING_REMOTE_ROOT": str(host_paths["root"]),
            "PROVISIONING_REMOTE_ACCOUNTS": "0",
            "PROVISIONING_REMOTE_PYTHON": sys.executable,
            "PROVISIONING_BENCHMARK_ARGS": "--quick",
            # The loopback host has no GPU: a CPU stand-in by name (else it is held).
            "PROVISIONING_CPU_STAND_IN_HOSTS": "test-h200,test-b200,test-mi300x",
        },
    )


def first_time_with_keys(keys: Path, timeout: float) -> datetime | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if keys.exists() and keys.read_text().strip():
            return timezone.now()
        time.sleep(0.1)
    return None


@pytest.mark.worker
def test_keys_appear_at_the_windows_start_not_at_approval(
    worker_with_beat: WorkerProcess,
    sshd: Sshd,
    host_paths: dict[str, Path],
    make_request: RequestFactory,
) -> None:
    build_inventory()
    starts_at = (timezone.now() + LEAD_TO_START).replace(microsecond=0)
    order = place_order(make_request(starts_at=starts_at, window_days=3))
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="paid")
    lot_host = order.holds.get().lot.host
    Host.objects.filter(pk=lot_host.pk).update(
        address="127.0.0.1", ssh_port=sshd.port, ssh_user=sshd.user, ssh_host_key=sshd.host_key
    )
    services.approve_order(order, actor=OPERATOR)  # within the lead: preparation starts now

    assert wait_for(
        lambda: ProvisioningJob.objects.filter(
            order=order, status=ProvisioningJob.Status.PREPARED
        ).exists(),
        timeout=LEAD_TO_START.total_seconds() - 10,
    ), worker_with_beat.log()
    assert timezone.now() < starts_at, "prepared too late for the test to mean anything"
    order = bring_forward(order, (timezone.now() + SOON_AFTER).replace(microsecond=0))
    starts_at = order.starts_at
    job = ProvisioningJob.objects.get(order=order)
    (account,) = [a for a, _cards in services.accounts_for(job)]
    keys = host_paths["root"] / "home" / account / ".ssh" / "authorized_keys"
    # Prepared and benchmarked on the host, and nobody can log in yet.
    assert keys.exists()
    assert keys.read_text() == ""
    assert job.report is not None
    assert "split" in job.report
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_APPROVED

    appeared = first_time_with_keys(keys, timeout=SOON_AFTER.total_seconds() + 60)
    assert appeared is not None, worker_with_beat.log()
    assert appeared >= starts_at  # the tick put them there, at the start and not before
    assert wait_for(
        lambda: Order.objects.get(pk=order.pk).status == Order.STATUS_ACTIVE, timeout=30
    ), worker_with_beat.log()
    grant = AccessGrant.objects.get(job=job)
    assert grant.keys_at is not None
    assert starts_at <= grant.keys_at <= appeared
    assert order.ssh_keys.get().public_key in keys.read_text()

    # The window's end (on a simulated clock here: it is three days away) removes them.
    backend = SshBackend(
        client_key=sshd.client_key,
        remote_dir=str(host_paths["dir"]),
        remote_root=str(host_paths["root"]),
        real_accounts=False,
        python=sys.executable,
        benchmark_args=["--quick"],
    )
    ended = schedule.tick(now=order.ends_at + timedelta(seconds=1), backend=backend)
    assert ended.closed == 1
    assert not keys.exists()
    grant.refresh_from_db()
    assert grant.closed_at == order.ends_at + timedelta(seconds=1)
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_COMPLETED
