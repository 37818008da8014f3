"""The desk's lists in Chromium (issue 13, item 4): the order list, an order, the lots list,
a lot flagged for acceptance drift, the jobs list, the invoices and the holds pass axe-core
(critical and serious) at 1366 px and on a phone; at 1366 px no list is wider than the
window (the jobs list's long error stays in its cell)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction
from playwright.sync_api import Browser

from accounts.models import User
from provisioning.models import ProvisioningJob
from reservations.models import Lot
from reservations.services import mark_paid, place_order, system
from tests.browser.conftest import PHONE, Shots
from tests.browser.test_desk_in_chromium import AXE, WIDE, axe_violations, sign_in
from tests.conftest import RequestFactory
from tests.provisioning.test_fleet_health import measured, rented
from tests.provisioning.test_operator import approved_job
from tests.test_desk_lists import invoice_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1366px", "phone"])
def test_the_desks_lists_and_a_flagged_lot_pass_axe_and_fit_the_window(
    browser: Browser,
    live_server: Any,
    shots: Shots,
    make_request: RequestFactory,
    viewport: dict[str, int],
    settings: Any,
) -> None:
    assert AXE.exists(), "axe-core is missing: run `npm ci` (make install does)"
    settings.ACCEPTANCE_DRIFT_SHARE = 0.9
    job = approved_job(make_request)
    ProvisioningJob.objects.filter(pk=job.pk).update(report=measured(700, 4.1, 360))
    flagged = Lot.objects.filter(host__kind=job.lot.host.kind).exclude(pk=job.lot.pk).get()
    later = job.order.starts_at + (job.order.ends_at - job.order.starts_at)
    rented(make_request, flagged, measured(500, 4.1, 361), starts_at=later)
    ProvisioningJob.objects.filter(lot=flagged).update(
        status=ProvisioningJob.Status.FAILED,
        error="Traceback (most recent call last):\nOSError: /srv/" + "very-long-path/" * 40,
    )
    free = later + 4 * (job.order.ends_at - job.order.starts_at)  # after both rentals
    waiting = place_order(make_request(lot_count=1, window_days=3, starts_at=free))
    invoice_for(waiting)
    with transaction.atomic():
        paid = place_order(make_request(lot_count=1, window_days=7, starts_at=free))
        assert mark_paid(paid, actor=system("test"), reason="paid")
    User.objects.create_superuser("desk@example.org", "a-long-password-1")

    context = browser.new_context(viewport=viewport, bypass_csp=True)  # type: ignore[arg-type]
    page = context.new_page()
    page.set_default_timeout(15_000)
    sign_in(page, live_server.url)

    page.goto(f"{live_server.url}/admin/")
    assert str(flagged) in page.inner_text("#today-drift")
    page.click(f"#today-drift a[href$='/admin/reservations/lot/{flagged.pk}/change/']")
    page.wait_for_selector('[data-testid="lot-drift"]')
    assert "matrix product" in page.inner_text('[data-testid="lot-drift"]')
    shots(page, "flagged-lot")
    assert axe_violations(page) == []

    pages = {
        "orders": "/admin/reservations/order/",
        "order": f"/admin/reservations/order/{paid.pk}/change/",
        "lots": "/admin/reservations/lot/",
        "jobs": "/admin/provisioning/provisioningjob/",
        "invoices": "/admin/payments/invoice/",
        "holds": "/admin/reservations/hold/",
        "hosts": "/admin/reservations/host/",
    }
    for name, path in pages.items():
        page.goto(f"{live_server.url}{path}")
        shots(page, name)
        assert axe_violations(page) == [], name
        if viewport is WIDE and page.locator("#changelist .results").count():
            # The list's box scrolls sideways when its table is wider: it must not need to.
            width, shown = page.evaluate(
                "(box => [box.scrollWidth, box.clientWidth])"
                "(document.querySelector('#changelist .results'))"
            )
            assert width <= shown, f"{name}: the list is {width} px wide in {shown} px"
    page.goto(f"{live_server.url}/admin/reservations/order/?action=any")
    listed = page.inner_text("#result_list")
    assert paid.reference in listed  # approve
    assert ProvisioningJob.objects.get(lot=flagged).order.reference in listed  # failed job
    assert waiting.reference not in listed  # waits on the researcher
    context.close()
