"""The API's extensions: what an order can be extended by, placing one once per key, the
refusals with their codes, and the extension in the order's representation."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import transaction
from django.test import Client

from accounts.models import User
from reservations.models import Order
from reservations.services import mark_paid, system
from tests.api.test_api import get, order_body, post
from tests.conftest import build_inventory


def paid_order(client: Client, token: str, **fields: Any) -> str:
    response = post(client, "/api/v1/orders/", order_body(window_days=3, **fields), token)
    assert response.status_code == 201, response.json()
    reference = response.json()["reference"]
    order = Order.objects.get(reference=reference)
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="paid")
    return str(reference)


@pytest.mark.django_db
def test_an_order_is_extended_once_per_key_and_lists_its_extension(
    client: Client, ada: tuple[User, str]
) -> None:
    build_inventory()
    token = ada[1]
    reference = paid_order(client, token)
    path = f"/api/v1/orders/{reference}/extensions/"
    offered = get(client, path, token).json()
    assert offered["refused"] == ""
    assert [(o["days"], o["fits"]) for o in offered["offers"]] == [
        (3, True),
        (7, True),
        (30, True),
    ]
    first = post(client, path, {"days": 7}, token, key="extend-1")
    assert first.status_code == 201, first.json()
    again = post(client, path, {"days": 7}, token, key="extend-1")
    assert again.json() == first.json()
    extension = first.json()
    assert (extension["extends"], extension["window_days"], extension["status"]) == (
        reference,
        7,
        "awaiting_payment",
    )
    assert Order.objects.filter(extends__reference=reference).count() == 1
    listed = get(client, f"/api/v1/orders/{reference}/", token).json()["extensions"]
    assert [(e["reference"], e["days"], e["status"]) for e in listed] == [
        (extension["reference"], 7, "awaiting_payment")
    ]
    assert listed[0]["pay_by"] == extension["hold_expires_at"]
    reused = post(client, path, {"days": 3}, token, key="extend-1")
    assert (reused.status_code, reused.json()["code"]) == (422, "idempotency_key_reused")
    pending = post(client, path, {"days": 3}, token)
    assert (pending.status_code, pending.json()["code"]) == (409, "extension_pending")
    assert get(client, path, token).json()["refused"] == "extension_pending"


@pytest.mark.django_db
def test_extending_is_refused_with_stable_codes(
    client: Client, ada: tuple[User, str], eve: tuple[User, str]
) -> None:
    build_inventory()
    unpaid = post(client, "/api/v1/orders/", order_body(window_days=3), ada[1]).json()
    path = f"/api/v1/orders/{unpaid['reference']}/extensions/"
    refused = post(client, path, {"days": 3}, ada[1])
    assert (refused.status_code, refused.json()["code"]) == (409, "not_extendable")
    bad = post(client, path, {"days": 5}, ada[1])
    assert bad.status_code == 400
    assert bad.json()["fields"]["days"][0]["code"] == "invalid_choice"
    # Someone else's order is not found, and nothing is held for it.
    assert post(client, path, {"days": 3}, eve[1]).status_code == 404
    # Both lots booked right after the window: the lots are not free, and until when.
    reference = paid_order(client, ada[1])
    order = Order.objects.get(reference=reference)
    starts = order.holds.get().period.upper + timedelta(days=3)
    body = order_body(window_days=3, lot_count=2, starts_at=starts.isoformat())
    assert post(client, "/api/v1/orders/", body, ada[1]).status_code == 201
    taken = post(client, f"/api/v1/orders/{reference}/extensions/", {"days": 7}, ada[1])
    assert (taken.status_code, taken.json()["code"]) == (409, "lots_not_free_until")
    assert taken.json()["free_until"]
    # What fits, and for what does not, the earliest start of a new order instead.
    offered = get(client, f"/api/v1/orders/{reference}/extensions/", ada[1]).json()
    elsewhere = {o["days"]: o["elsewhere_from"] for o in offered["offers"]}
    assert elsewhere[3] is None
    assert elsewhere[7] is not None
    assert datetime.fromisoformat(elsewhere[7]) >= starts + timedelta(days=3)
    assert not Order.objects.filter(extends=order).exists()
