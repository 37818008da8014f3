"""Fixtures of the webhooks' tests: researchers, an operator, an order of ada's."""

from __future__ import annotations

import pytest

from accounts.models import User
from reservations.models import Order
from reservations.services import place_order
from tests.conftest import RequestFactory, build_inventory
from tests.webhooks.receiver import receiver  # noqa: F401  (the fixture)


@pytest.fixture
def researcher(db: None) -> User:
    return User.objects.create_user("ada@example.org")


@pytest.fixture
def other(db: None) -> User:
    return User.objects.create_user("eve@example.org")


@pytest.fixture
def operator(db: None) -> User:
    return User.objects.create_superuser("op@example.org", "a-long-password-1")


@pytest.fixture
def ada_order(researcher: User, make_request: RequestFactory) -> Order:
    build_inventory()
    return place_order(make_request(lot_count=1, window_days=3), user=researcher)
