"""``gpulots split-test`` in every delivered account: installed by the provisioning job (the
local backend here; over SSH in test_ssh_backend), on the account's PATH, reading the
order's facts, so that in the account the command needs no more than the researcher's job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.utils import translation

from provisioning import services
from provisioning.backends import LocalBackend, StepFailed
from provisioning.models import ProvisioningJob, SplitTest
from provisioning.report import figure
from reservations.models import Order
from tests.conftest import RequestFactory
from tests.provisioning.clock import run_at_start
from tests.provisioning.shipped import TOOL
from tests.provisioning.test_provisioning import OPERATOR, paid_order

JOBS = Path(__file__).resolve().parent / "split_jobs"


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(tmp_path / "hosts")


def delivered(order: Order, backend: LocalBackend) -> tuple[ProvisioningJob, Path]:
    """``order`` approved and its lot delivered by ``backend``: its job and the account's
    home."""
    services.approve_order(order, actor=OPERATOR)
    job = run_at_start(ProvisioningJob.objects.get(order=order).pk, backend)
    assert job.status == ProvisioningJob.Status.READY, job.error
    (account,) = job.accounts
    return job, backend.root / job.lot.host.name / "home" / account


def in_account(home: Path, script: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``script`` in a login of the account: its HOME, its ~/.gpulots-env."""
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("GPULOTS_")
    }
    environment.update(HOME=str(home), GPULOTS_PYTHON=sys.executable)
    return subprocess.run(
        ["bash", "-c", f". ~/.gpulots-env && {script}"],
        capture_output=True,
        text=True,
        env=environment,
        cwd=home,
        timeout=timeout,
    )


@pytest.mark.django_db
def test_split_test_is_installed_in_the_delivered_account_and_runs_there(
    make_request: RequestFactory,
    backend: LocalBackend,
    eager_tasks: None,
) -> None:
    order = paid_order(make_request, hypothesis="bigger_batch")
    job, home = delivered(order, backend)
    facts = json.loads((home / ".gpulots" / "order.json").read_text())
    assert facts == {
        "reference": order.reference,
        "job": job.pk,
        "lot": str(job.lot),
        "hypothesis": "bigger_batch",
        "precision": order.model_precision or None,
        "workload": order.model_workload or None,
        "api": f"{settings.SITE_URL}/api/v1",
    }

    version = in_account(home, "gpulots --version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == "gpulots split-test 1"

    run = in_account(
        home,
        "gpulots split-test --per-card-batch 8 --warmup 2 --steps 3 --profile-steps 2 "
        f"-- {sys.executable} {JOBS / 'plain_loop.py'}",
    )
    assert run.returncode == 0, run.stderr
    report = json.loads((home / "split-test-report.json").read_text())
    # The order's hypothesis and job, from the account; the cards from its ~/.gpulots-env.
    assert report["order"]["reference"] == order.reference
    assert report["order"]["job"] == job.pk
    assert report["verdict"]["hypothesis"] == "bigger_batch"
    assert report["verdict"]["code"] in ("bigger_batch", "bigger_batch_slower")
    cards = f"{job.lot.gpu_a},{job.lot.gpu_b}"
    assert report["split"]["two_cards"]["cards"] == cards
    assert report["split"]["one_card"]["cards"] == str(job.lot.gpu_a)
    assert report["split"]["two_cards"]["per_rank_batch"] == 8


@pytest.mark.django_db
def test_install_tool_refuses_a_link_planted_in_the_account(
    make_request: RequestFactory, backend: LocalBackend, tmp_path: Path
) -> None:
    order = paid_order(make_request)
    services.approve_order(order, actor=OPERATOR)
    job = ProvisioningJob.objects.select_related("lot__host").get(order=order)
    (account, _cards) = services.accounts_for(job)[0]
    backend.script(job.lot.host, "prepare_access", account)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (backend.root / job.lot.host.name / "home" / account / ".gpulots").symlink_to(elsewhere)

    with pytest.raises(StepFailed, match="symbolic link"):
        backend.install_tool(job.lot.host, account, services.tool_order(job))
    assert list(elsewhere.iterdir()) == []


@pytest.mark.django_db(transaction=True)
def test_split_test_uploads_its_report_from_the_account_to_the_orders_report_page(
    make_request: RequestFactory,
    backend: LocalBackend,
    eager_tasks: None,
    live_server: Any,
    ada: tuple[Any, str],
) -> None:
    """The whole way: delivered account → ``gpulots split-test --upload`` with the
    researcher's token → the API → the lot's report page, in the order's link."""
    order = paid_order(make_request, hypothesis="shorter_step")
    Order.objects.filter(pk=order.pk).update(user=ada[0])
    job, home = delivered(order, backend)

    run = in_account(
        home,
        f"GPULOTS_TOKEN={ada[1]} gpulots split-test --global-batch 16 --warmup 2 --steps 3 "
        f"--profile-steps 2 --upload --api {live_server.url}/api/v1 "
        f"-- {sys.executable} {JOBS / 'plain_loop.py'}",
    )

    assert run.returncode == 0, run.stderr
    stored = SplitTest.objects.get(order=order)
    assert stored.job_id == job.pk
    report = json.loads((home / "split-test-report.json").read_text())
    assert stored.report == report
    assert stored.code == report["verdict"]["code"]
    assert stored.stand_in is True
    assert "attached to the order: Your job: " in run.stdout
    page = (
        Client()
        .get(f"/en/orders/{order.reference}/{order.secret}/report/{job.pk}/")
        .content.decode()
    )
    assert 'data-testid="split-summary"' in page
    with translation.override("en"):
        for run_name in ("one_card", "two_cards"):
            assert figure(report["split"][run_name]["median_step_ms"], "ms") in page


def test_split_test_refuses_an_upload_without_a_token_and_keeps_the_report(tmp_path: Path) -> None:
    (tmp_path / ".gpulots").mkdir()
    (tmp_path / ".gpulots" / "order.json").write_text(
        json.dumps({"reference": "GL-TEST", "api": "http://127.0.0.1:9/api/v1"})
    )
    (tmp_path / ".gpulots-env").write_text("export CUDA_VISIBLE_DEVICES=0,1\n")
    run = in_account(
        tmp_path,
        f"{sys.executable} {TOOL} split-test --global-batch 16 --warmup 1 --steps 2 "
        f"--profile-steps 0 --upload -- {sys.executable} {JOBS / 'plain_loop.py'}",
    )

    assert run.returncode == 2
    assert "--upload needs your API token" in run.stderr
    assert json.loads((tmp_path / "split-test-report.json").read_text())["complete"] is True


def test_the_split_test_tool_can_be_downloaded_to_run_anywhere(client: Client) -> None:
    response = client.get("/tools/gpulots.py")

    assert response.status_code == 200
    assert response["Content-Type"] == "text/x-python; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="gpulots.py"'
    assert response.content == TOOL.read_bytes()
