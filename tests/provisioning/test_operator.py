"""The operator's side of provisioning: approve from the order's page, the report in the desk,
holding and releasing access, a crashed benchmark, and the mail before the window ends."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from django.db import transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import User
from provisioning import access, services
from provisioning.backends import HostUnreachable, LocalBackend
from provisioning.models import ProvisioningJob
from reservations.models import Host, Order
from reservations.services import mark_paid, place_order, system
from tests.conftest import RequestFactory, build_inventory
from tests.provisioning.clock import run_at_start
from tests.provisioning.test_provisioning import OPERATOR, paid_order

pytestmark = pytest.mark.django_db


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(tmp_path / "hosts")


@pytest.fixture
def desk(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("operator@example.org", "a-long-password-1"))
    return client


def approved_job(make_request: RequestFactory, **overrides: Any) -> ProvisioningJob:
    order = paid_order(make_request, **overrides)
    services.approve_order(order, actor=OPERATOR)
    return ProvisioningJob.objects.select_related("order", "lot__host").get(order=order)


def authorized_keys(backend: LocalBackend, job: ProvisioningJob, account: str) -> str:
    return (
        backend.root / job.lot.host.name / "home" / account / ".ssh" / "authorized_keys"
    ).read_text()


def test_a_paid_order_is_approved_with_the_button_on_its_page(
    desk: Client, make_request: RequestFactory, django_capture_on_commit_callbacks: Any
) -> None:
    order = paid_order(make_request)
    page = desk.get(reverse("admin:reservations_order_change", args=[order.pk])).content.decode()
    assert 'data-testid="approve"' in page
    url = reverse("admin:reservations_order_approve", args=[order.pk])
    assert desk.get(url).status_code == 405  # a state change is a POST, never a link
    with django_capture_on_commit_callbacks() as queued:
        response = desk.post(url)
    assert response.status_code == 302
    assert len(queued) == 1  # provisioning enqueued after commit
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_APPROVED
    assert order.events.filter(to_status="approved", actor_label="operator@example.org").exists()
    page = desk.get(reverse("admin:reservations_order_change", args=[order.pk])).content.decode()
    assert 'data-testid="approve"' not in page  # approved once; no button any more
    again = desk.post(url, follow=True)
    (refused,) = [str(m) for m in again.context["messages"]]
    assert refused.startswith(f"{order.reference}: ")
    assert "approved" in refused


def test_the_desk_shows_each_lots_report(
    desk: Client, make_request: RequestFactory, backend: LocalBackend
) -> None:
    job = approved_job(make_request, hypothesis="shorter_step")
    job = run_at_start(job.pk, backend)
    verdict = job.report["verdict"]["answer"]  # type: ignore[index]
    order_page = desk.get(reverse("admin:reservations_order_change", args=[job.order_id]))
    job_page = desk.get(reverse("admin:provisioning_provisioningjob_change", args=[job.pk]))
    for page in (order_page.content.decode(), job_page.content.decode()):
        assert verdict.replace("'", "&#x27;") in page
        assert "step time, one card / two (ms)" in page
        assert (
            reverse("provisioning:report", args=[job.order.reference, job.order.secret, job.pk])
            in page
        )


def test_a_held_lot_is_prepared_but_not_delivered_until_released(
    make_request: RequestFactory,
    backend: LocalBackend,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    job = approved_job(make_request)
    assert services.hold_access(job, actor=OPERATOR)
    assert not services.hold_access(job, actor=OPERATOR)  # already held
    job = run_at_start(job.pk, backend)
    (account, _cards) = services.accounts_for(job)[0]
    assert job.status == ProvisioningJob.Status.HELD
    assert authorized_keys(backend, job, account) == ""  # nobody can log in
    assert job.report is not None  # the benchmark ran
    assert Order.objects.get(pk=job.order_id).status == Order.STATUS_APPROVED

    with django_capture_on_commit_callbacks(execute=False):
        assert services.release_access(job, actor=OPERATOR)
    job = run_at_start(job.pk, backend)
    assert job.status == ProvisioningJob.Status.READY
    assert authorized_keys(backend, job, account).strip() == job.order.ssh_keys.get().public_key
    assert Order.objects.get(pk=job.order_id).status == Order.STATUS_ACTIVE
    reasons = list(job.order.events.values_list("reason", flat=True))
    assert any("access held" in r for r in reasons)
    assert any("released" in r for r in reasons)


class Watching(LocalBackend):
    """Records the account's authorized keys while the benchmark runs; can make the operator
    hold the lot at the instant its keys are being delivered."""

    def __init__(self, root: Path, *, hold_at_delivery: bool = False) -> None:
        super().__init__(root)
        self.keys_during_benchmark: list[str] = []
        self.hold_at_delivery = hold_at_delivery

    def run_validation(
        self, host: Host, report_name: str, arguments: list[str], *, cards: str
    ) -> str:
        self.keys_during_benchmark += [
            p.read_text() for p in (self.host_root(host) / "home").glob("*/.ssh/authorized_keys")
        ]
        return super().run_validation(host, report_name, arguments, cards=cards)

    def install_keys(self, host: Host, account: str, keys: str) -> None:
        super().install_keys(host, account, keys)
        if keys and self.hold_at_delivery:
            job = ProvisioningJob.objects.get(lot__host=host)
            assert services.hold_access(job, actor=OPERATOR)


def test_nobody_logs_in_before_delivery(make_request: RequestFactory, tmp_path: Path) -> None:
    backend = Watching(tmp_path / "hosts")
    job = run_at_start(approved_job(make_request).pk, backend)
    assert backend.keys_during_benchmark == [""]  # the account exists, no key lets anyone in
    assert job.status == ProvisioningJob.Status.READY
    (account,) = job.accounts
    assert authorized_keys(backend, job, account).strip() == job.order.ssh_keys.get().public_key


def test_a_hold_at_the_instant_of_delivery_wins(
    make_request: RequestFactory, tmp_path: Path
) -> None:
    backend = Watching(tmp_path / "hosts", hold_at_delivery=True)
    job = run_at_start(approved_job(make_request).pk, backend)
    assert job.status == ProvisioningJob.Status.HELD
    (account, _cards) = services.accounts_for(job)[0]
    assert authorized_keys(backend, job, account) == ""  # the keys went in, and out again
    assert Order.objects.get(pk=job.order_id).status == Order.STATUS_APPROVED


def test_release_and_retry_never_start_a_job_twice(
    make_request: RequestFactory, django_capture_on_commit_callbacks: Any
) -> None:
    job = approved_job(make_request)
    assert access.open_grant(job, now=job.order.starts_at)  # its turn on the lot came
    ProvisioningJob.objects.filter(pk=job.pk).update(
        status=ProvisioningJob.Status.RUNNING, heartbeat_at=timezone.now()
    )
    with django_capture_on_commit_callbacks() as queued:
        assert not services.retry_job(job, actor=OPERATOR)  # a worker is on it
        assert services.hold_access(job, actor=OPERATOR)
        assert services.release_access(job, actor=OPERATOR)  # just the hold goes
    assert queued == []
    job.refresh_from_db()
    assert (job.status, job.access_held) == (ProvisioningJob.Status.RUNNING, False)
    ProvisioningJob.objects.filter(pk=job.pk).update(
        heartbeat_at=timezone.now() - services.STALLED_AFTER - timedelta(minutes=1)
    )
    with django_capture_on_commit_callbacks() as queued:
        assert services.retry_job(job, actor=OPERATOR)  # stalled: started again, once
    assert len(queued) == 1


class CrashingBenchmark(LocalBackend):
    """The benchmark really runs, and dies (an argument it refuses), as on a broken stack."""

    def run_validation(
        self, host: Host, report_name: str, arguments: list[str], *, cards: str
    ) -> str:
        return super().run_validation(
            host, report_name, [*arguments, "--no-such-option"], cards=cards
        )


@pytest.mark.parametrize("hold_on_crash", [False, True])
def test_a_crashed_benchmark_is_reported_and_holds_access_only_if_configured(
    make_request: RequestFactory, tmp_path: Path, settings: Any, hold_on_crash: bool
) -> None:
    settings.PROVISIONING_HOLD_ON_CRASH = hold_on_crash
    job = approved_job(make_request)
    job = run_at_start(job.pk, CrashingBenchmark(tmp_path / "hosts"))
    assert "no-such-option" in job.report["error"]  # type: ignore[index]
    expected = ProvisioningJob.Status.HELD if hold_on_crash else ProvisioningJob.Status.READY
    assert job.status == expected
    assert (job.error == "access held: the benchmark crashed") is hold_on_crash


def test_the_researcher_is_mailed_once_before_the_window_ends(
    make_request: RequestFactory,
    backend: LocalBackend,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
    eager_tasks: None,
) -> None:
    settings.PROVISIONING_REMINDER_HOURS = 24
    job = run_at_start(approved_job(make_request, language="de").pk, backend)
    order = Order.objects.get(pk=job.order_id)
    assert order.status == Order.STATUS_ACTIVE
    mail.outbox.clear()
    assert services.remind_before_end(now=order.ends_at - timedelta(hours=30)) == 0  # too early
    with django_capture_on_commit_callbacks(execute=True):
        assert services.remind_before_end(now=order.ends_at - timedelta(hours=23)) == 1
        assert services.remind_before_end(now=order.ends_at - timedelta(hours=22)) == 0  # once
    (message,) = mail.outbox
    assert order.reference in message.subject
    assert "endet bald" in message.subject
    assert "Kopieren Sie Ihre Checkpoints" in message.body
    assert order.events.filter(reason__contains="ends soon").count() == 1


def test_no_reminder_when_it_is_switched_off(
    make_request: RequestFactory, backend: LocalBackend, settings: Any
) -> None:
    settings.PROVISIONING_REMINDER_HOURS = 0
    job = run_at_start(approved_job(make_request).pk, backend)
    assert services.remind_before_end(now=job.order.ends_at - timedelta(hours=1)) == 0


def test_the_desk_shows_a_refused_host_key_and_pins_it_on_request(
    desk: Client, make_request: RequestFactory, tmp_path: Path
) -> None:
    from provisioning.ssh import fingerprint
    from tests.sshd import keygen

    job = approved_job(make_request)
    presented = keygen(tmp_path / "reinstalled", "new-host-key")
    Host.objects.filter(pk=job.lot.host_id).update(
        ssh_host_key_presented=presented, ssh_host_key_refused_at=job.created_at
    )
    listing = desk.get(reverse("admin:reservations_host_changelist")).content.decode()
    assert f"presented {fingerprint(presented)}" in listing
    assert "REFUSED" in listing
    changelist = reverse("admin:reservations_host_changelist")
    pin = {"action": "pin_presented_key", "_selected_action": [job.lot.host_id]}
    asking = desk.post(changelist, pin).content.decode()
    assert "ssh-keygen -lf" in asking  # the fingerprint is asked for, checked on the host
    desk.post(changelist, {**pin, "fingerprint": "SHA256:not-the-one-it-presented"})
    assert Host.objects.get(pk=job.lot.host_id).ssh_host_key_presented == presented  # not pinned
    desk.post(changelist, {**pin, "fingerprint": fingerprint(presented)})
    host = Host.objects.get(pk=job.lot.host_id)
    assert (host.ssh_host_key, host.ssh_host_key_presented) == (presented, "")
    assert host.ssh_host_key_refused_at is None
    listing = desk.get(reverse("admin:reservations_host_changelist")).content.decode()
    assert "REFUSED" not in listing


def test_the_windows_end_revokes_delivered_lots_of_an_order_never_active(
    make_request: RequestFactory,
    backend: LocalBackend,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    build_inventory()
    order = place_order(make_request(lot_count=2, window_days=3))
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="paid")
    services.approve_order(order, actor=OPERATOR)
    delivered, broken = ProvisioningJob.objects.filter(order=order)
    delivered = run_at_start(delivered.pk, backend)
    assert access.open_grant(broken, now=order.starts_at)  # its turn came, and it failed
    assert services.fail_job(broken.pk, "host on fire")
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_APPROVED  # never active
    home = backend.root / delivered.lot.host.name / "home" / delivered.accounts[0]
    assert home.exists()

    later = order.ends_at + timedelta(minutes=1)
    with django_capture_on_commit_callbacks(execute=True):
        assert services.revoke_due(now=later, backend=backend) == 1
    assert not home.exists()
    assert set(ProvisioningJob.objects.filter(order=order).values_list("status", flat=True)) == {
        ProvisioningJob.Status.REVOKED
    }
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_COMPLETED
    assert order.events.filter(reason__contains="before every lot was delivered").exists()
    assert not services.retry_job(broken, actor=OPERATOR)  # the window is over


class DownHost(LocalBackend):
    def __init__(self, root: Path, down: str) -> None:
        super().__init__(root)
        self.down = down

    def script(self, host: Host, name: str, *args: str) -> None:
        if host.name == self.down and name == "revoke":
            raise HostUnreachable(f"{host.name}: ConnectionRefusedError")
        super().script(host, name, *args)


def test_a_host_that_is_down_postpones_only_its_own_revocations(
    make_request: RequestFactory, backend: LocalBackend
) -> None:
    h200 = run_at_start(approved_job(make_request).pk, backend)
    b200 = run_at_start(approved_job(make_request, inventory=False, kind="b200").pk, backend)
    later = max(h200.order.ends_at, b200.order.ends_at) + timedelta(minutes=1)
    down = DownHost(backend.root, down=h200.lot.host.name)
    assert services.revoke_due(now=later, backend=down) == 1
    assert Order.objects.get(pk=h200.order_id).status == Order.STATUS_ACTIVE  # next run
    assert Order.objects.get(pk=b200.order_id).status == Order.STATUS_COMPLETED
    assert services.revoke_due(now=later, backend=backend) == 1  # the host is back
    assert Order.objects.get(pk=h200.order_id).status == Order.STATUS_COMPLETED
