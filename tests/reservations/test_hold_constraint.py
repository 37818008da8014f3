"""The database itself refuses to give one lot to two overlapping windows."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange  # type: ignore[import-untyped]

from reservations.errors import LotUnavailable
from reservations.models import Hold, Order
from reservations.services import place_order
from tests.concurrency import at_once
from tests.conftest import Inventory, RequestFactory


def span(start: datetime, days: float) -> DateTimeTZRange:
    return DateTimeTZRange(start, start + timedelta(days=days), "[)")


@pytest.mark.django_db
def test_the_database_refuses_overlapping_holds_on_one_lot(
    inventory: Inventory, make_request: RequestFactory, soon: datetime
) -> None:
    order = place_order(make_request())
    lot = order.holds.get().lot
    with pytest.raises(IntegrityError, match="hold_no_overlap_per_lot"), transaction.atomic():
        Hold.objects.create(order=order, lot=lot, period=span(soon + timedelta(days=3), 1))


@pytest.mark.django_db
def test_raw_sql_cannot_bypass_the_constraint(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request())
    hold = order.holds.get()
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO reservations_hold (order_id, lot_id, period, status, created_at) "
            "SELECT order_id, lot_id, period, 'booked', now() FROM reservations_hold WHERE id = %s",
            [hold.pk],
        )


@pytest.mark.django_db
def test_the_turnaround_buffer_separates_bookings_of_one_lot(
    inventory: Inventory, make_request: RequestFactory, settings: object
) -> None:
    first = place_order(make_request(kind="b200", window_days=3))
    # Right after the window, inside the 6-hour turnaround: refused.
    with pytest.raises(LotUnavailable) as info:
        place_order(make_request(kind="b200", window_days=3, starts_at=first.ends_at))
    assert info.value.next_start == first.ends_at + timedelta(hours=6)
    # At the end of the turnaround: accepted.
    second = place_order(make_request(kind="b200", window_days=3, starts_at=info.value.next_start))
    assert second.holds.get().lot_id == first.holds.get().lot_id


@pytest.mark.django_db
def test_without_a_buffer_back_to_back_windows_share_a_lot(
    inventory: Inventory, make_request: RequestFactory, settings: object
) -> None:
    settings.RESERVATION_TURNAROUND = timedelta(0)  # type: ignore[attr-defined]
    first = place_order(make_request(kind="b200", window_days=3))
    second = place_order(make_request(kind="b200", window_days=3, starts_at=first.ends_at))
    assert second.holds.get().lot_id == first.holds.get().lot_id


@pytest.mark.django_db
def test_released_holds_do_not_count(inventory: Inventory, make_request: RequestFactory) -> None:
    first = place_order(make_request(kind="b200"))
    Order.objects.filter(pk=first.pk).update(status=Order.STATUS_CANCELLED)
    first.holds.update(status=Hold.Status.RELEASED, released_at=first.created_at)
    second = place_order(make_request(kind="b200"))
    assert second.holds.get().lot_id == first.holds.get().lot_id


def _race(make_request: RequestFactory, clients: int, **overrides: object) -> list[object]:
    """Many threads, each with its own database connection, place orders at the same moment."""
    requests = [make_request(**overrides) for _ in range(clients)]
    for i, request in enumerate(requests):
        request.starts_at += timedelta(hours=i % 5)
    return list(at_once(clients, lambda i: place_order(requests[i])))


@pytest.mark.django_db(transaction=True)
def test_concurrent_clients_never_overbook_the_last_lots(make_request: RequestFactory) -> None:
    from tests.conftest import build_inventory

    inventory = build_inventory()
    results = _race(make_request, 16, lot_count=1)  # 2 H200 lots, windows overlap

    placed = [r for r in results if isinstance(r, Order)]
    refused = [r for r in results if isinstance(r, LotUnavailable)]
    assert len(placed) == len(inventory.h200_lots) == 2
    assert len(refused) == 14, [r for r in results if not isinstance(r, Order | LotUnavailable)]
    assert Order.objects.count() == 2
    assert Hold.objects.count() == 2
    assert {h.lot_id for h in Hold.objects.all()} == {lot.pk for lot in inventory.h200_lots}


@pytest.mark.django_db(transaction=True)
def test_a_two_lot_order_never_gets_half_its_lots(make_request: RequestFactory) -> None:
    from tests.conftest import build_inventory

    build_inventory()
    results = _race(make_request, 8, lot_count=2)
    placed = [r for r in results if isinstance(r, Order)]
    assert len(placed) == 1
    assert Order.objects.count() == 1
    assert Hold.objects.count() == 2
