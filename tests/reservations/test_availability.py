"""Free lots for a window, and the earliest start when the chosen one is full."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from reservations.availability import (
    bookable_lot_counts,
    earliest_start,
    free_lot_counts,
    free_lots,
    handover,
    start_calendar,
)
from reservations.errors import LotUnavailable
from reservations.services import place_order
from tests.conftest import Inventory, RequestFactory

pytestmark = pytest.mark.django_db
TURNAROUND = timedelta(hours=6)


def test_every_active_lot_is_free_when_nothing_is_booked(
    inventory: Inventory, soon: datetime
) -> None:
    assert list(free_lots(inventory.h200, soon, 7)) == inventory.h200_lots
    assert free_lot_counts(soon, 7) == {
        inventory.h200.pk: 2,
        inventory.b200.pk: 1,
        inventory.mi300x.pk: 1,
    }
    assert bookable_lot_counts() == {
        inventory.h200.pk: 2,
        inventory.b200.pk: 1,
        inventory.mi300x.pk: 1,
    }


def test_a_held_lot_is_not_free_for_overlapping_windows(
    inventory: Inventory, make_request: RequestFactory, soon: datetime
) -> None:
    order = place_order(make_request(window_days=7))
    held = order.holds.get().lot
    assert held not in free_lots(inventory.h200, soon + timedelta(days=6), 3)
    assert held not in free_lots(inventory.h200, soon - timedelta(days=2), 3)
    assert held in free_lots(inventory.h200, order.ends_at + TURNAROUND, 3)
    assert free_lot_counts(soon, 3)[inventory.h200.pk] == 1


def test_the_earliest_start_is_the_chosen_one_when_free(
    inventory: Inventory, soon: datetime
) -> None:
    assert earliest_start(inventory.h200, 7, 2, soon) == soon


def test_the_earliest_start_waits_for_enough_lots_at_once(
    inventory: Inventory, make_request: RequestFactory, soon: datetime
) -> None:
    a = place_order(make_request(window_days=3))
    b = place_order(make_request(window_days=7, starts_at=soon + timedelta(days=1)))
    # One lot frees after a's window; two lots only after b's.
    assert earliest_start(inventory.h200, 3, 1, soon) == a.ends_at + TURNAROUND
    assert earliest_start(inventory.h200, 3, 2, soon) == b.ends_at + TURNAROUND


def test_a_gap_too_short_for_the_window_is_skipped(
    inventory: Inventory, make_request: RequestFactory, soon: datetime
) -> None:
    first = place_order(make_request(kind="b200", window_days=3))
    gap_start = first.ends_at + TURNAROUND
    # A booking 5 days after the first one's end leaves a gap too short for 7 days.
    later = place_order(
        make_request(kind="b200", window_days=3, starts_at=gap_start + timedelta(days=5))
    )
    assert earliest_start(inventory.b200, 3, 1, soon) == gap_start
    assert earliest_start(inventory.b200, 7, 1, soon) == later.ends_at + TURNAROUND


def test_no_start_when_the_kind_has_too_few_lots_or_the_horizon_is_passed(
    inventory: Inventory, make_request: RequestFactory, soon: datetime
) -> None:
    assert earliest_start(inventory.b200, 3, 2, soon) is None
    checkpoints = [{"date": soon.date().isoformat(), "check": "c"}]
    place_order(
        make_request(kind="b200", window_days=30, checkpoints=checkpoints, abort_criteria="a")
    )
    assert earliest_start(inventory.b200, 3, 1, soon, horizon=timedelta(days=10)) is None


def test_starts_aligned_to_the_handover_hour_skip_what_does_not_fit(
    inventory: Inventory, make_request: RequestFactory, soon: datetime, settings: object
) -> None:
    from reservations.availability import handover, next_handover

    settings.RESERVATION_HANDOVER_HOUR = 12  # type: ignore[attr-defined]
    day = (soon + timedelta(days=1)).date()
    first = place_order(make_request(kind="b200", window_days=3, starts_at=handover(day)))
    # Frees at 18:00 on day+3 (window end 12:00 + 6 h turnaround): next handover is day+4.
    assert earliest_start(inventory.b200, 3, 1, handover(day), align=next_handover) == handover(
        day + timedelta(days=4)
    )
    # A booking on day+5 leaves day+4 too short for a 3-day window; the answer moves past it.
    place_order(
        make_request(kind="b200", window_days=3, starts_at=handover(day + timedelta(days=5)))
    )
    assert earliest_start(inventory.b200, 3, 1, handover(day), align=next_handover) == handover(
        day + timedelta(days=9)
    )
    assert first.starts_at.hour == 12


@pytest.mark.parametrize("window_days", [3, 7, 30])
def test_the_calendar_agrees_with_the_free_lots_of_each_day(
    inventory: Inventory, make_request: RequestFactory, soon: datetime, window_days: int
) -> None:
    """The calendar's day arithmetic against the query booking relies on, day by day, with
    holds of every window ending and starting inside the calendar's four weeks."""
    first_day = soon.date()
    for offset, days in ((0, 3), (4, 7), (12, 3), (2, 7), (16, 7), (20, 3)):
        try:
            place_order(
                make_request(
                    lot_count=1, window_days=days, starts_at=handover(first_day + timedelta(offset))
                )
            )
        except LotUnavailable:
            continue  # both lots taken then: the next hold goes elsewhere in the weeks
    calendar = start_calendar(inventory.h200, window_days, first_day, 28)
    expected = [
        (day, free_lot_counts(handover(day), window_days).get(inventory.h200.pk, 0))
        for day in (first_day + timedelta(days=offset) for offset in range(28))
    ]
    assert calendar == expected
    shown = [free for _day, free in calendar]
    assert min(shown) < 2  # the holds are counted
    assert max(shown) == 2  # and end: after the last one both lots are free
