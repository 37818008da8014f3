"""One date format per language, written as the language writes it (issue 14, item 6): the
French first of the month is "1er", the other days plain; "My orders" uses the same date
format as the other pages; a mail says "1 lot of 2× NVIDIA H200", not "1 × 2× …"."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone, translation
from django.utils.formats import date_format

from accounts.models import User
from reservations import notifications
from reservations.services import place_order
from tests.conftest import Inventory, RequestFactory


@pytest.mark.parametrize(
    ("language", "first", "second", "moment"),
    [
        ("fr", "1er décembre 2026", "2 décembre 2026", "1er décembre 2026 12:00"),
        ("de", "1. Dezember 2026", "2. Dezember 2026", "1. Dezember 2026 12:00"),
        ("en", "Dec. 1, 2026", "Dec. 2, 2026", "Dec. 1, 2026, noon"),
    ],
)
def test_the_first_of_the_month_is_written_as_the_language_writes_it(
    language: str, first: str, second: str, moment: str
) -> None:
    with translation.override(language):
        assert date_format(date(2026, 12, 1), "DATE_FORMAT") == first
        assert date_format(date(2026, 12, 2), "DATE_FORMAT") == second
        noon = datetime(2026, 12, 1, 12, tzinfo=ZoneInfo("UTC"))
        assert date_format(noon, "DATETIME_FORMAT") == moment
        assert date_format(date(2026, 12, 21), "jS") == ("21" if language == "fr" else "21st")


@pytest.mark.django_db
def test_my_orders_write_dates_as_the_other_pages_do(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    user = User.objects.create_user("ada@example.org")
    order = place_order(make_request(starts_at=timezone.now() + timedelta(days=3)))
    order.user = user
    order.save(update_fields=["user"])
    client.force_login(user)
    html = client.get("/en/account/orders/").content.decode()
    assert date_format(order.starts_at, "DATE_FORMAT") in html
    assert order.starts_at.strftime("%m/%d/%Y") not in html
    assert f"{order.lot_count} lot of {order.kind.name}" in html


@pytest.mark.django_db
def test_the_placed_mail_counts_lots_in_words(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request(lot_count=2, language="de"))
    assert notifications.send_order_placed_once(order.pk)
    (message,) = mail.outbox
    assert f"2 Lose mit {order.kind.name}" in message.body
    assert " × 2×" not in message.body


@pytest.mark.django_db
def test_french_pages_write_memory_in_go_as_their_prose_does(
    client: Client, inventory: Inventory
) -> None:
    html = client.get("/fr/").content.decode()
    assert "2× NVIDIA H200 141 Go" in html
    assert "141 GB" not in html
    book = client.get("/fr/book/").content.decode()
    assert "2× NVIDIA H200 141 Go · à partir de" in book
    assert "2× NVIDIA H200 141 GB" in client.get("/en/").content.decode()
