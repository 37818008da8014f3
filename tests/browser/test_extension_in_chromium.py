"""Extending from the order page in Chromium, to "paid" on the dev chain: the researcher picks
7 more days, lands on the extension's page (its deadline said), pays its invoice from the
dev wallet, and the page says it is paid and awaits the operator. In English, German and
French, at 1366 px and on a phone, with no axe-core violation of any impact. The
documentation's screenshot of the offer is taken here."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import transaction
from playwright.sync_api import Browser, expect

from payments import invoicing, scanning
from payments.models import Chain
from reservations.models import Order
from reservations.services import mark_paid, place_order, system
from tests.browser.conftest import PHONE, Shots
from tests.browser.test_desk_in_chromium import AXE, WIDE, axe_violations
from tests.conftest import Payments, RequestFactory, build_inventory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

HEADING = {
    "en": "Keep going on the same cards",
    "de": "Auf denselben Karten weitermachen",
    "fr": "Continuer sur les mêmes cartes",
}
EXTENSION_OF = {
    "en": "Extension of order {}",
    "de": "Verlängerung der Bestellung {}",
    "fr": "Prolongation de la commande {}",
}
PAID = {
    "en": "Paid: the operator approves it next",
    "de": "Bezahlt: Als Nächstes gibt der Betreiber sie frei",
    "fr": "Payée : l'opérateur l'approuve ensuite",
}


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1366px", "390px"])
@pytest.mark.parametrize("language", ["en", "de", "fr"])
def test_a_researcher_extends_from_the_order_page_and_pays_the_extension(
    browser: Browser,
    live_server: Any,
    shots: Shots,
    committed_payments: Payments,
    make_request: RequestFactory,
    language: str,
    viewport: dict[str, int],
) -> None:
    assert AXE.exists(), "axe-core is missing: run `npm ci` (make install does)"
    build_inventory()
    order = place_order(make_request(lot_count=1, window_days=3, language=language))
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="paid")
    context = browser.new_context(viewport=viewport, bypass_csp=True)  # type: ignore[arg-type]
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(f"{live_server.url}/{language}/orders/{order.reference}/{order.secret}/")

    section = page.get_by_test_id("extend")
    expect(section.get_by_role("heading", name=HEADING[language])).to_be_visible()
    section.scroll_into_view_if_needed()
    assert axe_violations(page, every_impact=True) == []
    page.get_by_test_id("extend-7").check()
    desktop_english = (language, viewport) == ("en", WIDE)
    shots(page, f"offer-{language}", doc="extension-offer" if desktop_english else None)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the order page scrolls sideways by {overflow}px"
    page.locator(".extend-form button[type=submit]").click()

    extension = Order.objects.get(extends=order)
    # (the form's #extend stays on the URL across the redirect, as browsers keep a fragment)
    landed = f"{live_server.url}/{language}/orders/{extension.reference}/{extension.secret}/"
    expect(page).to_have_url(re.compile(re.escape(landed) + "(#extend)?$"))
    heading = EXTENSION_OF[language].format(order.reference)
    expect(page.get_by_role("heading", name=heading)).to_be_visible()
    expect(page.get_by_test_id("extension-deadline")).to_be_visible()
    assert axe_violations(page, every_impact=True) == []
    shots(page, f"extension-{language}")

    invoice = invoicing.create_invoice(extension, committed_payments.usdc)
    committed_payments.dev.pay_invoice(
        invoice, committed_payments.usdc.from_units(invoice.amount_due)
    )
    scanning.scan_chain(Chain.objects.get(pk=committed_payments.chain.pk))  # seen: 1 of 2
    committed_payments.dev.mine(1)
    scanning.scan_chain(Chain.objects.get(pk=committed_payments.chain.pk))  # confirmed
    assert Order.objects.get(pk=extension.pk).status == Order.STATUS_PAID
    page.reload()
    expect(page.get_by_test_id("extension-of")).to_contain_text(PAID[language])
    assert axe_violations(page, every_impact=True) == []
    shots(page, f"extension-paid-{language}")
    context.close()
