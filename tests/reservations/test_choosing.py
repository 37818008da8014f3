"""The booking form helps choose (issue 14, item 5): the price per GPU-hour beside the price
per lot, the hardware choices with their lowest rate, only the environments that run on the
chosen kind, "start on the earliest free date instead" and the other kinds free on the
requested date, each one click away (and working without JavaScript)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from pages.forms import PlanForm
from reservations import availability
from reservations.quotes import per_gpu_hour, quote
from reservations.services import place_order
from tests.conftest import Inventory, RequestFactory

pytestmark = pytest.mark.django_db


def plan(**fields: object) -> dict[str, object]:
    return {
        "kind": "h200",
        "lot_count": 1,
        "window_days": 7,
        "start_date": (timezone.now().date() + timedelta(days=5)).isoformat(),
        "environment": "pytorch-2.9-cuda-12.8",
        "usage_mode": "distributed",
        "hypothesis": "shorter_step",
        **fields,
    }


def test_a_lot_costs_so_much_per_gpu_hour() -> None:
    assert per_gpu_hour(Decimal("1130.00"), 7) == Decimal("3.36")  # 1130 / (7 × 24 × 2)
    assert per_gpu_hour(Decimal("4320.00"), 30) == Decimal("3.00")


def test_the_quote_gives_the_rate_and_the_other_kinds_on_that_date(
    inventory: Inventory,
) -> None:
    day = timezone.now().date() + timedelta(days=5)
    found = quote(kind="h200", window_days=7, lot_count=1, start_date=day)
    assert found.per_gpu_hour_usd == Decimal("3.36")
    others = {alt.kind.slug: alt for alt in found.alternatives}
    assert set(others) == {"b200", "mi300x"}
    assert (others["b200"].free_lots, others["b200"].unit_price_usd) == (1, Decimal("1610.00"))
    assert others["mi300x"].per_gpu_hour_usd == Decimal("2.38")  # 800 / 336


def test_a_full_date_offers_the_earliest_start_and_the_kinds_free_then(
    inventory: Inventory, make_request: RequestFactory, client: Client
) -> None:
    starts = availability.handover(timezone.now().date() + timedelta(days=5))
    for _ in inventory.h200_lots:
        place_order(make_request(kind="h200", window_days=7, starts_at=starts))
    data = plan(start_date=starts.date().isoformat())
    html = client.post("/en/book/", {**data, "refresh": "1"}).content.decode()
    button = re.search(r'name="use_start" value="([0-9-]+)"', html)
    assert button is not None, "no 'start on … instead' button"
    assert 'data-switch-kind="b200"' in html  # the B200 lot is free on that date

    # Without JavaScript the button posts the form: the page comes back with that start.
    again = client.post("/en/book/", {**data, "use_start": button.group(1)})
    assert again.status_code == 200
    page = again.content.decode()
    assert f'value="{button.group(1)}"' in page
    assert "lots free for this window" in page or "lot free for this window" in page

    switched = client.post("/en/book/", {**data, "switch_kind": "b200"}).content.decode()
    assert re.search(r'value="b200"[^>]*checked|checked[^>]*value="b200"', switched)
    assert "1 lot free for this window." in switched


def test_the_hardware_choices_say_their_lowest_rate(inventory: Inventory) -> None:
    labels = dict(PlanForm().fields["kind"].choices)  # type: ignore[attr-defined]
    assert labels["h200"] == "2× NVIDIA H200 141 GB · from $3.00 per GPU-hour"  # 30 days


def test_only_the_environments_of_the_chosen_kind_are_offered(inventory: Inventory) -> None:
    html = str(PlanForm(initial={"kind": "h200"})["environment"])
    rocm = re.search(r"<option[^>]*pytorch-2\.9-rocm-6\.4[^>]*>", html)
    cuda = re.search(r"<option[^>]*pytorch-2\.9-cuda-12\.8[^>]*>", html)
    assert rocm is not None
    assert cuda is not None
    assert "disabled" in rocm.group(0)
    assert 'data-kinds="mi300x"' in rocm.group(0)
    assert "disabled" not in cuda.group(0)
    html = str(PlanForm(initial={"kind": "mi300x"})["environment"])
    cuda = re.search(r"<option[^>]*pytorch-2\.9-cuda-12\.8[^>]*>", html)
    assert cuda is not None
    assert "disabled" in cuda.group(0)

    form = PlanForm(data=plan(kind="h200", environment="pytorch-2.9-rocm-6.4"))
    assert not form.is_valid()  # the server refuses it, whatever the page did
    assert "environment" in form.errors


def test_the_landing_page_shows_the_rate_per_gpu_hour(inventory: Inventory, client: Client) -> None:
    html = client.get("/en/").content.decode()
    assert "$3.36 per GPU-hour" in html  # H200, 7 days
    assert 'class="scroll-hint"' in html
    assert "calendar shows the free start dates" in html  # the table is one window only


def test_the_calendar_marks_the_start_dates_with_enough_free_lots(
    inventory: Inventory, make_request: RequestFactory, client: Client
) -> None:
    from reservations.quotes import CALENDAR_DAYS

    starts = availability.handover(timezone.now().date() + timedelta(days=5))
    for _ in inventory.h200_lots:  # both H200 lots taken for 7 days from day 5
        place_order(make_request(kind="h200", window_days=7, starts_at=starts))
    found = quote(kind="h200", window_days=3, lot_count=1, start_date=None)
    days = [slot for week in found.calendar for slot in week if slot is not None]
    assert len(days) == CALENDAR_DAYS
    assert all(len(week) == 7 for week in found.calendar)
    assert found.calendar[0].index(days[0]) == days[0].day.weekday()  # weeks from Monday
    by_day = {slot.day: slot for slot in days}
    taken = starts.date()
    # A 3-day window (+ turnaround) must end before the booking starts, and start after it
    # (and its turnaround) ends.
    assert by_day[taken].free_lots == 0
    assert not by_day[taken].enough
    assert by_day[taken - timedelta(days=1)].free_lots == 0  # would run into the booking
    assert by_day[taken - timedelta(days=4)].enough
    assert by_day[taken + timedelta(days=8)].enough
    assert by_day[taken + timedelta(days=8)].free_lots == 2

    html = client.post("/en/book/", {**plan(window_days=3), "refresh": "1"}).content.decode()
    assert f'data-use-start="{(taken + timedelta(days=8)).isoformat()}"' in html
    assert f'data-use-start="{taken.isoformat()}"' not in html


@pytest.mark.parametrize(("hour", "first"), [(9, 0), (13, 1)])
def test_the_calendar_starts_today_while_todays_handover_is_ahead(
    inventory: Inventory, hour: int, first: int
) -> None:
    """Today is bookable until its handover (noon UTC): the calendar offers it until then."""
    now = datetime.combine(timezone.now().date(), time(hour=hour), tzinfo=UTC)
    found = quote(kind="h200", window_days=3, lot_count=1, start_date=None, now=now)
    days = [slot.day for week in found.calendar for slot in week if slot is not None]
    assert days[0] == now.date() + timedelta(days=first)


def test_the_local_demo_starts_todays_window_within_minutes_and_says_so(
    inventory: Inventory, client: Client, settings: Any
) -> None:
    settings.DEMO_MODE = True
    now = timezone.now()
    starts = availability.handover(now.date())
    assert now + timedelta(minutes=1) <= starts <= now + timedelta(minutes=6)
    assert starts.minute % 5 == 0
    assert starts.second == 0
    assert availability.handover(now.date() + timedelta(days=1)).hour == 12  # later days
    assert availability.first_bookable_day(now) == now.date()
    assert 'data-testid="demo-note"' in client.get("/en/").content.decode()
    settings.DEMO_MODE = False
    assert 'data-testid="demo-note"' not in client.get("/en/").content.decode()


def test_the_local_demo_is_refused_in_production_settings() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    environ = {**os.environ, "DEMO_MODE": "1", "DJANGO_SECRET_KEY": "x" * 50}
    environ.pop("DJANGO_DEBUG", None)
    done = subprocess.run(
        [sys.executable, "-c", "import config.settings"],
        cwd=Path(__file__).resolve().parents[2],
        env=environ,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert "DEMO_MODE=1 is the local demo's setting: it needs DJANGO_DEBUG=1" in done.stderr
