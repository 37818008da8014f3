"""Extending from the order page, the extension's own page, and "book again"."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import transaction
from django.test import Client

from reservations.models import Order
from reservations.services import mark_paid, place_order, system
from tests.conftest import Inventory, RequestFactory


def page(order: Order) -> str:
    return f"/en/orders/{order.reference}/{order.secret}/"


def paid(make_request: RequestFactory, **fields: object) -> Order:
    order = place_order(make_request(window_days=3, **fields))
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="paid")
    return order


@pytest.mark.django_db
def test_the_researcher_extends_from_the_order_page_and_lands_on_the_extension_to_pay(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = paid(make_request)
    html = client.get(page(order)).content.decode()
    assert "Keep going on the same cards" in html
    for days in (3, 7, 30):
        assert f'data-testid="extend-{days}"' in html
    placed = client.post(page(order) + "extend/", {"days": "7"})
    assert placed.status_code == 302
    extension = Order.objects.get(extends=order)
    assert placed["Location"] == page(extension)
    html = client.get(page(extension)).content.decode()
    assert f"Extension of order {order.reference}" in html
    assert 'data-testid="extension-deadline"' in html
    assert "unpaid by then, this extension is released" in html
    assert 'id="payment"' in html  # its own payment panel
    # Back on the order's page: the extension is listed, and no second one is offered.
    again = client.get(page(order)).content.decode()
    assert extension.reference in again
    assert "already waits for its payment or approval" in again
    assert 'data-testid="extend-7"' not in again


@pytest.mark.django_db
def test_a_thirty_day_extension_without_its_plan_is_refused_and_nothing_is_held(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = paid(make_request)
    refused = client.post(page(order) + "extend/", {"days": "30"})
    assert refused.status_code == 400
    assert "A 30-day campaign needs defined checkpoints." in refused.content.decode()
    assert not Order.objects.filter(extends=order).exists()
    refused = client.post(page(order) + "extend/", {"days": "5"})
    assert refused.status_code == 400
    assert not Order.objects.filter(extends=order).exists()


@pytest.mark.django_db
def test_lots_booked_after_the_window_are_said_and_only_what_fits_is_offered(
    client: Client, inventory: Inventory, make_request: RequestFactory, soon: object
) -> None:
    order = paid(make_request)
    upper = order.holds.get().period.upper
    paid(make_request, starts_at=upper + timedelta(days=4), lot_count=2)
    html = client.get(page(order)).content.decode()
    assert 'data-testid="free-until"' in html
    assert 'value="3" data-testid="extend-3"' in html
    assert 'value="7" disabled' in html
    assert client.post(page(order) + "extend/", {"days": "7"}).status_code == 400
    assert not Order.objects.filter(extends=order).exists()
    # What does not fit here is offered as a new order where lots of the kind are free: the
    # booking form opens with that length and day.
    (elsewhere,) = re.findall(r'data-testid="elsewhere-7">([^<]*)<a href="([^"]+)"', html)
    assert "prepared afresh" in elsewhere[0]
    link = elsewhere[1].replace("&amp;", "&")
    assert link.startswith(page(order) + "again/?days=7&start=")
    day = link.rsplit("=", 1)[1]
    opened = client.get(link)
    assert opened.status_code == 302
    form = client.get(opened["Location"]).content.decode()
    checked = re.findall(r"<input[^>]*\bchecked\b[^>]*>", form)
    assert any('name="window_days"' in tag and 'value="7"' in tag for tag in checked), checked
    assert f'value="{day}"' in form


@pytest.mark.django_db
def test_book_again_opens_the_booking_form_with_the_orders_plan(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request(window_days=7, hypothesis_text="Halve the step."))
    Order.objects.filter(pk=order.pk).update(status=Order.STATUS_EXPIRED)
    html = client.get(page(order)).content.decode()
    assert 'data-testid="book-again"' in html
    opened = client.get(page(order) + "again/")
    assert opened.status_code == 302
    form = client.get(opened["Location"]).content.decode()
    assert "Halve the step." in form
    checked = re.findall(r"<input[^>]*\bchecked\b[^>]*>", form)
    assert any('name="kind"' in tag and 'value="h200"' in tag for tag in checked), checked
    assert any('name="window_days"' in tag and 'value="7"' in tag for tag in checked), checked
    contact = client.get("/en/book/contact/").content.decode()
    assert 'value="ada@example.org"' in contact
    assert "Ada Lovelace" in contact
