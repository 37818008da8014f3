"""The README's walkthrough ("Try the whole loop in ten minutes"), step by step in Chromium
under the local demo's settings (``DEMO_MODE``, as `make run` sets it): book for today in
the browser, pay with the command the banner prints, approve in the desk, and see access and
the report. If the walkthrough and the product part, this test fails.

Only the clock is driven: the window starts within minutes under the demo, and the periodic
tick that opens access at the start is run for that instant instead of waited for.
"""

from __future__ import annotations

import io
import re
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import Browser, expect

from accounts.models import User
from payments import scanning
from payments.models import Chain
from provisioning import schedule, services
from provisioning.backends import LocalBackend
from provisioning.models import ProvisioningJob
from reservations.models import Order
from tests.browser.conftest import DESKTOP, Shots
from tests.browser.test_booking_in_chromium import fill_contact, submit
from tests.conftest import Payments, build_inventory, openssh_public_key

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

README = Path(__file__).resolve().parents[2] / "README.md"


def walkthrough() -> str:
    text = README.read_text()
    start = text.index("## Try the whole loop in ten minutes")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def test_the_readme_walkthrough_names_the_commands_this_test_runs() -> None:
    steps = walkthrough()
    for said in ("make run", "make pay REF=", "/admin/", "Approve", "today"):
        assert said in steps, said


def test_the_readme_walkthrough_books_pays_and_reaches_access_and_the_report(
    browser: Browser,
    live_server: Any,
    shots: Shots,
    committed_payments: Payments,
    eager_tasks: None,
    settings: Any,
    tmp_path: Path,
) -> None:
    settings.DEMO_MODE = True
    settings.PROVISIONING_LOCAL_ROOT = str(tmp_path / "hosts")
    build_inventory()
    User.objects.create_superuser("operator@localhost", "a-long-operator-password")
    context = browser.new_context(viewport=DESKTOP)  # type: ignore[arg-type]
    page = context.new_page()
    page.set_default_timeout(60_000)  # approving prepares the lot in the request (eager)

    # 1. The landing page says it is the demo; "Book lots".
    page.goto(f"{live_server.url}/en/")
    expect(page.get_by_test_id("demo-note")).to_contain_text("starts within 5 minutes")
    page.get_by_role("link", name="Book lots").first.click()

    # 2. The plan: today is the default start, and the calendar offers it.
    today = timezone.now().astimezone(UTC).date()
    expect(page.locator("#id_start_date")).to_have_value(today.isoformat())
    page.check("input[name=kind][value=h200]")
    page.check("input[name=window_days][value='3']")
    page.select_option("#id_environment", "pytorch-2.9-cuda-12.8")
    page.check("input[name=hypothesis][value=shorter_step]")
    page.fill("#id_hypothesis_text", "Two H200 halve the step time of our 7B fine-tune.")
    expect(page.locator(".calendar [aria-current=date]")).to_contain_text(str(today.day))
    shots(page, "plan-today")
    submit(page)
    fill_contact(page, openssh_public_key())
    submit(page)
    submit(page, "form.actions button[type=submit]")

    order = Order.objects.get()
    assert timezone.now() < order.starts_at <= timezone.now() + timedelta(minutes=6)

    # 3. Pay: choose USDC on the order page, then the command the banner prints.
    page.get_by_role("button", name="USDC · Local dev chain (anvil)").click()
    page.wait_for_load_state()
    printed = io.StringIO()
    call_command("devchain", "pay", order.reference, stdout=printed)  # make pay REF=…
    assert re.search(r"transaction 0x[0-9a-f]{64}", printed.getvalue())
    committed_payments.dev.mine(2)  # make run's chain mines a block every 2 s
    scanning.scan_chain(Chain.objects.get(pk=committed_payments.chain.pk))  # beat's scan
    expect(page.get_by_test_id("status")).to_have_text("paid, awaiting approval", timeout=20_000)
    shots(page, "paid")

    # 4. The operator approves in the desk (/admin/, the order's page, "Approve").
    desk = context.new_page()
    desk.set_default_timeout(120_000)
    desk.goto(f"{live_server.url}/admin/login/")
    desk.fill("#id_username", "operator@localhost")
    desk.fill("#id_password", "a-long-operator-password")
    desk.click("input[type=submit]")
    desk.goto(f"{live_server.url}/admin/reservations/order/{order.pk}/change/")
    with desk.expect_navigation():
        desk.get_by_test_id("approve").click()
    (job,) = ProvisioningJob.objects.filter(order=order)
    job.refresh_from_db()
    assert job.status == ProvisioningJob.Status.PREPARED, job.status  # benchmarked already

    # 5. The window starts (within minutes): the tick opens access, the page shows the
    # SSH command and the report, without a reload.
    order.refresh_from_db()
    backend = LocalBackend(root=tmp_path / "hosts")

    def start(job_id: int) -> None:
        services.run_job(job_id, backend, now=order.starts_at)

    schedule.tick(now=order.starts_at, start=start, backend=backend)
    expect(page.get_by_test_id("status")).to_have_text("active", timeout=20_000)
    job.refresh_from_db()
    expect(page.get_by_test_id("ssh")).to_have_text(job.ssh_commands[0])
    shots(page, "access")
    page.get_by_role("link", name="Read the validation report").click()
    expect(page.locator("main")).to_contain_text("one card against two cards")
    expect(page.locator("main")).to_contain_text("CPU stand-in")
    shots(page, "report")
    context.close()
