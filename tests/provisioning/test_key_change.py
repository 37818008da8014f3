"""A key change after access opened: the new keys go onto the host through the same backend
and host script as the opening (the old ones gone), only inside the window and only for a
delivered lot, once per change, recorded in the order's history; a host that is away is
retried by the Celery task until the keys are there. The last test does it all with a real
worker over SSH to a real sshd on loopback."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange  # type: ignore[import-untyped]
from django.utils import timezone

from provisioning import keys, services
from provisioning.backends import HostUnreachable, LocalBackend
from provisioning.models import ProvisioningJob
from provisioning.tasks import install_ssh_keys
from reservations.models import Hold, Host, Order
from reservations.services import Actor, change_ssh_keys, mark_paid, place_order, system
from tests.conftest import RequestFactory, build_inventory, openssh_public_key
from tests.provisioning.clock import Clock, SimulatedHost, run_at_start
from tests.provisioning.test_provisioning import OPERATOR
from tests.sshd import Sshd, start_sshd
from tests.workers import WorkerProcess, start_worker, wait_for

RESEARCHER = Actor("researcher")


def open_now(make_request: RequestFactory, **overrides: Any) -> Order:
    """A paid, approved order whose window started an hour ago (placed ahead, then moved:
    a booking cannot start in the past)."""
    order = place_order(make_request(lot_count=1, window_days=3, **overrides))
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="paid")
    start = timezone.now() - timedelta(hours=1)
    hold = Hold.objects.get(order=order)
    turnaround = hold.period.upper - order.ends_at
    end = start + timedelta(days=3)
    Order.objects.filter(pk=order.pk).update(starts_at=start, ends_at=end)
    Hold.objects.filter(pk=hold.pk).update(period=DateTimeTZRange(start, end + turnaround, "[)"))
    order.refresh_from_db()
    return order


def authorized_keys(root: Path, job: ProvisioningJob) -> Path:
    return root / job.lot.host.name / "home" / job.accounts[0] / ".ssh" / "authorized_keys"


@pytest.fixture
def host(tmp_path: Path, settings: Any) -> SimulatedHost:
    settings.PROVISIONING_LOCAL_ROOT = tmp_path / "hosts"  # where the task's backend looks too
    return SimulatedHost(root=tmp_path / "hosts", clock=Clock(timezone.now()))


@pytest.fixture
def delivered(make_request: RequestFactory, host: SimulatedHost) -> ProvisioningJob:
    build_inventory()
    order = open_now(make_request)
    services.approve_order(order, actor=OPERATOR)
    job = run_at_start(ProvisioningJob.objects.get(order=order).pk, host, at=timezone.now())
    assert job.status == ProvisioningJob.Status.READY, job.error
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_ACTIVE
    return job


@pytest.mark.django_db
def test_after_access_opens_the_new_key_replaces_the_old_on_the_host(
    delivered: ProvisioningJob, host: SimulatedHost
) -> None:
    job = delivered
    order = job.order
    old = order.ssh_keys.get().public_key
    path = authorized_keys(host.root, job)
    assert path.read_text().strip() == old
    new = openssh_public_key("new-laptop@lab")
    assert change_ssh_keys(order, new, actor=RESEARCHER)

    assert keys.install_keys(job.pk, backend=host)
    assert path.read_text().strip() == new  # the old one is gone
    assert ("install_keys", job.accounts[0]) in host.calls
    fingerprint = order.ssh_keys.get().fingerprint
    event = order.events.get(reason__contains=keys.INSTALLED)
    assert fingerprint in event.reason
    assert str(job.lot) in event.reason

    # Once per change: a duplicate message finds them there and does nothing.
    calls = len(host.calls)
    assert not keys.install_keys(job.pk, backend=host)
    assert len(host.calls) == calls
    assert order.events.filter(reason__contains=keys.INSTALLED).count() == 1


@pytest.mark.django_db
def test_keys_are_never_installed_outside_the_window_or_on_a_lot_not_delivered(
    delivered: ProvisioningJob, host: SimulatedHost
) -> None:
    job = delivered
    order = job.order
    path = authorized_keys(host.root, job)
    old = path.read_text()
    assert change_ssh_keys(order, openssh_public_key("late@lab"), actor=RESEARCHER)
    calls = len(host.calls)
    assert not keys.install_keys(job.pk, backend=host, now=order.ends_at)
    assert not keys.install_keys(job.pk, backend=host, now=order.starts_at - timedelta(seconds=1))
    ProvisioningJob.objects.filter(pk=job.pk).update(status=ProvisioningJob.Status.REVOKED)
    assert not keys.install_keys(job.pk, backend=host)
    ProvisioningJob.objects.filter(pk=job.pk).update(
        status=ProvisioningJob.Status.READY, access_held=True
    )
    assert not keys.install_keys(job.pk, backend=host)
    assert len(host.calls) == calls
    assert path.read_text() == old
    assert not order.events.filter(reason__contains=keys.INSTALLED).exists()


@pytest.mark.django_db
def test_before_access_opens_a_change_puts_nothing_on_the_host(
    make_request: RequestFactory, host: SimulatedHost, tmp_path: Path
) -> None:
    from tests.provisioning.test_provisioning import paid_order

    order = paid_order(make_request)
    services.approve_order(order, actor=OPERATOR)
    job = ProvisioningJob.objects.get(order=order)
    # Prepared ahead of the window: the account is there, its keys file empty.
    host.clock.now = order.starts_at - timedelta(hours=1)
    prepared = run_at_start(job.pk, host, at=order.starts_at - timedelta(hours=1))
    assert prepared.status == ProvisioningJob.Status.PREPARED
    assert change_ssh_keys(order, openssh_public_key("early@lab"), actor=RESEARCHER)
    assert not keys.install_keys(job.pk, backend=host, now=order.starts_at - timedelta(minutes=30))
    root = host.root / job.lot.host.name / "home"
    assert all(path.read_text() == "" for path in root.glob("*/.ssh/authorized_keys"))


@pytest.mark.django_db
def test_a_host_fault_is_retried_by_the_task_and_loses_nothing(
    delivered: ProvisioningJob,
    host: SimulatedHost,
    monkeypatch: pytest.MonkeyPatch,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    job = delivered
    order = job.order
    path = authorized_keys(host.root, job)
    old = path.read_text()
    tries: list[str] = []
    install = LocalBackend.install_keys

    def flaky(self: Any, host_: Host, account: str, text: str) -> None:
        tries.append(text)
        if len(tries) <= 2:  # the host is away for the first two tries
            raise HostUnreachable(f"{host_.name}: connection refused")
        install(self, host_, account, text)

    monkeypatch.setattr("provisioning.backends.LocalBackend.install_keys", flaky)
    countdowns: list[object] = []
    retry = install_ssh_keys.retry

    def recorded(*args: Any, **kwargs: Any) -> Any:
        countdowns.append(kwargs.get("countdown"))
        return retry(*args, **kwargs)

    monkeypatch.setattr(install_ssh_keys, "retry", recorded)
    new = openssh_public_key("retried@lab")
    with django_capture_on_commit_callbacks(execute=True):
        assert change_ssh_keys(order, new, actor=RESEARCHER)
    assert countdowns == [5, 10]  # backoff, doubling
    assert len(tries) == 3
    assert old != path.read_text()
    assert path.read_text().strip() == new
    assert order.events.filter(reason__contains=keys.INSTALLED).count() == 1


@pytest.mark.django_db
def test_retries_spent_tell_the_operator_and_the_history(
    delivered: ProvisioningJob,
    monkeypatch: pytest.MonkeyPatch,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
    mailoutbox: list[Any],
    settings: Any,
) -> None:
    settings.ADMINS = [("Operator", "desk@example.org")]

    def away(self: Any, host_: Host, account: str, text: str) -> None:
        raise HostUnreachable(f"{host_.name}: connection refused")

    monkeypatch.setattr("provisioning.backends.LocalBackend.install_keys", away)
    with django_capture_on_commit_callbacks(execute=True):
        assert change_ssh_keys(delivered.order, openssh_public_key("x@lab"), actor=RESEARCHER)
    note = delivered.order.events.get(reason__contains="could not be installed")
    assert "connection refused" in note.reason
    assert any("SSH keys not installed" in message.subject for message in mailoutbox)


@pytest.mark.django_db
def test_keys_changed_while_access_opens_follow_it_onto_the_host(
    make_request: RequestFactory,
    host: SimulatedHost,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The opening read the keys before a change committed: it installs the current keys
    after delivery (the change's own task found no access open yet)."""
    build_inventory()
    order = open_now(make_request)
    services.approve_order(order, actor=OPERATOR)
    job = ProvisioningJob.objects.get(order=order)
    new = openssh_public_key("meanwhile@lab")
    opening = SimulatedHost.install_keys

    def change_meanwhile(self: Any, host_: Host, account: str, text: str) -> None:
        if text.strip():  # the opening's keys: the researcher's change lands right now
            order.ssh_keys.update(public_key=new)
        opening(self, host_, account, text)

    SimulatedHost.install_keys = change_meanwhile  # type: ignore[method-assign,assignment]
    try:
        with django_capture_on_commit_callbacks(execute=True):
            job = run_at_start(job.pk, host, at=timezone.now())
    finally:
        SimulatedHost.install_keys = opening  # type: ignore[method-assign]
    assert job.status == ProvisioningJob.Status.READY
    assert authorized_keys(host.root, job).read_text().strip() == new


