"""The operator desk in Chromium: "Today" and the occupancy timeline, at 1366 px and on a
phone, pass axe-core (from npm, injected: no CDN) with no critical or serious violation,
and a bar of the timeline is reached with the keyboard and shows its order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from playwright.sync_api import Browser, Page

from accounts.models import User
from provisioning.services import approve_order
from reservations.extensions import place_extension
from reservations.models import Order
from reservations.services import mark_paid, place_order, system
from tests.browser.conftest import PHONE, Shots
from tests.conftest import RequestFactory, build_inventory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"
WIDE = {"width": 1366, "height": 900}


def axe_violations(page: Page, *, every_impact: bool = False) -> list[dict[str, Any]]:
    """axe-core's critical and serious violations on the page (WCAG 2 A and AA rules); with
    ``every_impact``, every violation of those rules and of axe's best practices, moderate
    and minor included (the researcher's pages are held to none at all)."""
    # Evaluated through the DevTools protocol rather than added as an inline <script>: the
    # pages' Content-Security-Policy (script-src 'self') would block the tag, and the tests
    # that watch the policy would see axe's injection as a violation.
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text() + "\n;true")
    found: list[dict[str, Any]] = page.evaluate(
        """async (every) => {
            const tags = every ? ['wcag2a', 'wcag2aa', 'best-practice'] : ['wcag2a', 'wcag2aa'];
            const result = await axe.run(document, {runOnly: tags});
            return result.violations
                .filter(v => every || v.impact === 'critical' || v.impact === 'serious')
                .map(v => ({id: v.id, impact: v.impact, nodes: v.nodes.map(n => n.target)}));
        }""",
        every_impact,
    )
    return found


def sign_in(page: Page, url: str) -> None:
    page.goto(f"{url}/admin/login/")
    page.fill("#id_username", "desk@example.org")
    page.fill("#id_password", "a-long-password-1")
    page.click("input[type=submit]")


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1366px", "phone"])
def test_the_desk_and_the_timeline_pass_axe_and_the_timeline_works_with_the_keyboard(
    browser: Browser,
    live_server: Any,
    shots: Shots,
    make_request: RequestFactory,
    viewport: dict[str, int],
) -> None:
    assert AXE.exists(), "axe-core is missing: run `npm ci` (make install does)"
    build_inventory()
    User.objects.create_superuser("desk@example.org", "a-long-password-1")
    held = place_order(make_request(lot_count=1, window_days=3))
    booked = place_order(make_request(lot_count=1, window_days=7))
    with transaction.atomic():
        assert mark_paid(booked, actor=system("test"), reason="paid")
    # An extension of the booked order, awaiting payment; one of another order, joined.
    continuing = place_extension(booked, 3, actor=system("test"))
    extended = place_order(make_request(kind="b200", lot_count=1, window_days=3))
    with transaction.atomic():
        assert mark_paid(extended, actor=system("test"), reason="paid")
    approve_order(extended, actor=system("test"))
    joined = place_extension(extended, 7, actor=system("test"))
    with transaction.atomic():
        assert mark_paid(joined, actor=system("test"), reason="paid")
    approve_order(Order.objects.get(pk=joined.pk), actor=system("test"))

    # axe is injected as a script: the test's context lets it past the admin's CSP.
    context = browser.new_context(viewport=viewport, bypass_csp=True)  # type: ignore[arg-type]
    page = context.new_page()
    page.set_default_timeout(15_000)
    sign_in(page, live_server.url)
    page.goto(f"{live_server.url}/admin/")
    assert page.locator("#today-approvals li").count() == 1
    assert booked.reference in page.inner_text("#today-approvals")
    shots(page, "today", doc="desk-today" if viewport == WIDE else None)
    assert axe_violations(page) == []

    page.click("text=Occupancy timeline")
    page.wait_for_selector(".tl-track")
    shots(page, "timeline", doc="desk-timeline" if viewport == WIDE else None)
    assert axe_violations(page) == []
    continues = page.locator(f'a.bar-continues[href$="/order/{continuing.pk}/change/"]')
    assert f"extension of {booked.reference}" in (continues.get_attribute("aria-label") or "")
    seam = page.locator(".tl-track .tl-joint").first
    assert f"extended by {joined.reference}" in (seam.get_attribute("aria-label") or "")
    bar = page.locator(f'a.bar-held[href$="/admin/reservations/order/{held.pk}/change/"]')
    assert bar.count() == 1
    # Keyboard: tab until the held order's bar has the focus; its label names the order.
    for _ in range(200):
        page.keyboard.press("Tab")
        if bar.evaluate("element => element === document.activeElement"):
            break
    else:
        raise AssertionError("the bar never got the keyboard focus")
    assert held.reference in (bar.get_attribute("aria-label") or "")
    shots(page, "timeline-bar-focused")
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/admin/reservations/order/{held.pk}/change/")
    context.close()
