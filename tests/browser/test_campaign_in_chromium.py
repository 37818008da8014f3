"""A 30-day campaign in Chromium: booked with two dated checkpoints, listed on the review
and the order page, an outcome recorded there; in English at 1366 px and on a phone, in
German and French once; axe-core finds no violation of any impact."""

from __future__ import annotations

from datetime import UTC, date, timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from reservations.models import Checkpoint, Order
from tests.browser.conftest import PHONE, Shots
from tests.browser.test_booking_in_chromium import fill_contact, submit
from tests.browser.test_desk_in_chromium import AXE, WIDE, axe_violations
from tests.conftest import build_inventory, openssh_public_key

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

HEADING = {"en": "Your campaign", "de": "Ihre Kampagne", "fr": "Votre campagne"}


def fill_plan(page: Page, start: date) -> None:
    page.check("input[name=kind][value=h200]")
    page.fill("#id_lot_count", "1")
    page.check("input[name=window_days][value='30']")
    page.fill("#id_start_date", start.isoformat())
    page.select_option("#id_environment", "pytorch-2.9-cuda-12.8")
    page.check("input[name=hypothesis][value=bigger_batch]")


@pytest.mark.parametrize(
    ("language", "viewport"),
    [("en", WIDE), ("en", PHONE), ("de", WIDE), ("fr", WIDE)],
    ids=["en-1366px", "en-phone", "de-1366px", "fr-1366px"],
)
def test_a_campaign_is_booked_with_checkpoints_and_an_outcome_is_recorded(
    browser: Browser,
    live_server: Any,
    shots: Shots,
    eager_tasks: None,
    language: str,
    viewport: dict[str, int],
) -> None:
    assert AXE.exists(), "axe-core is missing: run `npm ci` (make install does)"
    build_inventory()
    # axe is injected as a script: the test's context lets it past the site's CSP.
    context = browser.new_context(viewport=viewport, bypass_csp=True)  # type: ignore[arg-type]
    page = context.new_page()
    page.set_default_timeout(15_000)
    start = timezone.now().date() + timedelta(days=5)

    page.goto(f"{live_server.url}/{language}/book/")
    expect(page.locator("html")).to_have_attribute("lang", language)
    fill_plan(page, start)
    submit(page)

    fill_contact(page, openssh_public_key())
    expect(page.locator("#id_checkpoints_field legend .required")).to_be_visible()
    expect(page.locator("label[for=id_abort_criteria] .required")).to_be_visible()
    page.fill("#id_checkpoints-1-date", (start + timedelta(days=20)).isoformat())
    page.fill("#id_checkpoints-1-check", "held-out loss below 2.1")
    page.fill("#id_checkpoints-2-date", (start + timedelta(days=6)).isoformat())
    page.fill("#id_checkpoints-2-check", "global batch 4096 without divergence")
    page.fill("#id_abort_criteria", "loss diverges twice after a restart")
    shots(page, "contact")
    assert axe_violations(page, every_impact=True) == []
    submit(page)

    checkpoints = page.get_by_test_id("checkpoints").locator("li")
    expect(checkpoints).to_have_count(2)
    expect(checkpoints.first).to_contain_text("global batch 4096")  # in date order
    shots(page, "review")
    submit(page, "form.actions button[type=submit]")

    order = Order.objects.get()
    assert page.url.endswith(f"/{language}/orders/{order.reference}/{order.secret}/")
    section = page.get_by_test_id("campaign")
    expect(section.locator("h2")).to_have_text(HEADING[language])
    expect(section.get_by_test_id("checkpoint")).to_have_count(2)
    expect(section.get_by_test_id("abort-criteria")).to_contain_text("diverges twice")
    shots(page, "order")

    # Days later: the window runs and the first checkpoint's day has come.
    began = timezone.now() - timedelta(days=6)
    Order.objects.filter(pk=order.pk).update(
        status=Order.STATUS_ACTIVE, starts_at=began, ends_at=began + timedelta(days=30)
    )
    Checkpoint.objects.filter(order=order, position=1).update(
        due_on=timezone.now().astimezone(UTC).date()
    )
    page.reload()
    first = page.locator("#checkpoint-1")
    first.locator("input[name=outcome][value=adjust]").check()
    first.locator("textarea[name=note]").fill("raise the batch to 6144 instead")
    english_desktop = (language, viewport) == ("en", WIDE)
    shots(page, "outcome-form", doc="campaign-checkpoint" if english_desktop else None)
    assert axe_violations(page, every_impact=True) == []
    with page.expect_navigation():
        first.locator("button[type=submit]").click()
    expect(page.locator("#checkpoint-1").get_by_test_id("outcome")).to_contain_text(
        "raise the batch to 6144"
    )
    expect(page.locator("#checkpoint-2 form")).to_have_count(0)  # its day has not come
    shots(page, "outcome-recorded")
    assert axe_violations(page, every_impact=True) == []
    checkpoint = Checkpoint.objects.get(order=order, position=1)
    assert (checkpoint.outcome, checkpoint.outcome_note) == (
        "adjust",
        "raise the batch to 6144 instead",
    )
    context.close()
