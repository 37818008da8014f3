"""``GET /api/v1/orders/{ref}/`` kept under the exact state of the rows it reads (issue 15):
a repeat costs the order's id and its state instead of the order, its checkpoints and its
early-end requests serialized anew; any change answers at once; another user still gets 404."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from django.test import Client

from accounts.models import User
from reservations.models import Order
from reservations.services import place_order
from tests.conftest import Inventory, RequestFactory

pytestmark = pytest.mark.django_db


def answer(client: Client, token: str, order: Order) -> Any:
    response = client.get(
        f"/api/v1/orders/{order.reference}/", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    return response


@pytest.fixture
def own_order(
    inventory: Inventory, make_request: RequestFactory, ada: tuple[User, str], soon: datetime
) -> Order:
    user, _token = ada
    return place_order(make_request(window_days=3), user=user)


def test_a_repeat_answer_skips_the_serializer_and_its_reads(
    client: Client, own_order: Order, ada: tuple[User, str], django_assert_num_queries: Any
) -> None:
    _user, token = ada
    first = answer(client, token, own_order)
    assert first.status_code == 200
    # The token, the order's id (the state: prepared, beside Django's counter).
    with django_assert_num_queries(2):
        second = answer(client, token, own_order)
    assert second.json() == first.json()


def test_a_change_answers_at_once(client: Client, own_order: Order, ada: tuple[User, str]) -> None:
    _user, token = ada
    assert answer(client, token, own_order).json()["status"] == "awaiting_payment"
    Order.objects.filter(pk=own_order.pk).update(status=Order.STATUS_CANCELLED)
    assert answer(client, token, own_order).json()["status"] == "cancelled"


def test_another_user_still_gets_404_after_the_owner_asked(
    client: Client, own_order: Order, ada: tuple[User, str], eve: tuple[User, str]
) -> None:
    assert answer(client, ada[1], own_order).status_code == 200
    refused = answer(client, eve[1], own_order)
    assert refused.status_code == 404
    assert own_order.reference not in refused.content.decode()


def test_the_token_and_user_read_in_one_prepared_statement_are_the_orms(
    ada: tuple[User, str],
) -> None:
    from rest_framework.test import APIRequestFactory

    from api.authentication import BearerTokenAuthentication
    from api.models import ApiToken

    _user, token = ada
    request = APIRequestFactory().get("/api/v1/orders/", HTTP_AUTHORIZATION=f"Bearer {token}")
    found = BearerTokenAuthentication().authenticate(request)
    assert found is not None
    read_user, record = found
    expected = ApiToken.objects.select_related("user").get(pk=record.pk)
    for model, read, fresh in ((ApiToken, record, expected), (User, read_user, expected.user)):
        for field in model._meta.concrete_fields:
            if field.attname == "last_used_at":
                continue  # set by this very request
            assert getattr(read, field.attname) == getattr(fresh, field.attname), field.name
            assert type(getattr(read, field.attname)) is type(getattr(fresh, field.attname))