# --------------------------------------------------------------------------- over SSH


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    yield from start_sshd(tmp_path_factory.mktemp("sshd"))


@pytest.fixture
def ssh_worker(
    transactional_db: None, sshd: Sshd, tmp_path: Path
) -> Iterator[tuple[WorkerProcess, Path]]:
    """A real worker provisioning over SSH; the host's root folder is returned with it."""
    root = tmp_path / "host-root"
    yield from (
        (worker, root)
        for worker in start_worker(
            environ={
                "PROVISIONING_BACKEND": "ssh",
                "PROVISIONING_SSH_KEY": sshd.client_key,
                "PROVISIONING_REMOTE_DIR": str(tmp_path / "var-lib-gpulots"),
                "PROVISIONING_REMOTE_ROOT": str(root),
                "PROVISIONING_REMOTE_ACCOUNTS": "0",
                "PROVISIONING_REMOTE_PYTHON": sys.executable,
                "PROVISIONING_BENCHMARK_ARGS": "--quick",
                "PROVISIONING_CPU_STAND_IN_HOSTS": "test-h200,test-b200,test-mi300x",
            }
        )
    )


def retried(worker: WorkerProcess) -> bool:
    """The worker's task met the host fault and scheduled its retry."""
    return any(
        "install_ssh_keys" in line and "Retry in" in line for line in worker.log().splitlines()
    )


