"""Approval → provisioning with the local backend → active → revoked at the window's end."""

from __future__ import annotations

import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core import mail
from django.db import transaction
from django.utils import timezone

from provisioning import services
from provisioning.backends import HOST_SCRIPTS, LocalBackend, StepFailed
from provisioning.models import ProvisioningJob
from reservations.errors import InvalidTransition
from reservations.models import Host, Order
from reservations.services import Actor, mark_paid, place_order, system
from tests.conftest import PRIVATE_KEY, RequestFactory, build_inventory
from tests.provisioning.clock import run_at_start
from tests.workers import WorkerProcess, wait_for

OPERATOR = Actor("operator@example.org")


def paid_order(make_request: RequestFactory, *, inventory: bool = True, **overrides: Any) -> Order:
    if inventory:
        build_inventory()
    order = place_order(make_request(lot_count=1, window_days=3, **overrides))
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="paid")
    return order


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(tmp_path / "hosts")


@pytest.mark.django_db
def test_only_a_paid_order_is_approved(make_request: RequestFactory) -> None:
    order = paid_order(make_request)
    unpaid = place_order(make_request(starts_at=order.starts_at + timedelta(days=20)))
    with pytest.raises(InvalidTransition):
        services.approve_order(unpaid, actor=OPERATOR)
    services.approve_order(order, actor=OPERATOR)
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_APPROVED
    assert ProvisioningJob.objects.filter(order=order).count() == 1
    assert order.events.filter(to_status="approved", actor_label="operator@example.org").exists()


