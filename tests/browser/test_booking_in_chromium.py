"""A researcher books in a real browser, in each language, on a desktop and on a phone;
axe-core finds no violation of any impact on the landing page, the three booking steps and
the order page (with its invoice and once paid)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone
from playwright.sync_api import Page, expect

from payments import scanning
from payments.models import Chain, Invoice
from reservations.models import Order
from tests.browser.conftest import Shots
from tests.browser.test_desk_in_chromium import axe_violations
from tests.conftest import PRIVATE_KEY, Payments, build_inventory, openssh_public_key

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

WORDS = {
    "en": {
        "book": "Book lots",
        "payment": "Payment",
        "total": "$2,260.00",
        "status": "awaiting payment",
    },
    "de": {
        "book": "Lose buchen",
        "payment": "Zahlung",
        "total": "2.260,00\u00a0$",
        "status": "wartet auf Zahlung",
    },
    "fr": {
        "book": "Réserver des lots",
        "payment": "Paiement",
        "total": "2\u00a0260,00\u00a0$",
        "status": "en attente de paiement",
    },
}


def start_date(days: int = 5) -> str:
    return (timezone.now().date() + timedelta(days=days)).isoformat()


def fill_plan(page: Page, lots: str = "2") -> None:
    page.check("input[name=kind][value=h200]")
    page.fill("#id_lot_count", lots)
    page.check("input[name=window_days][value='7']")
    page.fill("#id_start_date", start_date())
    page.select_option("#id_environment", "pytorch-2.9-cuda-12.8")
    page.check("input[name=hypothesis][value=shorter_step]")
    page.fill("#id_hypothesis_text", "Two H200 halve the step time of our 13B fine-tune.")
    page.fill("#id_model_params_billion", "13")
    page.select_option("#id_model_precision", "bf16")
    page.select_option("#id_model_workload", "training")


def fill_contact(page: Page, key: str) -> None:
    page.fill("#id_contact_name", "Ada <b>Lovelace</b>")
    page.fill("#id_contact_email", "ada@example.org")
    page.fill("#id_organisation", "Analytical Engines")
    page.fill("#id_ssh_public_keys", key)


def submit(page: Page, selector: str = "button.button[type=submit]") -> None:
    page.wait_for_load_state("networkidle")
    with page.expect_navigation():
        page.locator(selector).first.click()


@pytest.mark.parametrize("language", ["en", "de", "fr"])
def test_a_researcher_books_end_to_end(
    page: Page, live_server: Any, shots: Shots, eager_tasks: None, language: str
) -> None:
    build_inventory()
    words = WORDS[language]
    page.goto(f"{live_server.url}/{language}/")
    expect(page.locator("html")).to_have_attribute("lang", language)
    shots(page, "landing", doc="landing" if language == "en" else None)
    assert axe_violations(page, every_impact=True) == [], "landing"
    page.get_by_role("link", name=words["book"]).first.click()

    fill_plan(page)
    expect(page.get_by_test_id("total")).to_have_text(words["total"])  # live, no reload
    expect(page.locator(".advice tr.recommended")).to_contain_text("H200")
    shots(page, "plan", doc="booking-plan" if language == "en" else None)
    assert axe_violations(page, every_impact=True) == [], "plan"
    submit(page)

    fill_contact(page, openssh_public_key())
    shots(page, "contact")
    assert axe_violations(page, every_impact=True) == [], "contact"
    submit(page)

    expect(page.get_by_test_id("total")).to_have_text(words["total"])
    shots(page, "review")
    assert axe_violations(page, every_impact=True) == [], "review"
    submit(page, "form.actions button[type=submit]")

    order = Order.objects.get()
    assert page.url.endswith(f"/{language}/orders/{order.reference}/{order.secret}/")
    expect(page.locator("h1")).to_contain_text(order.reference)
    expect(page.get_by_test_id("status")).to_have_text(words["status"])
    expect(page.locator("#payment")).to_have_text(words["payment"])  # the payment panel
    expect(page.locator("main")).to_contain_text("Ada <b>Lovelace</b>")  # shown as text
    shots(page, "order")
    assert axe_violations(page, every_impact=True) == [], "order"
    assert (order.language, order.lot_count, order.kind.slug) == (language, 2, "h200")
    assert len(mail.outbox) == 1
    assert order.reference in mail.outbox[0].subject


def test_the_form_refuses_bad_input_with_visible_messages(
    page: Page, live_server: Any, shots: Shots
) -> None:
    build_inventory()
    page.goto(f"{live_server.url}/en/book/")
    page.fill("#id_lot_count", "0")
    page.fill("#id_start_date", (timezone.now().date() - timedelta(days=2)).isoformat())
    submit(page)
    expect(page.locator("#id_lot_count_errors")).to_contain_text("greater than or equal to 1")
    expect(page.locator("#id_kind_errors")).to_contain_text("This field is required.")
    expect(page.locator("#id_hypothesis_errors")).to_contain_text("This field is required.")
    expect(page.locator("#id_lot_count")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#id_lot_count")).to_have_value("0")  # what was typed stays
    shots(page, "plan-errors")

    fill_plan(page, lots="1")
    submit(page)
    fill_contact(page, PRIVATE_KEY)
    page.fill("#id_contact_email", "not-an-address")
    submit(page)
    expect(page.locator("#id_ssh_public_keys_errors")).to_contain_text("This is a private key")
    expect(page.locator("#id_ssh_public_keys")).to_have_value("")  # never sent back
    expect(page.locator("#id_contact_email_errors")).to_be_visible()
    expect(page.locator("#id_contact_name")).to_have_value("Ada <b>Lovelace</b>")
    shots(page, "contact-errors")
    assert Order.objects.count() == 0


def test_the_api_docs_and_the_desk_run_under_the_content_security_policy(
    page: Page, live_server: Any, shots: Shots
) -> None:
    """Swagger UI and Django's admin, the two pages this project did not write, load and
    work with the policy on (the page fixture fails the test on any violation)."""
    page.goto(f"{live_server.url}/api/v1/docs/")
    expect(page.locator(".swagger-ui .title").first).to_contain_text("GPU lots API")
    expect(page.locator(".opblock").first).to_be_visible()
    shots(page, "api-docs")
    from accounts.models import User

    User.objects.create_superuser("op@example.org", "a-long-password-1")
    page.goto(f"{live_server.url}/admin/")
    page.fill("#id_username", "op@example.org")
    page.fill("#id_password", "a-long-password-1")
    submit(page, "input[type=submit]")
    build_inventory()
    page.goto(f"{live_server.url}/admin/reservations/host/add/")
    expect(page.locator("#content h1")).to_be_visible()
    shots(page, "desk")


def test_the_pages_work_at_a_phones_width(phone: Page, live_server: Any, shots: Shots) -> None:
    build_inventory()
    for path in ("/fr/", "/fr/book/"):
        phone.goto(f"{live_server.url}{path}")
        overflow = phone.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} scrolls sideways by {overflow}px"
        shots(phone, path.strip("/").replace("/", "-"))
        assert axe_violations(phone, every_impact=True) == [], path
    fill_plan(phone)
    expect(phone.get_by_test_id("total")).to_have_text(WORDS["fr"]["total"])
    submit(phone)
    fill_contact(phone, openssh_public_key())
    submit(phone)
    submit(phone, "form.actions button[type=submit]")
    expect(phone.locator("#payment")).to_have_text(WORDS["fr"]["payment"])
    assert phone.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    shots(phone, "order")
    assert axe_violations(phone, every_impact=True) == [], "order"
    assert Order.objects.count() == 1


def test_the_booking_form_is_usable_from_the_keyboard(
    page: Page, live_server: Any, shots: Shots
) -> None:
    build_inventory()
    page.goto(f"{live_server.url}/en/book/")
    page.focus("input[name=kind][value=b200]")
    page.keyboard.press("ArrowDown")  # radio groups move with the arrow keys
    expect(page.locator("input[name=kind][value=h200]")).to_be_checked()
    page.keyboard.press("Tab")
    expect(page.locator("#id_lot_count")).to_be_focused()
    focus_ring = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert focus_ring != "none"
    shots(page, "keyboard")


def test_a_researcher_pays_and_watches_it_settle_without_reloading(
    page: Page, live_server: Any, shots: Shots, committed_payments: Payments
) -> None:
    build_inventory()
    page.goto(f"{live_server.url}/de/book/")
    fill_plan(page, lots="1")
    submit(page)
    fill_contact(page, openssh_public_key())
    submit(page)
    submit(page, "form.actions button[type=submit]")

    page.get_by_role("button", name="USDC · Local dev chain (anvil)").click()
    page.wait_for_load_state()
    order = Order.objects.get()
    invoice = Invoice.objects.get(order=order)
    expect(page.get_by_test_id("address")).to_have_text(invoice.deposit_address.address)
    expect(page.get_by_test_id("amount")).to_have_text("1130")
    expect(page.locator(".qr svg")).to_be_visible()
    shots(page, "invoice")
    assert axe_violations(page, every_impact=True) == [], "invoice"

    tx = committed_payments.dev.pay_invoice(invoice)
    page.fill("#id_tx_hash", tx)
    page.get_by_role("button", name="Ich habe bezahlt").click()
    page.wait_for_load_state()
    expect(page.get_by_test_id("claim")).to_be_visible()
    page.evaluate("window.stillTheSamePage = true")

    scan = Chain.objects.get(pk=committed_payments.chain.pk)
    scanning.scan_chain(scan)
    expect(page.get_by_test_id("payment-status")).to_contain_text("1 von 2", timeout=15_000)
    shots(page, "seen")
    committed_payments.dev.mine(1)
    scanning.scan_chain(Chain.objects.get(pk=scan.pk))
    expect(page.get_by_test_id("payment-status")).to_contain_text("beglichen", timeout=15_000)
    assert page.evaluate("window.stillTheSamePage") is True  # updated in place
    shots(page, "settled")
    assert axe_violations(page, every_impact=True) == [], "settled"
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_PAID


@pytest.mark.parametrize(("language", "device"), [("en", "page"), ("de", "phone")])
def test_a_guest_confirms_the_address_from_the_mail_and_keeps_the_lots(
    request: pytest.FixtureRequest,
    live_server: Any,
    shots: Shots,
    eager_tasks: None,
    language: str,
    device: str,
) -> None:
    from django.conf import settings

    browser_page: Page = request.getfixturevalue(device)
    build_inventory()
    browser_page.goto(f"{live_server.url}/{language}/book/")
    fill_plan(browser_page)
    submit(browser_page)
    fill_contact(browser_page, openssh_public_key())
    submit(browser_page)
    submit(browser_page, "form.actions button[type=submit]")
    order = Order.objects.get()
    notice = browser_page.get_by_test_id("unconfirmed")
    expect(notice).to_contain_text("ada@example.org")
    shots(browser_page, "order-unconfirmed")
    assert order.hold_expires_at <= timezone.now() + settings.RESERVATION_UNCONFIRMED_HOLD

    (message,) = mail.outbox
    link = next(line for line in message.body.splitlines() if "/confirm/" in line).strip()
    assert link.startswith(settings.SITE_URL)
    browser_page.goto(live_server.url + link.removeprefix(settings.SITE_URL))
    expect(browser_page.locator("h1")).to_be_visible()
    shots(browser_page, "confirm")
    submit(browser_page)
    expect(browser_page.locator("main")).to_contain_text(order.reference)
    expect(browser_page.get_by_test_id("unconfirmed")).to_have_count(0)
    shots(browser_page, "order-confirmed")
    order.refresh_from_db()
    assert order.contact_confirmed_at is not None
    assert order.hold_expires_at == order.created_at + settings.RESERVATION_HOLD_DURATION
