"""An approved order shows when access opens (UTC and the reader's own time); at the window's
start (a simulated clock drives the schedule) the page turns active without a reload."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from playwright.sync_api import Browser, expect

from provisioning import schedule, services
from provisioning.models import ProvisioningJob
from reservations.models import Order
from reservations.services import mark_paid, place_order, system
from tests.browser.conftest import DESKTOP, PHONE, Shots
from tests.conftest import RequestFactory, build_inventory
from tests.provisioning.clock import Clock, SimulatedHost
from tests.provisioning.test_provisioning import OPERATOR

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

WORDS = {
    "en": {"opens": "Access opens on", "in": "(in 2", "yours": "your time:", "active": "active"},
    "de": {
        "opens": "Der Zugang öffnet am",
        "in": "(in 2",
        "yours": "Ihre Ortszeit:",
        "active": "aktiv",
    },
    "fr": {
        "opens": "L'accès ouvre le",
        "in": "(dans 2",
        "yours": "votre heure :",
        "active": "actif",
    },
}


@pytest.mark.parametrize("language", ["en", "de", "fr"])
def test_an_approved_order_counts_down_and_turns_active_at_the_start(
    browser: Browser,
    live_server: Any,
    shots: Shots,
    make_request: RequestFactory,
    tmp_path: Path,
    language: str,
) -> None:
    build_inventory()
    starts_at = (timezone.now() + timedelta(days=2, hours=3)).replace(second=0, microsecond=0)
    order = place_order(make_request(starts_at=starts_at, window_days=3, language=language))
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="paid")
    services.approve_order(order, actor=OPERATOR)  # days ahead: nothing is prepared yet
    words = WORDS[language]

    context = browser.new_context(viewport=DESKTOP, timezone_id="America/New_York")  # type: ignore[arg-type]
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(f"{live_server.url}/{language}/orders/{order.reference}/{order.secret}/")
    window = page.get_by_test_id("access-window")
    expect(window).to_contain_text(words["opens"])
    expect(window).to_contain_text("UTC")
    expect(window).to_contain_text(words["in"])  # "in 2 days, 3 hours"
    # The reader's own time, next to UTC: New York is five hours behind in winter.
    local = page.locator(".local-time")
    expect(local).to_be_visible()
    expect(local).to_contain_text(words["yours"])
    expect(local).to_contain_text("America/New_York")
    page.evaluate("window.__notReloaded = true")
    shots(page, "approved-countdown")

    # The clock reaches the start: the schedule prepares the lot and opens access.
    clock = Clock(starts_at)
    hosts = SimulatedHost(root=tmp_path / "hosts", clock=clock)

    def start(job_id: int) -> None:
        services.run_job(job_id, hosts, now=clock.now)

    schedule.tick(now=starts_at, start=start, backend=hosts)
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_ACTIVE
    expect(page.get_by_test_id("status")).to_have_text(words["active"], timeout=20_000)
    (job,) = ProvisioningJob.objects.filter(order=order)
    expect(page.get_by_test_id("ssh")).to_have_text(job.ssh_commands[0])
    assert page.evaluate("window.__notReloaded") is True  # refreshed in place
    shots(page, "active-without-reload", doc="order-access" if language == "en" else None)
    context.close()

    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)  # type: ignore[arg-type]
    small = phone.new_page()
    small.goto(f"{live_server.url}/{language}/orders/{order.reference}/{order.secret}/")
    expect(small.get_by_test_id("ssh")).to_be_visible()
    width = small.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], width
    shots(small, "active-phone", doc="order-access-phone" if language == "en" else None)
    phone.close()
