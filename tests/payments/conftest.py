"""Fixtures for the payment tests (the anvil ones live in tests/conftest.py)."""

from __future__ import annotations

import pytest

from reservations.models import Order
from reservations.services import place_order
from tests.conftest import RequestFactory, build_inventory


@pytest.fixture
def order(db: None, make_request: RequestFactory) -> Order:
    build_inventory()
    return place_order(make_request(lot_count=1, window_days=3))