@pytest.mark.django_db
def test_the_local_backend_delivers_access_and_the_report(
    make_request: RequestFactory,
    backend: LocalBackend,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    order = paid_order(make_request, hypothesis="shorter_step")
    with django_capture_on_commit_callbacks():
        services.approve_order(order, actor=OPERATOR)
    job = ProvisioningJob.objects.get(order=order)
    with django_capture_on_commit_callbacks(execute=True):
        job = run_at_start(job.pk, backend)
    assert job.accounts, (job.status, job.error, job.report)
    (account,) = job.accounts
    home = backend.root / job.lot.host.name / "home" / account
    assert (
        home / ".ssh" / "authorized_keys"
    ).read_text().strip() == order.ssh_keys.get().public_key
    assert (home / "ENVIRONMENT").read_text().strip() == order.environment.slug
    assert "CUDA_VISIBLE_DEVICES=0,1" in (home / ".gpulots-env").read_text()
    assert job.status == ProvisioningJob.Status.READY
    report: Any = job.report
    assert report["verdict"]["hypothesis"] == "shorter_step"
    assert report["essentials"]["all_reduce"]["correct"] is True
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_ACTIVE
    assert any("are ready" in m.subject for m in mail.outbox)


@pytest.mark.django_db
def test_two_independent_experiments_get_one_card_each(
    make_request: RequestFactory, backend: LocalBackend
) -> None:
    order = paid_order(make_request, usage_mode="independent")
    services.approve_order(order, actor=OPERATOR)
    job = ProvisioningJob.objects.get(order=order)
    accounts = services.accounts_for(job)
    assert [cards for _account, cards in accounts] == [str(job.lot.gpu_a), str(job.lot.gpu_b)]
    for account, cards in accounts:
        backend.script(job.lot.host, "prepare_access", account)
        backend.script(job.lot.host, "assign_cards", account, cards)
        env = (backend.root / job.lot.host.name / "home" / account / ".gpulots-env").read_text()
        assert f"CUDA_VISIBLE_DEVICES={cards}\n" in env
        assert f"HIP_VISIBLE_DEVICES={cards}\n" in env


class CrashingOnce(LocalBackend):
    """Fails the first time it is asked to prepare the environment, like a lost host."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.calls: list[str] = []
        self.crashed = False

    def script(self, host: Host, name: str, *args: str) -> None:
        self.calls.append(name)
        if name == "prepare_environment" and not self.crashed:
            self.crashed = True
            raise StepFailed("host unreachable")
        super().script(host, name, *args)


@pytest.mark.django_db
def test_a_retry_continues_where_it_stopped(make_request: RequestFactory, tmp_path: Path) -> None:
    order = paid_order(make_request)
    services.approve_order(order, actor=OPERATOR)
    job = ProvisioningJob.objects.get(order=order)
    backend = CrashingOnce(tmp_path / "hosts")
    with pytest.raises(StepFailed):
        run_at_start(job.pk, backend)
    assert ProvisioningJob.objects.get(pk=job.pk).steps_done == 2  # access and keys done
    run_at_start(job.pk, backend)
    assert backend.calls.count("prepare_access") == 1  # not redone
    host = backend.root / job.lot.host.name
    assert len(list((host / "accounts").iterdir())) == 1  # one account, one set of keys
    job.refresh_from_db()
    assert (job.status, job.attempts) == (ProvisioningJob.Status.READY, 2)


@pytest.mark.django_db
def test_access_is_revoked_when_the_window_ends(
    make_request: RequestFactory,
    backend: LocalBackend,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    order = paid_order(make_request)
    services.approve_order(order, actor=OPERATOR)
    job = run_at_start(ProvisioningJob.objects.get(order=order).pk, backend)
    home = backend.root / job.lot.host.name / "home" / job.accounts[0]
    assert home.exists()
    assert services.revoke_due(backend=backend) == 0  # the window has not ended
    later = Order.objects.get(pk=order.pk).ends_at + timedelta(minutes=1)
    with django_capture_on_commit_callbacks(execute=True):
        assert services.revoke_due(now=later, backend=backend) == 1
    assert not home.exists()
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_COMPLETED
    assert ProvisioningJob.objects.get(pk=job.pk).status == ProvisioningJob.Status.REVOKED
    assert services.revoke_due(now=later, backend=backend) == 0
    assert any("window has ended" in m.subject for m in mail.outbox)


def test_the_host_scripts_refuse_a_private_key_and_bad_names(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text(PRIVATE_KEY)
    subprocess.run(
        ["bash", str(HOST_SCRIPTS / "prepare_access.sh"), str(tmp_path), "gl-x"], check=True
    )
    refused = subprocess.run(
        ["bash", str(HOST_SCRIPTS / "install_keys.sh"), str(tmp_path), "gl-x", str(keys)],
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 3
    assert not (tmp_path / "home" / "gl-x" / ".ssh" / "authorized_keys").exists()
    bad = subprocess.run(
        ["bash", str(HOST_SCRIPTS / "prepare_access.sh"), str(tmp_path), "root; rm -rf /"],
        capture_output=True,
    )
    assert bad.returncode == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_real_worker_provisions_an_order_approved_after_its_start(
    celery_worker: WorkerProcess, make_request: RequestFactory
) -> None:
    order = paid_order(make_request, starts_at=timezone.now() + timedelta(seconds=1))
    time.sleep(1)  # the window has started: approval opens access at once
    services.approve_order(order, actor=OPERATOR)  # enqueues provision_lot after commit
    assert wait_for(
        lambda: Order.objects.get(pk=order.pk).status == Order.STATUS_ACTIVE, timeout=120
    ), celery_worker.log()
    job = ProvisioningJob.objects.get(order=order)
    report: Any = job.report
    assert report["version"] == 2
    assert report["split"]["two_cards"]["mode"] == "data_parallel"
    later = Order.objects.get(pk=order.pk).ends_at + timedelta(minutes=1)
    assert services.revoke_due(now=later) == 1
    root = Path(settings.PROVISIONING_LOCAL_ROOT) / job.lot.host.name
    assert not (root / "home" / job.accounts[0]).exists()


@pytest.mark.django_db
def test_the_order_page_shows_how_to_connect_and_the_report(
    client: Any, make_request: RequestFactory, backend: LocalBackend
) -> None:
    order = paid_order(make_request)
    services.approve_order(order, actor=OPERATOR)
    job = run_at_start(ProvisioningJob.objects.get(order=order).pk, backend)
    html = client.get(f"/en/orders/{order.reference}/{order.secret}/").content.decode()
    assert f"{job.accounts[0]}@127.0.0.1" in html
    assert "Validation:" in html
    base = f"/en/orders/{order.reference}/{order.secret}/report/{job.pk}/"
    page = client.get(base)
    assert page.status_code == 200
    text = page.content.decode()
    assert "Median step time (ms), one card against two cards" in text
    assert text.count('class="bar-row"') >= 6  # 2 step times, 2 cards' memory, the sizes
    assert "CPU stand-in" in text  # the local sandbox's figures are not the cards'
    assert client.get(f"{base}json/").json()["version"] == 2
    wrong = f"/en/orders/{order.reference}/wrong-secret/report/{job.pk}/"
    assert client.get(wrong).status_code == 404


@pytest.mark.django_db
def test_the_payment_panel_of_an_active_order_says_settled_not_awaiting_approval(
    client: Any, make_request: RequestFactory, backend: LocalBackend, payments: Any
) -> None:
    from payments import invoicing, scanning

    build_inventory()
    order = place_order(make_request(lot_count=1, window_days=3))
    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(2)
    scanning.scan_chain(payments.chain)
    services.approve_order(order, actor=OPERATOR)
    run_at_start(ProvisioningJob.objects.get(order=order).pk, backend)
    html = client.get(f"/en/orders/{order.reference}/{order.secret}/").content.decode()
    assert "Payment settled." in html
    assert "An operator approves your order next" not in html


@pytest.mark.django_db
def test_keys_are_checked_again_before_they_reach_a_host(
    make_request: RequestFactory, backend: LocalBackend
) -> None:
    order = paid_order(make_request)
    order.ssh_keys.update(public_key="ssh-ed25519 not-a-key")
    services.approve_order(order, actor=OPERATOR)
    job = ProvisioningJob.objects.get(order=order)
    with pytest.raises(StepFailed, match="unusable"):
        run_at_start(job.pk, backend)
    assert ProvisioningJob.objects.get(pk=job.pk).steps_done == 1
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_APPROVED  # never active
