"""The operator's side of provisioning: approve from the order's page, the report in the desk,
holding and releasing access, a crashed benchmark, and the mail before the window ends."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from django.test import Client
from django.urls import reverse

from accounts.models import User
from provisioning import services
from provisioning.backends import LocalBackend
from provisioning.models import ProvisioningJob
from reservations.models import Host, Order
from tests.conftest import RequestFactory
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
    again = desk.post(url, follow=True).content.decode()
    assert "approved" in again
    assert "cannot" in again.lower()


def test_the_desk_shows_each_lots_report(
    desk: Client, make_request: RequestFactory, backend: LocalBackend
) -> None:
    job = approved_job(make_request, hypothesis="shorter_step")
    job = services.run_job(job.pk, backend)
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
    job = services.run_job(job.pk, backend)
    (account, _cards) = services.accounts_for(job)[0]
    assert job.status == ProvisioningJob.Status.HELD
    assert authorized_keys(backend, job, account) == ""  # nobody can log in
    assert job.report is not None  # the benchmark ran
    assert Order.objects.get(pk=job.order_id).status == Order.STATUS_APPROVED

    with django_capture_on_commit_callbacks(execute=False):
        assert services.release_access(job, actor=OPERATOR)
    job = services.run_job(job.pk, backend)
    assert job.status == ProvisioningJob.Status.READY
    assert authorized_keys(backend, job, account).strip() == job.order.ssh_keys.get().public_key
    assert Order.objects.get(pk=job.order_id).status == Order.STATUS_ACTIVE
    reasons = list(job.order.events.values_list("reason", flat=True))
    assert any("access held" in r for r in reasons)
    assert any("released" in r for r in reasons)


class CrashingBenchmark(LocalBackend):
    """The benchmark really runs, and dies (an argument it refuses), as on a broken stack."""

    def run_validation(self, host: Host, report_name: str, arguments: list[str]) -> str:
        return super().run_validation(host, report_name, [*arguments, "--no-such-option"])


@pytest.mark.parametrize("hold_on_crash", [False, True])
def test_a_crashed_benchmark_is_reported_and_holds_access_only_if_configured(
    make_request: RequestFactory, tmp_path: Path, settings: Any, hold_on_crash: bool
) -> None:
    settings.PROVISIONING_HOLD_ON_CRASH = hold_on_crash
    job = approved_job(make_request)
    job = services.run_job(job.pk, CrashingBenchmark(tmp_path / "hosts"))
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
    job = services.run_job(approved_job(make_request, language="de").pk, backend)
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
    job = services.run_job(approved_job(make_request).pk, backend)
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
    desk.post(
        reverse("admin:reservations_host_changelist"),
        {"action": "pin_presented_key", "_selected_action": [job.lot.host_id]},
    )
    host = Host.objects.get(pk=job.lot.host_id)
    assert (host.ssh_host_key, host.ssh_host_key_presented) == (presented, "")
    assert host.ssh_host_key_refused_at is None
    listing = desk.get(reverse("admin:reservations_host_changelist")).content.decode()
    assert "REFUSED" not in listing
