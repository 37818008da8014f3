"""The account's webhook pages in Chromium: a researcher adds an endpoint (its secret shown
once), sends a test event, reads the delivery log with a failed attempt and its next retry,
and redelivers; axe-core finds nothing on the pages, at 1366 px and on a phone. The
documentation's screenshots of the endpoint page and the delivery log are taken here."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from playwright.sync_api import Browser

from accounts.models import User
from reservations.services import place_order
from tests.browser.conftest import PHONE, Shots
from tests.browser.test_desk_in_chromium import AXE, WIDE, axe_violations
from tests.conftest import RequestFactory, build_inventory
from tests.webhooks.receiver import Receiver, Script
from tests.webhooks.receiver import receiver as receiver  # the fixture
from webhooks.models import Delivery, Endpoint

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1366px", "phone"])
def test_a_researcher_adds_an_endpoint_reads_its_log_and_redelivers(
    browser: Browser,
    live_server: Any,
    shots: Shots,
    receiver: Receiver,
    make_request: RequestFactory,
    eager_tasks: None,
    viewport: dict[str, int],
) -> None:
    assert AXE.exists(), "axe-core is missing: run `npm ci` (make install does)"
    build_inventory()
    ada = User.objects.create_user("ada@example.org")
    signed_in = Client()
    signed_in.force_login(ada)
    context = browser.new_context(viewport=viewport)  # type: ignore[arg-type]
    context.add_cookies(
        [
            {
                "name": "sessionid",
                "value": signed_in.cookies["sessionid"].value,
                "url": live_server.url,
            }
        ]
    )
    page = context.new_page()
    page.set_default_timeout(15_000)
    desktop = viewport == WIDE

    page.goto(f"{live_server.url}/en/account/webhooks/")
    page.fill("#id_url", receiver.url("/lab", Script(statuses=[200, 500, 200])))
    page.fill("#id_description", "the lab scheduler")
    for event in ("order.placed", "order.paid", "access.opened", "report.ready"):
        page.check(f"input[name=event_types][value='{event}']")
    assert axe_violations(page, every_impact=True) == []
    page.click("button:has-text('Add the endpoint')")
    secret = page.inner_text('[data-testid="new-secret"]')
    assert secret.startswith("whsec_")
    hook = Endpoint.objects.get()
    assert hook.event_types == ["order.placed", "order.paid", "report.ready", "access.opened"]
    shots(page, "endpoint-added", doc="webhook-endpoint" if desktop else None)
    assert axe_violations(page, every_impact=True) == []

    page.click("button:has-text('Send a test event')")  # delivered at once: 200
    place_order(make_request(lot_count=1, window_days=3), user=ada)  # order.placed: 500
    page.reload()
    log = page.inner_text('[data-testid="delivery-log"]')
    assert secret not in page.content()  # shown once only
    assert "webhook.test" in log
    assert "order.placed" in log
    assert "500" in log
    failed = Delivery.objects.get(message__event_type="order.placed")
    assert failed.status == "pending"
    assert failed.next_attempt_at is not None
    shots(page, "delivery-log", doc="webhook-delivery-log" if desktop else None)
    assert axe_violations(page, every_impact=True) == []

    page.click(f"form[action$='/deliveries/{failed.pk}/redeliver/'] button")
    page.wait_for_selector("text=Redelivery asked for")
    failed.refresh_from_db()
    assert failed.status == "delivered"
    assert len(receiver.at("/lab")) == 3
    if not desktop:
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], width
    context.close()
