"""The SSH backend against a real OpenSSH server on loopback: the whole job over SSH (and an
extension that keeps the account and its files past the first end), the
pinned host key (a changed or missing key is refused and shown to the operator), and an
unreachable host retried with backoff, then failed with its reason."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from provisioning import access, services
from provisioning.backends import HostKeyRefused, HostUnreachable, StepFailed
from provisioning.models import ProvisioningJob
from provisioning.ssh import SshBackend, check_ssh_key, fingerprint
from provisioning.tasks import MAX_ATTEMPTS, provision_lot
from reservations.extensions import place_extension
from reservations.models import Host, Order
from reservations.services import mark_paid, system
from tests.conftest import RequestFactory
from tests.provisioning.clock import run_at_start
from tests.provisioning.test_provisioning import OPERATOR, paid_order
from tests.sshd import Sshd, keygen, start_sshd


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    yield from start_sshd(tmp_path_factory.mktemp("sshd"))


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    """The test host's filesystem root, as the host-side scripts see it."""
    return tmp_path / "host-root"


@pytest.fixture
def ssh_backend(sshd: Sshd, remote: Path, tmp_path: Path, settings: Any) -> SshBackend:
    # The loopback host has no GPU: named a CPU stand-in, as an operator names a test machine
    # (else its benchmark runs with --require-gpu and the lot is held: the production rule).
    settings.PROVISIONING_CPU_STAND_IN_HOSTS = ["test-h200", "test-b200", "test-mi300x"]
    return SshBackend(
        client_key=sshd.client_key,
        remote_dir=str(tmp_path / "var-lib-gpulots"),
        remote_root=str(remote),
        real_accounts=False,  # a sandboxed test host: no system accounts
        python=sys.executable,  # this machine's PyTorch stands for the environment's
        benchmark_args=["--quick"],
    )


def approved_job_on(sshd: Sshd, make_request: RequestFactory, host_key: str) -> ProvisioningJob:
    order = paid_order(make_request, hypothesis="bigger_batch")
    services.approve_order(order, actor=OPERATOR)
    job = ProvisioningJob.objects.select_related("lot__host").get(order=order)
    Host.objects.filter(pk=job.lot.host_id).update(
        address="127.0.0.1", ssh_port=sshd.port, ssh_user=sshd.user, ssh_host_key=host_key
    )
    job.lot.host.refresh_from_db()
    return job


def key_material(line: str) -> str:
    return " ".join(line.split()[:2])


