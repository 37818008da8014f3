"""Choosing in a real browser (issue 14, items 5 and 6): a full date offers its earliest
start and the other kinds free then, each one click away; the environments follow the
chosen kind; on a phone the price comes before "Continue"; a language switch keeps what was
typed; the window is shown in the reader's own time zone beside UTC; axe-core finds no
violation of any impact."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone, translation
from playwright.sync_api import Browser, Page, expect

from reservations import availability
from reservations.links import order_url
from reservations.services import place_order
from tests.browser.conftest import DESKTOP, PHONE, Shots
from tests.browser.test_desk_in_chromium import AXE, axe_violations
from tests.conftest import RequestFactory, build_inventory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]


def day(days: int) -> str:
    return (timezone.now().date() + timedelta(days=days)).isoformat()


def open_page(browser: Browser, viewport: dict[str, int], **options: Any) -> Page:
    # axe is injected as a script: the test's context lets it past the site's CSP.
    context = browser.new_context(viewport=viewport, bypass_csp=True, **options)  # type: ignore[arg-type]
    page = context.new_page()
    page.set_default_timeout(15_000)
    return page


@pytest.mark.parametrize("language", ["en", "de", "fr"])
def test_a_full_date_offers_its_earliest_start_and_the_kinds_free_then(
    browser: Browser,
    live_server: Any,
    shots: Shots,
    make_request: RequestFactory,
    language: str,
) -> None:
    assert AXE.exists(), "axe-core is missing: run `npm ci` (make install does)"
    inventory = build_inventory()
    starts = availability.handover(timezone.now().date() + timedelta(days=5))
    for _ in inventory.h200_lots:
        place_order(make_request(kind="h200", window_days=7, starts_at=starts))
    page = open_page(browser, DESKTOP)
    page.goto(f"{live_server.url}/{language}/book/")
    page.check("input[name=kind][value=h200]")
    page.check("input[name=window_days][value='7']")
    page.fill("#id_start_date", starts.date().isoformat())
    use = page.get_by_test_id("use-start")
    expect(use).to_be_visible()
    expect(page.get_by_test_id("alternatives")).to_contain_text("B200")
    shots(page, "full-date")
    assert axe_violations(page, every_impact=True) == []

    earliest = use.get_attribute("value")
    use.click()
    expect(page.locator("#id_start_date")).to_have_value(earliest or "")
    expect(page.get_by_test_id("availability")).to_have_class("ok")
    assert page.is_checked("input[name=kind][value=h200]")

    # Back on the full date: switch to the AMD lot free then; the environment follows.
    page.fill("#id_start_date", starts.date().isoformat())
    page.locator('[data-switch-kind="mi300x"]').click()
    expect(page.locator("input[name=kind][value=mi300x]")).to_be_checked()
    expect(page.locator("#id_environment")).to_have_value("pytorch-2.9-rocm-6.4")
    cuda = page.locator('#id_environment option[value="pytorch-2.9-cuda-12.8"]')
    expect(cuda).to_be_disabled()
    expect(page.get_by_test_id("availability")).to_have_class("ok")
    shots(page, "switched")
    assert axe_violations(page, every_impact=True) == []

    # The calendar of free start dates: a free day is one click away.
    free_day = page.locator('[data-testid="calendar"] button.day.free').last
    chosen = free_day.get_attribute("value") or ""
    free_day.click()
    expect(page.locator("#id_start_date")).to_have_value(chosen)
    current = page.locator('[data-testid="calendar"] [aria-current="date"]')
    expect(current).to_contain_text(str(int(chosen[-2:])))  # the new quote marks it
    expect(current).to_have_count(1)
    shots(page, "calendar-day")
    page.context.close()


def test_on_a_phone_the_price_comes_before_continue_and_a_language_switch_keeps_the_entries(
    browser: Browser, live_server: Any, shots: Shots
) -> None:
    build_inventory()
    page = open_page(browser, PHONE, is_mobile=True, has_touch=True)
    page.goto(f"{live_server.url}/en/book/")
    page.check("input[name=kind][value=h200]")
    page.fill("#id_lot_count", "2")
    page.check("input[name=window_days][value='7']")
    page.fill("#id_start_date", day(6))
    page.check("input[name=hypothesis][value=bigger_batch]")
    page.fill("#id_hypothesis_text", "Twice the batch at the same step time.")
    expect(page.get_by_test_id("per-gpu-hour")).to_contain_text("per GPU-hour")
    price = page.locator("#quote").bounding_box()
    go_on = page.locator(".actions button[type=submit]").bounding_box()
    assert price is not None
    assert go_on is not None
    assert price["y"] < go_on["y"], "the price comes after Continue on a phone"
    shots(page, "phone-plan")
    assert axe_violations(page, every_impact=True) == []

    page.click("nav.languages a[lang=de]")
    page.wait_for_url("**/de/book/")
    expect(page.locator("#id_lot_count")).to_have_value("2")
    expect(page.locator("#id_start_date")).to_have_value(day(6))
    expect(page.locator("input[name=hypothesis][value=bigger_batch]")).to_be_checked()
    expect(page.locator("#id_hypothesis_text")).to_have_value(
        "Twice the batch at the same step time."
    )
    expect(page.get_by_test_id("per-gpu-hour")).to_contain_text("pro GPU-Stunde")
    shots(page, "phone-plan-de")
    page.context.close()


@pytest.mark.parametrize("language", ["en", "fr"])
def test_the_order_page_gives_the_window_in_the_readers_time_too(
    browser: Browser, live_server: Any, make_request: RequestFactory, language: str
) -> None:
    build_inventory()
    order = place_order(make_request(kind="h200", window_days=3))
    page = open_page(browser, DESKTOP, timezone_id="Europe/Berlin", locale=language)
    with translation.override(language):
        page.goto(f"{live_server.url}{order_url(order)}")
    local = page.get_by_test_id("local-time")
    expect(local).to_be_visible()
    expect(local).to_contain_text({"en": "Your time", "fr": "Votre heure"}[language])
    berlin = order.starts_at.astimezone(ZoneInfo("Europe/Berlin"))
    hour = berlin.strftime("%H:%M") if language == "fr" else berlin.strftime("%-I:%M")
    assert berlin.utcoffset() != timedelta(0)
    expect(local).to_contain_text(hour)
    # The zone by its name, as every other local time of the order page gives it (not
    # "GMT+1" here and "Europe/Berlin" there).
    expect(local).to_contain_text("(Europe/Berlin)")
    assert "GMT" not in local.inner_text()
    assert "(UTC)" in page.inner_text("main")  # the UTC time stays
    page.context.close()


@pytest.mark.parametrize(("language", "viewport"), [("en", DESKTOP), ("de", PHONE)])
def test_the_advisor_says_what_would_fit_and_switches_to_what_it_recommends(
    browser: Browser, live_server: Any, shots: Shots, language: str, viewport: dict[str, int]
) -> None:
    build_inventory()
    page = open_page(browser, viewport)
    page.goto(f"{live_server.url}/{language}/book/")
    page.check("input[name=kind][value=b200]")
    page.check("input[name=window_days][value='7']")
    page.fill("#id_start_date", day(6))
    # 70B trained in bf16 fits no lot: the advisor says what would.
    page.fill("#id_model_params_billion", "70")
    page.select_option("#id_model_precision", "bf16")
    page.select_option("#id_model_workload", "training")
    ideas = page.get_by_test_id("suggestions")
    expect(ideas).to_contain_text("QLoRA")
    expect(ideas).to_contain_text("LoRA")
    shots(page, "suggestions")
    assert axe_violations(page, every_impact=True) == []

    # 7B inference with a long context: it fits one card of each kind; the H200 is
    # recommended (the CUDA environment runs there, it is free, and the cheapest CUDA card).
    page.fill("#id_model_params_billion", "7")
    page.select_option("#id_model_workload", "inference")
    page.fill("#id_model_seq_len", "16384")
    page.fill("#id_model_micro_batch", "4")
    reasons = page.get_by_test_id("reasons")
    expect(reasons).to_be_visible()
    expect(page.locator(".advice tr.recommended")).to_contain_text("H200")
    page.get_by_test_id("switch-recommended").click()
    expect(page.locator("input[name=kind][value=h200]")).to_be_checked()
    expect(page.get_by_test_id("switch-recommended")).to_have_count(0)  # now the chosen one
    shots(page, "recommended")
    assert axe_violations(page, every_impact=True) == []
    page.context.close()
