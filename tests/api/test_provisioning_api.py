"""The API's provisioning status and validation reports: a real approval, a real provisioning
run with the local backend (the benchmark runs on the CPU), a failed lot, a retry,
revocation; and examples/book_and_pay.py following it against the live app, its responses
checked against the API's own schema."""

from __future__ import annotations

import importlib.util
import json
import re
import threading
import time
from datetime import timedelta
from html import unescape
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from django.db import transaction
from django.test import Client

from accounts.models import User
from api.models import ApiToken
from provisioning import services
from provisioning.backends import LocalBackend, StepFailed
from provisioning.models import ProvisioningJob
from reservations.models import Host, Order
from reservations.services import Actor, mark_paid, place_order, system
from tests.api.test_api import get
from tests.api.test_api_from_its_schema import CHECKS
from tests.conftest import RequestFactory, build_inventory
from tests.provisioning.clock import run_at_start

OPERATOR = Actor("operator@example.org")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "book_and_pay.py"


@pytest.fixture
def researcher(db: None) -> tuple[User, str]:
    user = User.objects.create_user("ada@example.org")
    return user, ApiToken.issue(user, "pipeline")[1]


@pytest.fixture
def stranger(db: None) -> tuple[User, str]:
    user = User.objects.create_user("eve@example.org")
    return user, ApiToken.issue(user, "eve")[1]


def paid_order(make_request: RequestFactory, user: User, **overrides: Any) -> Order:
    build_inventory()
    order = place_order(make_request(window_days=3, **overrides), user=user)
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="paid")
    return order


class FullDisk(LocalBackend):
    """A host whose disk is full: preparing the environment fails, with the host's words."""

    def script(self, host: Host, name: str, *args: str) -> None:
        if name == "prepare_environment":
            raise StepFailed(f"{name}: /srv/envs: No space left on device")
        super().script(host, name, *args)


def ssh_lines_on_the_order_page(client: Client, order: Order) -> list[str]:
    html = client.get(f"/en/orders/{order.reference}/{order.secret}/").content.decode()
    return [unescape(line) for line in re.findall(r'<code data-testid="ssh">([^<]*)</code>', html)]


@pytest.mark.django_db
def test_before_approval_there_are_no_lots_and_no_report(
    client: Client, make_request: RequestFactory, researcher: tuple[User, str]
) -> None:
    user, token = researcher
    order = paid_order(make_request, user)
    status = get(client, f"/api/v1/orders/{order.reference}/provisioning/", token)
    assert status.status_code == 200, status.json()
    assert status.json()["order"]["reference"] == order.reference
    assert status.json()["order"]["status"] == "paid"
    assert status.json()["lots"] == []
    report = get(client, f"/api/v1/orders/{order.reference}/report/", token)
    assert report.status_code == 409
    assert report.json()["code"] == "report_not_ready"
    assert "/provisioning/" in report.json()["detail"]


@pytest.mark.django_db
def test_a_report_is_delivered_with_its_lot_and_only_to_its_owner(
    client: Client,
    make_request: RequestFactory,
    researcher: tuple[User, str],
    stranger: tuple[User, str],
) -> None:
    order = paid_order(make_request, researcher[0])
    services.approve_order(order, actor=OPERATOR)
    job = ProvisioningJob.objects.get(order=order)
    # A report stored while the job still runs is not delivered yet (as on the order page).
    ProvisioningJob.objects.filter(pk=job.pk).update(
        status=ProvisioningJob.Status.RUNNING, steps_done=6, report={"version": 1}
    )
    early = get(client, f"/api/v1/orders/{order.reference}/report/", researcher[1])
    assert (early.status_code, early.json()["code"]) == (409, "report_not_ready")
    ProvisioningJob.objects.filter(pk=job.pk).update(status=ProvisioningJob.Status.READY)
    for path in ("provisioning/", "report/"):
        url = f"/api/v1/orders/{order.reference}/{path}"
        assert get(client, url, researcher[1]).status_code == 200
        refused = get(client, url, stranger[1])
        assert (refused.status_code, refused.json()["code"]) == (404, "not_found")
        anonymous = client.get(url)
        assert (anonymous.status_code, anonymous.json()["code"]) == (401, "not_authenticated")
    report = get(client, f"/api/v1/orders/{order.reference}/report/", researcher[1]).json()
    assert report["lots"][0]["report"] == {"version": 1}