@pytest.mark.django_db
def test_the_ssh_backend_delivers_access_the_report_keeps_it_through_an_extension_and_revokes(
    sshd: Sshd,
    make_request: RequestFactory,
    ssh_backend: SshBackend,
    remote: Path,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    job = approved_job_on(sshd, make_request, sshd.host_key)
    with django_capture_on_commit_callbacks(execute=True):
        job = run_at_start(job.pk, ssh_backend)
    assert job.status == ProvisioningJob.Status.READY, job.error
    (account,) = job.accounts
    home = remote / "home" / account
    keys = (home / ".ssh" / "authorized_keys").read_text().strip()
    assert keys == job.order.ssh_keys.get().public_key
    assert "CUDA_VISIBLE_DEVICES=0,1" in (home / ".gpulots-env").read_text()
    assert not list((Path(ssh_backend.remote_dir) / "incoming").iterdir())  # keys not left
    # The split-test command, uploaded into the account with the order's facts.
    assert b"gpulots split-test" in (home / ".gpulots" / "gpulots.py").read_bytes()[:200]
    assert json.loads((home / ".gpulots" / "order.json").read_text())["job"] == job.pk
    assert (home / ".gpulots" / "bin" / "gpulots").stat().st_mode & 0o111
    report: Any = job.report
    assert report["verdict"]["hypothesis"] == "bigger_batch"
    assert report["essentials"]["all_reduce"]["correct"] is True
    assert Order.objects.get(pk=job.order_id).status == Order.STATUS_ACTIVE

    # Halfway through, results on the disk, the window is extended by three days: past the
    # first end nothing is revoked over SSH, and the account and its files are still there.
    order = Order.objects.get(pk=job.order_id)
    first_end = order.ends_at
    (home / "checkpoints").mkdir()
    (home / "checkpoints" / "step-4000.pt").write_bytes(b"weights")
    halfway = order.starts_at + timedelta(days=1)
    extension = place_extension(order, 3, actor=system("researcher"), now=halfway)
    with django_capture_on_commit_callbacks(execute=True):
        with transaction.atomic():
            assert mark_paid(extension, actor=system("test"), reason="paid")
        services.approve_order(Order.objects.get(pk=extension.pk), actor=OPERATOR)
    new_end = first_end + timedelta(days=3)
    assert Order.objects.get(pk=order.pk).ends_at == new_end
    with django_capture_on_commit_callbacks(execute=True):
        assert services.revoke_due(now=first_end + timedelta(minutes=1), backend=ssh_backend) == 0
    assert (home / "checkpoints" / "step-4000.pt").read_bytes() == b"weights"
    assert (home / ".ssh" / "authorized_keys").read_text().strip() == keys
    assert ProvisioningJob.objects.filter(order__in=[order, extension]).count() == 1

    # At the new end, access goes as it would have at the first.
    with django_capture_on_commit_callbacks(execute=True):
        assert services.revoke_due(now=new_end + timedelta(minutes=1), backend=ssh_backend) == 1
    assert not home.exists()
    assert Order.objects.get(pk=job.order_id).status == Order.STATUS_COMPLETED


@pytest.mark.django_db
def test_a_changed_host_key_is_refused_flagged_and_never_retried(
    sshd: Sshd,
    make_request: RequestFactory,
    ssh_backend: SshBackend,
    remote: Path,
    tmp_path: Path,
    settings: Any,
) -> None:
    old_key = keygen(tmp_path / "old_host_key", "before-reinstall")
    job = approved_job_on(sshd, make_request, old_key)
    with pytest.raises(HostKeyRefused) as refused:
        run_at_start(job.pk, ssh_backend)
    assert fingerprint(old_key) in str(refused.value)
    assert fingerprint(sshd.host_key) in str(refused.value)
    assert not remote.exists()  # nothing ran on the host
    host = Host.objects.get(pk=job.lot.host_id)
    assert key_material(host.ssh_host_key_presented) == key_material(sshd.host_key)
    assert host.ssh_host_key_refused_at is not None
    assert host.ssh_host_key == old_key  # the pin is the operator's decision, never ours

    # Through the task: failed at once with the reason, no retry, the order not active.
    settings.PROVISIONING_BACKEND = "ssh"
    settings.PROVISIONING_SSH_KEY = sshd.client_key
    settings.PROVISIONING_REMOTE_ROOT = str(remote)
    settings.PROVISIONING_REMOTE_ACCOUNTS = False
    assert provision_lot.apply(args=(job.pk,)).get() == ProvisioningJob.Status.FAILED
    job.refresh_from_db()
    assert (job.status, job.attempts) == (ProvisioningJob.Status.FAILED, 2)
    assert "not the pinned" in job.error
    assert Order.objects.get(pk=job.order_id).status == Order.STATUS_APPROVED
    assert job.order.events.filter(reason__startswith="provisioning failed").exists()

    # The operator checks the fingerprint on the host, pins it and retries: it goes through.
    assert not services.pin_presented_host_key(host, fingerprint(old_key))  # not what it shows
    assert services.pin_presented_host_key(host, fingerprint(sshd.host_key))
    host.refresh_from_db()
    assert key_material(host.ssh_host_key) == key_material(sshd.host_key)
    assert services.retry_job(job, actor=OPERATOR)
    assert run_at_start(job.pk, ssh_backend).status == ProvisioningJob.Status.READY


@pytest.mark.django_db
def test_a_host_without_a_pinned_key_is_refused(
    sshd: Sshd, make_request: RequestFactory, ssh_backend: SshBackend, remote: Path
) -> None:
    job = approved_job_on(sshd, make_request, "")
    with pytest.raises(HostKeyRefused, match="no host key is pinned"):
        run_at_start(job.pk, ssh_backend)
    assert not remote.exists()
    presented = Host.objects.get(pk=job.lot.host_id).ssh_host_key_presented
    assert key_material(presented) == key_material(sshd.host_key)


@pytest.mark.django_db
def test_a_refused_login_is_an_unreachable_host(
    sshd: Sshd, make_request: RequestFactory, remote: Path, tmp_path: Path
) -> None:
    keygen(tmp_path / "stranger", "not-authorized")
    stranger = SshBackend(client_key=(tmp_path / "stranger").read_text(), remote_root=str(remote))
    job = approved_job_on(sshd, make_request, sshd.host_key)
    with pytest.raises(HostUnreachable, match="PermissionDenied"):
        run_at_start(job.pk, stranger)
    assert not remote.exists()


@pytest.mark.django_db
def test_an_unreachable_host_is_retried_with_backoff_then_failed(
    sshd: Sshd, make_request: RequestFactory, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = approved_job_on(sshd, make_request, sshd.host_key)
    assert access.open_grant(job, now=job.order.starts_at)  # the lot's turn has come
    with socket.socket() as bound:  # a port of ours, bound but never listening: refused
        bound.bind(("127.0.0.1", 0))
        closed = bound.getsockname()[1]
        Host.objects.filter(pk=job.lot.host_id).update(ssh_port=closed)
        settings.PROVISIONING_BACKEND = "ssh"
        settings.PROVISIONING_SSH_KEY = sshd.client_key
        # An eager task retries at once (the countdown is for the broker), each try a real
        # connection attempt, until the retries are spent; the countdowns are recorded.
        countdowns: list[object] = []
        retry = provision_lot.retry

        def recorded(*args: Any, **kwargs: Any) -> Any:
            countdowns.append(kwargs.get("countdown"))
            return retry(*args, **kwargs)

        monkeypatch.setattr(provision_lot, "retry", recorded)
        assert provision_lot.apply(args=(job.pk,)).get() == ProvisioningJob.Status.FAILED
        assert countdowns == [5, 10, 20, 40, 80]  # backoff, doubling
        job.refresh_from_db()
        assert job.status == ProvisioningJob.Status.FAILED
        assert job.attempts == MAX_ATTEMPTS + 1
        assert f"127.0.0.1:{closed}" in job.error
        assert Order.objects.get(pk=job.order_id).status == Order.STATUS_APPROVED


def test_the_check_refuses_the_ssh_backend_without_a_private_key(settings: Any, sshd: Sshd) -> None:
    settings.PROVISIONING_BACKEND = "ssh"
    for unusable in ("", sshd.host_key):  # none, or a public key where the private belongs
        settings.PROVISIONING_SSH_KEY = unusable
        (error,) = check_ssh_key(None)
        assert error.id == "provisioning.E001"
    settings.PROVISIONING_SSH_KEY = sshd.client_key
    assert check_ssh_key(None) == []


@pytest.mark.django_db
def test_a_benchmark_still_running_is_stopped_over_ssh_with_its_process_group(
    sshd: Sshd, make_request: RequestFactory, ssh_backend: SshBackend
) -> None:
    job = approved_job_on(sshd, make_request, sshd.host_key)
    report = f"{ssh_backend.remote_dir}/reports/job-{job.pk}.json"
    # As the backend starts it on a host: under `timeout`, which leads its process group.
    running = subprocess.Popen(
        ["timeout", "120", sys.executable, "-c", "import time; time.sleep(120)", "--out", report]
    )
    time.sleep(0.5)
    ssh_backend.stop_validation(job.lot.host, f"job-{job.pk}")
    assert running.wait(timeout=10) == -signal.SIGKILL
    ssh_backend.stop_validation(job.lot.host, f"job-{job.pk}")  # none running: fine


@pytest.mark.django_db
def test_a_health_reading_runs_the_probe_over_ssh_on_the_hosts_own_tools_and_log(
    sshd: Sshd, make_request: RequestFactory, ssh_backend: SshBackend, remote: Path
) -> None:
    job = approved_job_on(sshd, make_request, sshd.host_key)
    host = job.lot.host
    stand_in = ssh_backend.read_health(host, "0,1", 0, time.time())
    assert stand_in["tool"] == "stand-in"  # this loopback host has no GPU tool
    assert stand_in["cards"] == [{"index": 0}, {"index": 1}]
    tools = remote / "usr" / "bin"
    tools.mkdir(parents=True)
    fake = Path(__file__).resolve().parent / "fakes" / "nvidia-smi"
    (tools / "nvidia-smi").write_bytes(fake.read_bytes())
    (tools / "nvidia-smi").chmod(0o755)
    (tools / "nvidia-smi.json").write_text('{"values": {"1": {"temperature.gpu": 91}}}')
    log = remote / "var" / "log" / "kernel.log"
    log.parent.mkdir(parents=True)
    log.write_text(
        "100.5 h kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.\n"
        "200.5 h kernel: NVRM: Xid (PCI:0000:28:00): 48, pid=1, DBE\n"
    )
    reading = ssh_backend.read_health(host, "0,1", 150, 300)
    assert reading["tool"] == "nvidia-smi"
    assert [card["temperature.gpu"] for card in reading["cards"]] == [34.0, 91.0]
    assert reading["cards"][0]["remapped_rows.failure"] == "No"
    # Only the lines stamped between the two readings: XID 79 at 100.5 was the previous one's.
    assert [(x["code"], x["bus"]) for x in reading["xid"]] == [(48, "0000:28:00")]
    with pytest.raises(StepFailed, match="not a list of card indices"):
        ssh_backend.read_health(host, "0;reboot", 0, 1)
