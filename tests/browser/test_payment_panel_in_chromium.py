"""The payment panel in Chromium after a partial payment: it asks for what is still due (the
amount, Copy, the QR code and "Open in wallet"), in English, German and French, at 1366 px
and on a phone (where it comes first), with no axe-core violation of any impact; its
refresh keeps the keyboard focus on Copy; without JavaScript there is no Copy button."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, expect

from payments import invoicing, scanning
from payments.models import Chain, Invoice
from reservations.models import Order
from reservations.services import place_order
from reservations.templatetags.money import units
from tests.browser.conftest import PHONE, Shots
from tests.browser.test_desk_in_chromium import AXE, WIDE, axe_violations
from tests.conftest import Payments, RequestFactory, build_inventory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

PARTLY_PAID = {
    "en": "Partly paid: {due} USDC still due.",
    "de": "Teilweise bezahlt: {due} USDC stehen noch aus.",
    "fr": "Payé en partie : {due} USDC restent dus.",
}
WALLET = {"en": "Open in wallet", "de": "In der Wallet öffnen", "fr": "Ouvrir dans le portefeuille"}
COPY = {"en": "Copy", "de": "Kopieren", "fr": "Copier"}


def partly_paid_order(
    payments: Payments, make_request: RequestFactory, share: Decimal, language: str = "en"
) -> tuple[Order, Invoice, int]:
    """An order whose USDC invoice received ``share`` of what is due (seen by the scanner):
    the order, its invoice and the base units still due."""
    build_inventory()
    order = place_order(make_request(lot_count=1, window_days=3, language=language))
    invoice = invoicing.create_invoice(order, payments.usdc)
    remaining = pay(payments, invoice, payments.usdc.from_units(invoice.amount_due) * share)
    return order, invoice, remaining


def pay(payments: Payments, invoice: Invoice, amount: Decimal) -> int:
    """Pays ``amount`` from the dev wallet, lets the scanner see it; the units still due."""
    payments.dev.pay_invoice(invoice, amount)
    scanning.scan_chain(Chain.objects.get(pk=payments.chain.pk))
    return int(Invoice.objects.get(pk=invoice.pk).amount_outstanding)


def wallet_uri(payments: Payments, invoice: Invoice, remaining: int) -> str:
    return (
        f"ethereum:{payments.usdc.contract_address}@{payments.chain.chain_id}/transfer"
        f"?address={invoice.deposit_address.address}&uint256={remaining}"
    )


def order_url(live_server: Any, order: Order, language: str) -> str:
    return f"{live_server.url}/{language}/orders/{order.reference}/{order.secret}/"


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1366px", "390px"])
@pytest.mark.parametrize("language", ["en", "de", "fr"])
def test_a_partly_paid_panel_asks_for_the_rest_and_passes_axe(
    browser: Browser,
    live_server: Any,
    shots: Shots,
    committed_payments: Payments,
    make_request: RequestFactory,
    language: str,
    viewport: dict[str, int],
) -> None:
    assert AXE.exists(), "axe-core is missing: run `npm ci` (make install does)"
    order, invoice, remaining = partly_paid_order(
        committed_payments, make_request, Decimal("0.4"), language
    )
    due = units(committed_payments.usdc.from_units(remaining))
    # axe is injected as a script: the test's context lets it past the page's CSP.
    context = browser.new_context(viewport=viewport, bypass_csp=True)  # type: ignore[arg-type]
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(order_url(live_server, order, language))

    expect(page.get_by_test_id("payment-status")).to_have_text(
        PARTLY_PAID[language].format(due=due)
    )
    expect(page.get_by_test_id("amount")).to_have_text(due)
    wallet = page.get_by_role("link", name=WALLET[language])
    expect(wallet).to_have_attribute("href", wallet_uri(committed_payments, invoice, remaining))
    expect(page.locator(".qr svg")).to_be_visible()
    expect(page.get_by_role("button", name=COPY[language])).to_have_count(2)  # revealed by JS
    expect(page.get_by_test_id("fee-note")).to_be_visible()
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the order page scrolls sideways by {overflow}px"
    panel = page.locator("#payment-panel").bounding_box()
    summary = page.locator("section.fields").bounding_box()
    assert panel is not None
    assert summary is not None
    if viewport == PHONE:
        # On a phone the panel comes before what was booked, within the first screens.
        assert panel["y"] < summary["y"]
        assert panel["y"] < 2 * PHONE["height"], f"the panel starts at {panel['y']}px"
    else:
        # On a desktop it stays beside the summary, on the right.
        assert panel["x"] > summary["x"] + summary["width"] - 1
        assert abs(panel["y"] - summary["y"]) < 100
    shots(page, f"top-{language}")
    page.locator("#payment-panel").scroll_into_view_if_needed()
    english_desktop = (language, viewport) == ("en", WIDE)
    shots(page, f"partly-paid-{language}", doc="payment-panel" if english_desktop else None)
    assert axe_violations(page, every_impact=True) == []
    context.close()


def test_a_refresh_keeps_the_focus_on_copy_and_the_time_left_ticks_in_seconds(
    browser: Browser,
    live_server: Any,
    shots: Shots,
    committed_payments: Payments,
    make_request: RequestFactory,
) -> None:
    order, invoice, remaining = partly_paid_order(committed_payments, make_request, Decimal("0.2"))
    # The last minutes of the invoice: the time left shows its seconds.
    Invoice.objects.filter(pk=invoice.pk).update(expires_at=timezone.now() + timedelta(minutes=4))
    context = browser.new_context(viewport=WIDE)  # type: ignore[arg-type]
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = context.new_page()
    page.set_default_timeout(15_000)
    violations: list[str] = []
    page.on(
        "console",
        lambda message: (
            violations.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    page.goto(order_url(live_server, order, "en"))
    usdc = committed_payments.usdc
    expect(page.get_by_test_id("amount")).to_have_text(units(usdc.from_units(remaining)))

    time_left = page.get_by_test_id("time-left")
    expect(time_left).to_have_text(
        re.compile(r"^[34] minutes?, \d{1,2} seconds?$|^\d{1,2} seconds?$")
    )
    first = time_left.inner_text()
    expect(time_left).not_to_have_text(first, timeout=3_000)  # it ticks

    copy = page.locator("button.copy[data-copy=pay-amount]")
    copy.focus()
    page.keyboard.press("Enter")
    expect(copy).to_have_attribute("data-copied", "true")
    expect(page.locator("[data-copy-status]")).to_have_text("Copied.")  # said, politely
    assert page.evaluate("navigator.clipboard.readText()") == units(usdc.from_units(remaining))
    page.evaluate("document.activeElement.testMarker = 'focused before the refresh'")

    # Another part arrives: the panel's next refresh asks for less, in place.
    more = pay(committed_payments, invoice, usdc.from_units(remaining) / 2)
    assert 0 < more < remaining
    expect(page.get_by_test_id("amount")).to_have_text(units(usdc.from_units(more)))
    expect(page.get_by_role("link", name="Open in wallet")).to_have_attribute(
        "href", wallet_uri(committed_payments, invoice, more)
    )
    expect(copy).to_be_focused()
    assert page.evaluate("document.activeElement.testMarker") == "focused before the refresh"
    expect(copy).to_be_visible()  # still revealed, still the same control
    expect(copy).not_to_have_attribute("data-copied", "true")  # what it copied is not due now
    page.keyboard.press("Enter")  # and it copies the new amount
    page.wait_for_function(
        "expected => navigator.clipboard.readText().then(text => text === expected)",
        arg=units(usdc.from_units(more)),
    )
    shots(page, "focus-kept-after-refresh")
    context.close()
    assert violations == [], "Content-Security-Policy violations"


def test_without_javascript_there_is_no_copy_button_and_the_values_are_text(
    browser: Browser,
    live_server: Any,
    shots: Shots,
    committed_payments: Payments,
    make_request: RequestFactory,
) -> None:
    order, invoice, remaining = partly_paid_order(committed_payments, make_request, Decimal("0.4"))
    context = browser.new_context(viewport=PHONE, java_script_enabled=False)  # type: ignore[arg-type]
    page = context.new_page()
    page.goto(order_url(live_server, order, "en"))
    expect(page.get_by_test_id("amount")).to_have_text(
        units(committed_payments.usdc.from_units(remaining))
    )
    expect(page.get_by_test_id("address")).to_have_text(invoice.deposit_address.address)
    assert page.locator("button.copy").count() == 2  # in the page, hidden
    expect(page.get_by_role("button", name="Copy")).to_have_count(0)
    assert page.locator("button.copy:visible").count() == 0
    expect(page.get_by_test_id("time-left")).to_have_text(re.compile(r"^\d+\s(hour|minute)"))
    expect(page.get_by_role("link", name="Open in wallet")).to_have_attribute(
        "href", wallet_uri(committed_payments, invoice, remaining)
    )
    shots(page, "no-javascript")
    context.close()


def test_before_a_coin_is_chosen_the_hold_counts_down_in_seconds(
    browser: Browser, live_server: Any, make_request: RequestFactory
) -> None:
    build_inventory()
    order = place_order(make_request(lot_count=1, window_days=3))
    Order.objects.filter(pk=order.pk).update(hold_expires_at=timezone.now() + timedelta(minutes=3))
    context = browser.new_context(viewport=PHONE)  # type: ignore[arg-type]
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(order_url(live_server, order, "en"))
    left = page.get_by_test_id("hold-left")
    expect(left).to_have_text(re.compile(r"^2 minutes, \d{1,2} seconds?$|^3 minutes$"))
    first = left.inner_text()
    expect(left).not_to_have_text(first, timeout=3_000)  # it ticks
    expect(page.get_by_test_id("hold")).to_contain_text("Your lots are held until")
    context.close()