@pytest.mark.django_db
def test_provisioning_is_followed_step_by_step_and_the_reports_downloaded(
    client: Client,
    make_request: RequestFactory,
    researcher: tuple[User, str],
    tmp_path: Path,
    django_capture_on_commit_callbacks: Any,
) -> None:
    user, token = researcher
    order = paid_order(make_request, user, lot_count=2, usage_mode="independent")
    status_url = f"/api/v1/orders/{order.reference}/provisioning/"
    report_url = f"/api/v1/orders/{order.reference}/report/"
    services.approve_order(order, actor=OPERATOR)
    first, second = ProvisioningJob.objects.filter(order=order).order_by("lot_id")
    assert ssh_lines_on_the_order_page(client, order) == []

    body = get(client, status_url, token).json()
    assert body["order"]["status"] == "approved"
    assert [lot["lot"] for lot in body["lots"]] == [str(first.lot), str(second.lot)]
    for lot in body["lots"]:
        assert lot["host"] == first.lot.host.name
        assert (lot["status"], lot["steps_done"], lot["steps_total"]) == ("pending", 0, 7)
        assert lot["current_step"] == "prepare_access"
        assert (lot["error"], lot["ready_at"], lot["accounts"]) == (None, None, [])
    assert get(client, report_url, token).json()["code"] == "report_not_ready"

    # The second lot's host fails (its error recorded as the worker does when retries are
    # spent); the first is provisioned for real, the benchmark included.
    backend = LocalBackend(tmp_path / "hosts")
    with pytest.raises(StepFailed) as crash:
        run_at_start(second.pk, FullDisk(tmp_path / "hosts"))
    assert services.fail_job(second.pk, str(crash.value))
    run_at_start(first.pk, backend)

    body = get(client, status_url, token).json()
    assert body["order"]["status"] == "approved"  # never active with a failed lot
    ready, failed = body["lots"]
    assert (ready["status"], ready["steps_done"], ready["current_step"]) == ("ready", 7, None)
    assert ready["ready_at"] is not None
    assert ready["error"] is None
    first.refresh_from_db()
    assert [(a["account"], a["cards"]) for a in ready["accounts"]] == [
        (first.accounts[0], str(first.lot.gpu_a)),
        (first.accounts[1], str(first.lot.gpu_b)),
    ]
    assert [a["ssh"] for a in ready["accounts"]] == [
        f"ssh -p 22 {account}@127.0.0.1" for account in first.accounts
    ]
    assert [a["ssh"] for a in ready["accounts"]] == ssh_lines_on_the_order_page(client, order)
    assert (failed["status"], failed["current_step"]) == ("failed", "prepare_environment")
    assert "prepare_environment" in failed["error"]
    assert "No space left" not in failed["error"]  # the host's own words stay with the operator
    assert failed["accounts"] == []

    reports = get(client, report_url, token)
    assert reports.status_code == 200, reports.json()
    by_lot = {lot["lot"]: lot for lot in reports.json()["lots"]}
    assert by_lot[str(first.lot)]["report"] == first.report
    assert by_lot[str(first.lot)]["report"]["verdict"]["hypothesis"] == "shorter_step"
    assert by_lot[str(first.lot)]["report"]["essentials"]["all_reduce"]["correct"] is True
    assert by_lot[str(second.lot)]["report"] is None

    # The operator retries the failed lot: it continues, the order becomes active.
    assert services.retry_job(second, actor=OPERATOR)
    run_at_start(second.pk, backend)
    body = get(client, status_url, token).json()
    assert body["order"]["status"] == "active"
    assert [lot["status"] for lot in body["lots"]] == ["ready", "ready"]
    second.refresh_from_db()
    assert [a["ssh"] for lot in body["lots"] for a in lot["accounts"]] == [
        f"ssh -p 22 {account}@127.0.0.1" for account in first.accounts + second.accounts
    ]
    assert [a["ssh"] for lot in body["lots"] for a in lot["accounts"]] == (
        ssh_lines_on_the_order_page(client, order)
    )
    reports = get(client, report_url, token).json()["lots"]
    assert [lot["report"] for lot in reports] == [first.report, second.report]

    # At the window's end access is removed: no ssh lines any more, the reports stay.
    later = Order.objects.get(pk=order.pk).ends_at + timedelta(minutes=1)
    with django_capture_on_commit_callbacks():
        assert services.revoke_due(now=later, backend=backend) == 1
    body = get(client, status_url, token).json()
    assert body["order"]["status"] == "completed"
    for lot in body["lots"]:
        assert (lot["status"], lot["accounts"], lot["current_step"]) == ("revoked", [], None)
        assert lot["revoked_at"] is not None
    reports = get(client, report_url, token).json()["lots"]
    assert [lot["report"] for lot in reports] == [first.report, second.report]


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("book_and_pay", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.django_db(transaction=True)
def test_the_example_follows_provisioning_and_saves_the_report(
    live_server: Any,
    make_request: RequestFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """examples/book_and_pay.py's last part, against the live app: no worker, the test runs
    the job itself (so the example sees it pending first)."""
    monkeypatch.setattr("provisioning.services._enqueue", lambda jobs: None)
    example = load_example()
    user = User.objects.create_user("lab@example.org")
    token = ApiToken.issue(user, "example")[1]
    order = paid_order(make_request, user)
    api = f"{live_server.url}/api/v1"
    printed: list[str] = []
    schema = schemathesis.openapi.from_url(f"{api}/schema/?format=json")
    headers = {"Authorization": f"Bearer {token}"}

    def conforms(path: str) -> Any:
        """A real request, checked against the API's own schema (status, body, headers)."""
        operation = schema[f"/api/v1/orders/{{reference}}/{path}/"]["GET"]
        case = operation.Case(path_parameters={"reference": order.reference})
        return case.call_and_validate(headers=headers, checks=CHECKS)

    assert conforms("report").status_code == 409

    def until(text: str) -> None:
        for _ in range(600):
            printed.extend(capsys.readouterr().out.splitlines())
            if any(text in line for line in printed) or not waiting.is_alive():
                return
            time.sleep(0.05)

    found: list[Any] = []
    waiting = threading.Thread(
        target=lambda: found.append(
            example.wait_until_active(api, token, order.reference, timeout=120, every=0.2)
        )
    )
    waiting.start()
    until("waiting for approval")
    services.approve_order(order, actor=OPERATOR)
    until("pending 0/7")
    job = run_at_start(ProvisioningJob.objects.get(order=order).pk, LocalBackend(tmp_path))
    waiting.join(timeout=60)
    until("order active")
    lot = str(job.lot)
    assert printed[0] == "order paid: waiting for approval"
    opens = order.starts_at.isoformat().replace("+00:00", "Z")
    assert printed[1] == (
        f"order approved: {lot} pending 0/7 (prepare_access), access opens {opens}"
    )
    assert printed[-1] == f"order active: {lot} ready 7/7"
    (ready,) = found[0]
    assert [a["ssh"] for a in ready["accounts"]] == [f"ssh -p 22 {job.accounts[0]}@127.0.0.1"]

    assert conforms("provisioning").status_code == 200
    assert conforms("report").status_code == 200
    saved = example.save_reports(api, token, order.reference, tmp_path)
    assert saved == tmp_path / f"{order.reference}-report.json"
    assert json.loads(saved.read_text()) == [
        {
            "lot": lot,
            "host": job.lot.host.name,
            "version": (job.report or {}).get("version", 1),
            "report": job.report,
        }
    ]
    report: Any = job.report
    assert f"{lot}: {report['verdict']['answer']}" in capsys.readouterr().out
