"""The order page after a lot was replaced, in Chromium (issue 33): what failed, where the
booking went and how to connect, and the credit, taken as time with its button. In English,
German and French, at 1366 px and on a phone, with no axe-core violation of any impact and
no sideways scroll."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from reservations.models import Credit, Order
from tests.browser.conftest import PHONE, Shots
from tests.browser.test_desk_in_chromium import AXE, WIDE, axe_violations
from tests.conftest import RequestFactory, build_inventory
from tests.reservations.test_credit_page import replaced_and_credited

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

HEADING = {
    "en": "When a lot failed",
    "de": "Wenn ein Lot ausgefallen ist",
    "fr": "Quand un lot a échoué",
}
TAKEN = {
    "en": "Taken as time: your window now ends",
    "de": "Als Zeit genommen: Ihr Zeitfenster endet jetzt",
    "fr": "Pris en temps : votre créneau se termine désormais",
}


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1366px", "390px"])
@pytest.mark.parametrize("language", ["en", "de", "fr"])
def test_the_order_page_after_a_replacement_offers_the_credit_and_takes_it_as_time(
    browser: Browser,
    live_server: Any,
    shots: Shots,
    make_request: RequestFactory,
    language: str,
    viewport: dict[str, int],
) -> None:
    assert AXE.exists(), "axe-core is missing: run `npm ci` (make install does)"
    build_inventory()
    order, credit = replaced_and_credited(make_request, hours=3, language=language)
    spare = order.incidents.get().replacement
    assert spare is not None
    end = Order.objects.get(pk=order.pk).ends_at

    context = browser.new_context(viewport=viewport, bypass_csp=True)  # type: ignore[arg-type]
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(f"{live_server.url}/{language}/orders/{order.reference}/{order.secret}/#incidents")
    section = page.get_by_test_id("incidents")
    expect(section.get_by_role("heading", name=HEADING[language])).to_be_visible()
    expect(section.get_by_test_id("replaced-by")).to_contain_text(str(spare))
    expect(section.locator("pre.ssh")).to_contain_text("gl-test@203.0.113.7")
    section.scroll_into_view_if_needed()
    assert axe_violations(page, every_impact=True) == []
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the order page scrolls sideways by {overflow}px"
    desktop_english = (language, viewport) == ("en", WIDE)
    shots(page, f"replaced-{language}", doc="order-replaced" if desktop_english else None)

    section.get_by_test_id("credit-time").click()
    expect(page.get_by_test_id("incidents")).to_contain_text(TAKEN[language])
    assert Credit.objects.get(pk=credit.pk).status == Credit.Status.TIME
    assert Order.objects.get(pk=order.pk).ends_at == end + timedelta(hours=3)
    assert axe_violations(page, every_impact=True) == []
    context.close()
