"""A failed acceptance holds the lot, never delivers silently (issue 12): each reason a
version-2 report gives ends in a held lot whose reason the operator reads on the job and in
the order's history; a passing report delivers; the CPU stand-in delivers only on the local
sandbox. Version-1 reports keep their behaviour. Reports are hand-written (v2_reports)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from provisioning import services
from provisioning.backends import LocalBackend
from provisioning.models import ProvisioningJob
from reservations.models import Host, Order
from tests.conftest import RequestFactory
from tests.provisioning import v2_reports
from tests.provisioning.clock import run_at_start
from tests.provisioning.test_operator import approved_job

pytestmark = pytest.mark.django_db


class Reporting(LocalBackend):
    """The local backend's host scripts, with the benchmark's report given, not measured;
    ``sandbox`` False plays a real host (the SSH backend)."""

    def __init__(self, root: Path, report: dict[str, Any], *, sandbox: bool = True) -> None:
        super().__init__(root)
        self.report = report
        self.sandbox = sandbox
        self.arguments: list[str] = []

    def run_validation(
        self, host: Host, report_name: str, arguments: list[str], *, cards: str
    ) -> str:
        self.arguments = arguments
        out = self.host_root(host) / "reports" / f"{report_name}.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(self.report))
        return str(out)


def run(
    make_request: RequestFactory, tmp_path: Path, report: dict[str, Any], *, sandbox: bool = True
) -> ProvisioningJob:
    job = approved_job(make_request)
    return run_at_start(job.pk, Reporting(tmp_path / "hosts", report, sandbox=sandbox))


def assert_held(job: ProvisioningJob, *words: str) -> None:
    assert job.status == ProvisioningJob.Status.HELD
    assert job.error.startswith("access held: acceptance not passed: ")
    for word in words:
        assert word in job.error
    assert Order.objects.get(pk=job.order_id).status == Order.STATUS_APPROVED
    notes = list(job.order.events.values_list("reason", flat=True))
    assert any(word in note for note in notes for word in words)


def test_a_failed_check_holds_the_lot_with_the_failed_checks(
    make_request: RequestFactory, tmp_path: Path
) -> None:
    job = run(make_request, tmp_path, v2_reports.failed_acceptance(), sandbox=False)
    assert_held(job, "matmul_bf16 (card 0): 41 % of peak, below 60 %", "exit code 4")


def test_a_non_zero_exit_code_holds_the_lot_even_if_the_checks_passed(
    make_request: RequestFactory, tmp_path: Path
) -> None:
    job = run(make_request, tmp_path, v2_reports.report(exit_code=5), sandbox=False)
    assert_held(job, "exit code 5 (the benchmark timed out)")


def test_acceptance_not_passed_holds_the_lot(make_request: RequestFactory, tmp_path: Path) -> None:
    report = v2_reports.report()
    report["acceptance"]["passed"] = None  # nothing could be checked
    job = run(make_request, tmp_path, report, sandbox=False)
    assert_held(job, "nothing could be checked")


def test_an_incomplete_report_holds_the_lot(make_request: RequestFactory, tmp_path: Path) -> None:
    job = run(make_request, tmp_path, v2_reports.report(complete=False), sandbox=False)
    assert_held(job, "the report is incomplete")


def test_an_error_in_a_v2_report_holds_the_lot_whatever_the_crash_setting(
    make_request: RequestFactory, tmp_path: Path, settings: Any
) -> None:
    settings.PROVISIONING_HOLD_ON_CRASH = False
    report = v2_reports.report(exit_code=1, error="RuntimeError: NCCL error")
    job = run(make_request, tmp_path, report, sandbox=False)
    assert_held(job, "error: RuntimeError: NCCL error", "exit code 1 (the benchmark crashed)")


def test_a_cpu_stand_in_on_a_real_host_holds_the_lot(
    make_request: RequestFactory, tmp_path: Path
) -> None:
    job = run(make_request, tmp_path, v2_reports.stand_in(), sandbox=False)
    assert_held(job, "measured on a CPU stand-in, not on the cards")


def test_a_cpu_stand_in_on_the_local_sandbox_delivers(
    make_request: RequestFactory, tmp_path: Path
) -> None:
    job = run(make_request, tmp_path, v2_reports.stand_in(), sandbox=True)
    assert job.status == ProvisioningJob.Status.READY
    assert job.report["stand_in"] is True  # type: ignore[index]
    assert Order.objects.get(pk=job.order_id).status == Order.STATUS_ACTIVE


def test_a_passing_v2_report_delivers_on_a_real_host(
    make_request: RequestFactory, tmp_path: Path
) -> None:
    job = run(make_request, tmp_path, v2_reports.report(), sandbox=False)
    assert job.status == ProvisioningJob.Status.READY
    assert job.error == ""
    assert Order.objects.get(pk=job.order_id).status == Order.STATUS_ACTIVE


def test_the_operator_can_release_a_lot_held_by_its_acceptance(
    make_request: RequestFactory, tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    backend = Reporting(tmp_path / "hosts", v2_reports.failed_acceptance(), sandbox=False)
    job = run_at_start(approved_job(make_request).pk, backend)
    assert job.status == ProvisioningJob.Status.HELD
    with django_capture_on_commit_callbacks(execute=False):
        assert services.release_access(job, actor=services.system("operator"))
    job = run_at_start(job.pk, backend)
    assert job.status == ProvisioningJob.Status.READY


def test_a_v1_report_keeps_todays_behaviour(make_request: RequestFactory, tmp_path: Path) -> None:
    v1 = {"version": 1, "devices": {"ok": True, "problem": ""}, "verdict": {"answer": "-"}}
    job = run(make_request, tmp_path, v1, sandbox=False)
    assert job.status == ProvisioningJob.Status.READY


def test_the_benchmark_gets_the_order_and_the_kind(
    make_request: RequestFactory, tmp_path: Path
) -> None:
    job = approved_job(
        make_request,
        model_params_billion="70",
        model_precision="fp8",
        model_workload="training",
        model_seq_len=4096,
        model_micro_batch=2,
    )
    real = Reporting(tmp_path / "hosts", v2_reports.report(), sandbox=False)
    run_at_start(job.pk, real)
    arguments = real.arguments
    assert arguments[arguments.index("--params-billion") + 1] == "70.000"
    assert arguments[arguments.index("--precision") + 1] == "fp8"
    assert arguments[arguments.index("--seq-len") + 1] == "4096"
    assert arguments[arguments.index("--micro-batch") + 1] == "2"
    assert arguments[arguments.index("--workload") + 1] == "training"
    thresholds = json.loads(arguments[arguments.index("--thresholds") + 1])
    assert thresholds["sku"] == "H200"
    assert thresholds["bf16_tflops"] == 989
    assert thresholds["hbm_tbps"] == 4.8
    assert thresholds["arch"] == "sm_90"
    assert "min_rocm" not in thresholds
    assert "--require-gpu" in arguments

    sandbox = Reporting(tmp_path / "sandbox", v2_reports.report(), sandbox=True)
    second = approved_job(make_request, inventory=False, starts_at=job.order.ends_at)
    run_at_start(second.pk, sandbox)
    assert "--require-gpu" not in sandbox.arguments  # the CPU stand-in runs there
    assert sandbox.arguments[sandbox.arguments.index("--seq-len") + 1] == "2048"  # default
    assert sandbox.arguments[sandbox.arguments.index("--micro-batch") + 1] == "1"