@pytest.mark.worker
def test_a_real_worker_installs_a_changed_key_over_ssh_through_a_host_fault(
    ssh_worker: tuple[WorkerProcess, Path], sshd: Sshd, make_request: RequestFactory
) -> None:
    worker, root = ssh_worker
    build_inventory()
    order = open_now(make_request)
    lot_host = order.holds.get().lot.host
    Host.objects.filter(pk=lot_host.pk).update(
        address="127.0.0.1", ssh_port=sshd.port, ssh_user=sshd.user, ssh_host_key=sshd.host_key
    )
    services.approve_order(order, actor=OPERATOR)  # the window is open: delivered at once
    assert wait_for(
        lambda: Order.objects.get(pk=order.pk).status == Order.STATUS_ACTIVE, timeout=240
    ), worker.log()
    job = ProvisioningJob.objects.get(order=order)
    path = root / "home" / job.accounts[0] / ".ssh" / "authorized_keys"
    old = order.ssh_keys.get().public_key
    assert path.read_text().strip() == old

    with socket.socket() as bound:  # the host goes away: a port bound but never listening
        bound.bind(("127.0.0.1", 0))
        Host.objects.filter(pk=lot_host.pk).update(ssh_port=bound.getsockname()[1])
        new = openssh_public_key("over-ssh@lab")
        assert change_ssh_keys(order, new, actor=RESEARCHER)
        assert wait_for(lambda: retried(worker), timeout=60), worker.log()
        assert path.read_text().strip() == old  # not there yet, and nothing recorded
        assert not order.events.filter(reason__contains=keys.INSTALLED).exists()
        Host.objects.filter(pk=lot_host.pk).update(ssh_port=sshd.port)  # back

    assert wait_for(lambda: path.read_text().strip() == new, timeout=90), worker.log()
    assert old not in path.read_text()
    assert wait_for(
        lambda: order.events.filter(reason__contains=keys.INSTALLED).count() == 1, timeout=10
    )
    assert (
        job.order.ssh_keys.get().fingerprint
        in order.events.get(reason__contains=keys.INSTALLED).reason
    )
