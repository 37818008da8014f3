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

from provisioning import services
from provisioning.backends import LocalBackend, StepFailed
from provisioning.models import ProvisioningJob
from tests.conftest import RequestFactory
from tests.provisioning.clock import run_at_start
from tests.provisioning.test_provisioning import OPERATOR, paid_order

JOBS = Path(__file__).resolve().parent / "split_jobs"


@pytest.fixture
def backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(tmp_path / "hosts")


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
    django_capture_on_commit_callbacks: Any,
) -> None:
    order = paid_order(make_request, hypothesis="bigger_batch")
    with django_capture_on_commit_callbacks():
        services.approve_order(order, actor=OPERATOR)
    job = ProvisioningJob.objects.get(order=order)
    with django_capture_on_commit_callbacks(execute=True):
        job = run_at_start(job.pk, backend)
    assert job.status == ProvisioningJob.Status.READY, job.error
    (account,) = job.accounts
    home = backend.root / job.lot.host.name / "home" / account
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
