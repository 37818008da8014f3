"""The operator's desk: every model editable or readable, actions through the services."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import User
from reservations.models import Hold, Order, OrderEvent
from reservations.services import place_order
from tests.conftest import Inventory, RequestFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator() -> User:
    return User.objects.create_superuser("operator@example.org", "a-long-operator-password")


@pytest.fixture
def desk(client: Client, operator: User) -> Client:
    client.force_login(operator)
    return client


@pytest.mark.parametrize(
    "model", ["hardwarekind", "price", "environment", "host", "lot", "order", "orderevent"]
)
def test_every_list_renders(
    desk: Client, inventory: Inventory, make_request: RequestFactory, model: str
) -> None:
    place_order(make_request())
    response = desk.get(reverse(f"admin:reservations_{model}_changelist"))
    assert response.status_code == 200


def test_the_catalogue_is_editable(desk: Client, inventory: Inventory) -> None:
    for name, obj in [
        ("hardwarekind", inventory.h200),
        ("host", inventory.h200_lots[0].host),
        ("lot", inventory.h200_lots[0]),
    ]:
        response = desk.get(reverse(f"admin:reservations_{name}_change", args=[obj.pk]))
        assert response.status_code == 200
        assert b'type="submit"' in response.content


def test_an_order_shows_its_holds_keys_and_history_read_only(
    desk: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request(contact_name="<b>Mallory</b>"))
    response = desk.get(reverse("admin:reservations_order_change", args=[order.pk]))
    html = response.content.decode()
    assert response.status_code == 200
    assert order.reference in html
    assert "&lt;b&gt;Mallory&lt;/b&gt;" in html
    assert "<b>Mallory</b>" not in html
    assert "SHA256:" in html
    assert "awaiting_payment" in html
    assert 'name="status"' not in html  # no bare status edits: services only
    assert 'name="_save"' not in html


def test_the_search_finds_an_order_by_reference_and_email(
    desk: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request(contact_email="grace@example.org"))
    url = reverse("admin:reservations_order_changelist")
    assert order.reference in desk.get(url, {"q": order.reference}).content.decode()
    assert order.reference in desk.get(url, {"q": "grace@"}).content.decode()


def test_cancel_asks_for_a_reason_then_calls_the_service(
    desk: Client, operator: User, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request())
    url = reverse("admin:reservations_order_changelist")
    selection = {"action": "cancel_orders", "_selected_action": [order.pk]}

    page = desk.post(url, selection)
    assert page.status_code == 200
    assert b"reason" in page.content
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_AWAITING_PAYMENT

    done = desk.post(url, {**selection, "reason": "researcher asked by mail"}, follow=True)
    assert done.status_code == 200
    order.refresh_from_db()
    assert order.status == Order.STATUS_CANCELLED
    assert order.holds.get().status == Hold.Status.RELEASED
    event = OrderEvent.objects.filter(order=order).last()
    assert event is not None
    assert (event.actor, event.reason) == (operator, "researcher asked by mail")


def test_a_researcher_account_cannot_open_the_desk(client: Client, inventory: Inventory) -> None:
    researcher = User.objects.create_user("ada@example.org", "another-long-password")
    client.force_login(researcher)
    response = client.get(reverse("admin:reservations_order_changelist"))
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]
