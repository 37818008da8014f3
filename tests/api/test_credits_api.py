"""The API's incidents and credits (issue 33): the order lists what failed, where it moved
and the credit; the researcher takes it as time once, a second choice is a 409 with its code,
bad input is a 400 that changes nothing, and another user's credit is a 404."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from accounts.models import User
from reservations.models import Credit, Order
from tests.api.test_api import get, post
from tests.api.test_extensions_api import paid_order
from tests.conftest import build_inventory
from tests.reservations.test_credit_page import credit_a_replacement

pytestmark = pytest.mark.django_db


def credited(reference: str) -> tuple[Order, Credit]:
    order = Order.objects.get(reference=reference)
    credit = credit_a_replacement(order, 6, summary="exit code 4", ssh="ssh -p 22 gl-x@203.0.113.7")
    return order, credit


def test_the_order_lists_its_incident_and_credit_and_takes_it_once(
    client: Client, ada: tuple[User, str]
) -> None:
    build_inventory()
    token = ada[1]
    reference = paid_order(client, token)
    order, credit = credited(reference)
    body: dict[str, Any] = get(client, f"/api/v1/orders/{reference}/", token).json()
    (incident,) = body["incidents"]
    assert incident["kind"] == "acceptance"
    assert incident["summary"] == "exit code 4"
    assert incident["replacement_ssh"] == ["ssh -p 22 gl-x@203.0.113.7"]
    assert incident["ended_at"] is not None
    (listed,) = body["credits"]
    assert (listed["id"], listed["status"], listed["seconds"], listed["hours"]) == (
        credit.pk,
        "offered",
        6 * 3600,
        "6.0",
    )

    path = f"/api/v1/orders/{reference}/credits/{credit.pk}/"
    bad = post(client, path, {"take": "both"}, token)
    assert bad.status_code == 400
    assert Credit.objects.get(pk=credit.pk).status == Credit.Status.OFFERED
    taken = post(client, path, {"take": "time"}, token)
    assert taken.status_code == 200, taken.json()
    assert taken.json()["status"] == "time"
    assert Order.objects.get(pk=order.pk).ends_at == order.ends_at + timedelta(hours=6)
    again = post(client, path, {"take": "money"}, token)
    assert again.status_code == 409
    assert again.json()["code"] == "credit_decided"


def test_another_users_credit_is_not_found(
    client: Client, ada: tuple[User, str], eve: tuple[User, str]
) -> None:
    build_inventory()
    reference = paid_order(client, ada[1])
    _order, credit = credited(reference)
    path = f"/api/v1/orders/{reference}/credits/{credit.pk}/"
    assert post(client, path, {"take": "money"}, eve[1]).status_code == 404
    assert Credit.objects.get(pk=credit.pk).status == Credit.Status.OFFERED
