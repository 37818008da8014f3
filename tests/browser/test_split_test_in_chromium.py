"""The researcher's own split test on the report page, in Chromium: a report made by
``gpulots split-test`` on this machine's CPU (two gloo processes), uploaded to the order,
read in English, German and French on a desktop and a phone; axe-core finds no
violation of any impact, and the page says that a CPU stand-in measured it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from provisioning.split_tests import attach_split_test
from reservations.services import Actor
from tests.browser.conftest import PHONE, Shots
from tests.browser.test_desk_in_chromium import AXE, WIDE, axe_violations
from tests.conftest import RequestFactory
from tests.provisioning import v2_reports
from tests.provisioning.shipped import TOOL
from tests.provisioning.test_report_page import delivered

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

JOB = Path(__file__).resolve().parents[1] / "provisioning" / "split_jobs" / "plain_loop.py"
WORDS = {
    "en": ("Your own job: one card, then two", "CPU stand-in", "process memory"),
    "de": ("Ihr eigener Job: eine Karte, dann zwei", "CPU-Ersatz", "Prozessspeicher"),
    "fr": ("Votre propre tâche : une carte, puis deux", "substitut CPU", "mémoire des processus"),
}


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A split test as the command writes it, run here (no order file: order-wide)."""
    folder = tmp_path_factory.mktemp("split-test")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GPULOTS_")}
    environment.update(CUDA_VISIBLE_DEVICES="0,1", HOME=str(folder))
    command = [sys.executable, str(TOOL), "split-test", "--global-batch", "16"]
    command += ["--warmup", "2", "--steps", "4", "--profile-steps", "2", "--logs", str(folder)]
    command += ["--out", str(folder / "report.json"), "--", sys.executable, str(JOB)]
    done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=240)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads((folder / "report.json").read_text())
    return report


@pytest.mark.parametrize("language", ["en", "de", "fr"])
@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["desktop", "phone"])
def test_the_split_test_reads_beside_the_acceptance_result(
    browser: Browser,
    live_server: Any,
    shots: Shots,
    make_request: RequestFactory,
    tmp_path: Path,
    cpu_report: dict[str, Any],
    language: str,
    viewport: dict[str, int],
) -> None:
    assert AXE.exists(), "axe-core is missing: run `npm ci` (make install does)"
    job = delivered(make_request, tmp_path, v2_reports.report())
    attach_split_test(job.order, cpu_report, actor=Actor("ada@example.org"))
    order = job.order
    context = browser.new_context(viewport=viewport, bypass_csp=True)  # type: ignore[arg-type]
    page = context.new_page()
    page.set_default_timeout(15_000)

    page.goto(f"{live_server.url}/{language}/orders/{order.reference}/{order.secret}/")
    page.get_by_test_id("split-tests").get_by_role("link").first.click()
    title, stand_in, memory = WORDS[language]
    section = page.locator("section[aria-labelledby=own-job]")
    expect(section.get_by_role("heading", level=2)).to_have_text(title)
    expect(page.get_by_test_id("split-summary")).to_be_visible()
    expect(page.get_by_test_id("split-stand-in")).to_contain_text(stand_in)
    expect(page.get_by_test_id("split-runs")).to_contain_text(memory)
    # Beside the acceptance result: right after the hypothesis, before the acceptance.
    order_of = page.evaluate(
        "[...document.querySelectorAll('main section')].map(s => s.getAttribute('aria-labelledby'))"
    )
    assert order_of.index("own-job") == order_of.index("verdict") + 1
    assert order_of.index("own-job") < order_of.index("acceptance")
    page.get_by_test_id("split-runs").scroll_into_view_if_needed()
    english_desktop = (language, viewport) == ("en", WIDE)
    shots(page, f"report-{language}", doc="report-split-test" if english_desktop else None)
    assert axe_violations(page, every_impact=True) == []
    context.close()
