"""The one-statement placement agrees with the catalogue and availability rules."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction

from reservations.availability import free_lots
from reservations.errors import BookingRefused, LotUnavailable
from reservations.models import Environment, HardwareKind, Hold, Host, Lot, Order, Price
from reservations.services import place_order
from reservations.validation import catalogue_refusals
from tests.conftest import Inventory, RequestFactory

pytestmark = pytest.mark.django_db


def test_it_takes_exactly_the_lots_free_lots_lists_first(
    inventory: Inventory, make_request: RequestFactory, soon: datetime
) -> None:
    host = Host.objects.create(name="wide-h200", kind=inventory.h200, address="127.0.0.1")
    for i in range(6):
        Lot.objects.create(host=host, gpu_a=2 * i, gpu_b=2 * i + 1)
    Lot.objects.filter(host=host, gpu_a=2).update(status=Lot.Status.MAINTENANCE)
    place_order(make_request(lot_count=3, window_days=3))
    released = place_order(
        make_request(lot_count=1, window_days=3, starts_at=soon + timedelta(days=1))
    )
    Order.objects.filter(pk=released.pk).update(status=Order.STATUS_CANCELLED)
    released.holds.update(status=Hold.Status.RELEASED, released_at=soon)

    for offset_days, count in [(1, 2), (2, 1), (5, 3), (1, 1)]:
        starts_at = soon + timedelta(days=offset_days)
        expected = [lot.pk for lot in free_lots(inventory.h200, starts_at, 3)[:count]]
        order = place_order(make_request(lot_count=count, window_days=3, starts_at=starts_at))
        assert sorted(h.lot_id for h in order.holds.all()) == expected


@pytest.mark.parametrize(
    ("change", "field", "code"),
    [
        (
            lambda: HardwareKind.objects.filter(slug="h200").update(is_offered=False),
            "kind",
            "unknown_kind",
        ),
        (
            lambda: Price.objects.filter(kind__slug="h200", window_days=7).delete(),
            "window_days",
            "no_price",
        ),
        (
            lambda: Environment.objects.filter(slug="pytorch-2.9-cuda-12.8").update(
                is_offered=False
            ),
            "environment",
            "unknown_environment",
        ),
        (
            lambda: Environment.objects.get(slug="pytorch-2.9-cuda-12.8").compatible_kinds.clear(),
            "environment",
            "incompatible_environment",
        ),
    ],
)
def test_it_refuses_exactly_what_the_catalogue_refuses(
    inventory: Inventory, make_request: RequestFactory, change: object, field: str, code: str
) -> None:
    request = make_request()
    assert catalogue_refusals(request) == {}
    change()  # type: ignore[operator]
    refusals = catalogue_refusals(request)
    assert [e.code for e in refusals[field]] == [code]
    with pytest.raises(BookingRefused) as info:
        place_order(request)
    assert [e.code for e in info.value.error_dict[field]] == [code]
    assert Order.objects.count() == 0


def test_the_price_is_read_when_the_order_is_placed(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    Price.objects.filter(kind=inventory.h200, window_days=7).update(amount_usd=Decimal("999.99"))
    order = place_order(make_request(lot_count=2))
    assert (order.unit_price_usd, order.total_usd) == (Decimal("999.99"), Decimal("1999.98"))
    stored = Order.objects.get(pk=order.pk)
    assert (stored.unit_price_usd, stored.total_usd, stored.kind_id) == (
        Decimal("999.99"),
        Decimal("1999.98"),
        inventory.h200.pk,
    )


def test_inside_a_callers_transaction_a_refusal_leaves_it_usable(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    with transaction.atomic():
        first = place_order(make_request(kind="b200"))
        with pytest.raises(LotUnavailable):
            place_order(make_request(kind="b200"))
        assert Order.objects.filter(pk=first.pk).exists()  # the transaction still works
    assert Order.objects.count() == 1


def test_it_works_without_prepared_statements(
    inventory: Inventory, make_request: RequestFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    connection.ensure_connection()
    monkeypatch.setattr(connection.connection, "prepare_threshold", None)
    order = place_order(make_request(model_params_billion=None, organisation=""))
    assert Order.objects.get(pk=order.pk).model_params_billion is None
