"""Self-service on the order page in Chromium: the researcher replaces the SSH keys (a
PuTTY block, converted; a pasted private key refused and not shown again) and cancels an
unpaid order after ticking the confirmation, in English at 1366 px and on a 390 px phone,
in German and in French; axe-core finds no violation of any impact at any step."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from reservations.models import Order
from reservations.services import place_order
from reservations.ssh_keys import SSH2_END
from tests.browser.conftest import PHONE, Shots
from tests.browser.test_desk_in_chromium import AXE, WIDE, axe_violations
from tests.conftest import PRIVATE_KEY, RequestFactory, build_inventory, openssh_public_key

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

HEADINGS = {"en": "Change your order", "de": "Bestellung ändern", "fr": "Modifier votre commande"}
CANCELLED = {
    "en": "Your order is cancelled",
    "de": "Ihre Bestellung ist storniert",
    "fr": "Votre commande est annulée",
}


def putty_block(line: str, comment: str) -> str:
    body = "\n".join(textwrap.wrap(line.split()[1], 64))
    return "\n".join(["---- BEGIN SSH2 PUBLIC KEY ----", f'Comment: "{comment}"', body, SSH2_END])


def checked(page: Page, shots: Shots, name: str) -> None:
    shots(page, name)
    assert axe_violations(page, every_impact=True) == [], name


def no_horizontal_scroll(page: Page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"] + 1  # type: ignore[index]


@pytest.mark.parametrize(
    ("language", "viewport"),
    [("en", WIDE), ("en", PHONE), ("de", WIDE), ("fr", PHONE)],
    ids=["en-1366px", "en-390px", "de-1366px", "fr-390px"],
)
def test_keys_are_changed_and_the_order_cancelled_on_its_page(
    browser: Browser,
    live_server: Any,
    shots: Shots,
    make_request: RequestFactory,
    language: str,
    viewport: dict[str, int],
) -> None:
    assert AXE.exists(), "axe-core is missing: run `npm ci` (make install does)"
    build_inventory()
    order = place_order(make_request(language=language))
    url = f"{live_server.url}/{language}/orders/{order.reference}/{order.secret}/"
    # axe is injected as a script: the test's context lets it past the page's CSP.
    context = browser.new_context(viewport=viewport, bypass_csp=True)  # type: ignore[arg-type]
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(url)
    assert page.inner_text("#self-service") == HEADINGS[language]
    assert "mailto:help@localhost" in page.inner_html("footer.site")
    no_horizontal_scroll(page)
    checked(page, shots, "order-page")

    # A pasted private key: refused, said so, and not sent back into the field.
    keys = page.locator("form.ssh-keys textarea")
    keys.fill(PRIVATE_KEY)
    page.click("form.ssh-keys button[type=submit]")
    page.wait_for_selector("form.ssh-keys .field.invalid")
    assert keys.input_value() == ""
    assert "b3BlbnNzaC1rZXktdjE" not in page.content()
    assert keys.get_attribute("aria-invalid") == "true"
    checked(page, shots, "private-key-refused")

    # A PuTTY public key block: converted, saved, its fingerprint on the page.
    new = openssh_public_key("putty@lab")
    keys.fill(putty_block(new, "putty@lab"))
    page.click("form.ssh-keys button[type=submit]")
    page.wait_for_url(url + "?done=keys#self-service")
    assert page.locator("[data-testid=self-service-done]").is_visible()
    fingerprint = order.ssh_keys.get().fingerprint
    assert order.ssh_keys.get().public_key == new
    assert fingerprint in page.inner_text("main")
    assert page.locator("form.ssh-keys textarea").input_value().strip() == new
    no_horizontal_scroll(page)
    checked(page, shots, "keys-changed")

    # Cancelling asks for the confirmation first.
    page.fill("form.cancel textarea", "wrong dates")
    page.click("form.cancel button[type=submit]")
    page.wait_for_selector("form.cancel .field.invalid")
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_AWAITING_PAYMENT
    checked(page, shots, "cancel-needs-confirmation")
    page.check("form.cancel input[type=checkbox]")
    page.click("form.cancel button[type=submit]")
    page.wait_for_url(url + "?done=cancelled#self-service")
    assert CANCELLED[language] in page.inner_text("[data-testid=self-service-done]")
    assert page.locator("form.cancel").count() == 0
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_CANCELLED
    no_horizontal_scroll(page)
    checked(page, shots, "cancelled")
    context.close()
