"""Which lots are free for a window, and the earliest start when they are not.

A window of ``days`` starting at ``starts_at`` blocks its lot for
[starts_at, starts_at + days + turnaround): the same range the hold will carry, so what
this module calls free is exactly what the exclusion constraint will accept.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.conf import settings
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange  # type: ignore[import-untyped]
from django.db.models import Count, DateTimeField, F, Func, Q, QuerySet
from django.utils import timezone

from reservations.models import HardwareKind, Hold, Lot


def handover(day: date) -> datetime:
    """When a window booked for ``day`` starts: the handover hour, UTC. Under the local
    demo (``DEMO_MODE``), a window booked for today starts within minutes (``demo_start``)."""
    if settings.DEMO_MODE:
        now = timezone.now()
        if day == now.astimezone(UTC).date():
            return demo_start(now)
    return datetime.combine(day, time(hour=settings.RESERVATION_HANDOVER_HOUR), tzinfo=UTC)


def demo_start(now: datetime) -> datetime:
    """The local demo's start for today: the next whole DEMO_START_MINUTES, at least a
    minute ahead (time to review and place the order before it)."""
    step = timedelta(minutes=settings.DEMO_START_MINUTES)
    ahead = now.astimezone(UTC) + timedelta(minutes=1)
    midnight = datetime.combine(ahead.date(), time(), tzinfo=UTC)
    steps = -((midnight - ahead) // step)  # ceiling
    return midnight + steps * step


def first_bookable_day(now: datetime) -> date:
    """Today while today's handover is still ahead, else tomorrow: the calendar's first day."""
    today = now.astimezone(UTC).date()
    return today if handover(today) > now else today + timedelta(days=1)


def next_handover(moment: datetime) -> datetime:
    """The first handover at or after ``moment``."""
    at = handover(moment.astimezone(UTC).date())
    return at if at >= moment else at + timedelta(days=1)


def blocked_period(starts_at: datetime, window_days: int) -> DateTimeTZRange:
    ends_at = starts_at + timedelta(days=window_days)
    return DateTimeTZRange(starts_at, ends_at + settings.RESERVATION_TURNAROUND, "[)")


def bookable_lots(kind: HardwareKind | int) -> QuerySet[Lot]:
    """Lots of a kind that may be booked at all (active, not in maintenance or retired)."""
    return Lot.objects.filter(host__kind=kind, status=Lot.Status.ACTIVE)


def _busy_lot_ids(period: DateTimeTZRange) -> QuerySet[Hold, Any]:
    """Lots with a counting hold overlapping ``period``: one scan of the holds' GiST index,
    whatever the planner's statistics say (the subquery is evaluated once, hashed)."""
    return Hold.objects.filter(status__in=Hold.COUNTING, period__overlap=period).values("lot_id")


def free_lots(kind: HardwareKind | int, starts_at: datetime, window_days: int) -> QuerySet[Lot]:
    """Bookable lots of ``kind`` with no counting hold overlapping the window, by id."""
    return free_lots_in(kind, blocked_period(starts_at, window_days))


def free_lots_in(kind: HardwareKind | int, period: DateTimeTZRange) -> QuerySet[Lot]:
    """Bookable lots of ``kind`` with no counting hold overlapping ``period``, by id: for an
    existing hold, whose period carries the turnaround frozen when it was made."""
    return bookable_lots(kind).exclude(pk__in=_busy_lot_ids(period)).order_by("pk")


def free_lot_counts(starts_at: datetime, window_days: int) -> dict[int, int]:
    """Free lots per kind id for one window, in one query (kinds with none are absent)."""
    period = blocked_period(starts_at, window_days)
    rows = (
        Lot.objects.filter(status=Lot.Status.ACTIVE)
        .exclude(pk__in=_busy_lot_ids(period))
        .values("host__kind")
        .annotate(free=Count("pk"))
    )
    return {row["host__kind"]: row["free"] for row in rows}


def bookable_lot_counts() -> dict[int, int]:
    """How many lots each kind has at all (the ceiling for one order)."""
    rows = HardwareKind.objects.annotate(
        lots=Count("hosts__lots", filter=Q(hosts__lots__status=Lot.Status.ACTIVE))
    ).values_list("pk", "lots")
    return dict(rows)


def earliest_start(
    kind: HardwareKind | int,
    window_days: int,
    lot_count: int,
    not_before: datetime,
    *,
    horizon: timedelta | None = None,
    align: Callable[[datetime], datetime] | None = None,
) -> datetime | None:
    """The earliest start at or after ``not_before`` with ``lot_count`` lots free for the window.

    Capacity only ever frees up where a hold's blocked range ends, so the candidates are
    ``not_before`` and those ends (moved by ``align`` to the next allowed start, e.g.
    ``next_handover``: if an aligned start works, so does the one aligned from the last end
    before it). None when no start within the horizon works (or when the kind has fewer lots
    than asked for).
    """
    horizon = settings.RESERVATION_HORIZON if horizon is None else horizon
    lot_ids = list(bookable_lots(kind).values_list("pk", flat=True))
    if len(lot_ids) < lot_count:
        return None
    busy: dict[int, list[tuple[datetime, datetime]]] = defaultdict(list)
    ends: set[datetime] = set()
    holds = Hold.objects.filter(
        lot_id__in=lot_ids, status__in=Hold.COUNTING, period__endswith__gt=not_before
    ).values_list("lot_id", "period")
    for lot_id, period in holds:
        busy[lot_id].append((period.lower, period.upper))
        ends.add(period.upper)
    latest = not_before + horizon
    length = timedelta(days=window_days) + settings.RESERVATION_TURNAROUND
    candidates = {not_before, *ends}
    if align is not None:
        candidates = {align(candidate) for candidate in candidates}
    for candidate in sorted(candidates):
        if candidate > latest:
            break
        stop = candidate + length
        free = sum(
            1
            for lot_id in lot_ids
            if not any(lower < stop and candidate < upper for lower, upper in busy[lot_id])
        )
        if free >= lot_count:
            return candidate
    return None


def earliest_handover(
    kind: HardwareKind | int, window_days: int, lot_count: int, not_before: datetime
) -> datetime | None:
    """The earliest handover at or after ``not_before`` with ``lot_count`` lots free for the
    window: the next start the pages offer, since they book whole days."""
    return earliest_start(kind, window_days, lot_count, not_before, align=next_handover)


def start_calendar(
    kind: HardwareKind | int, window_days: int, first_day: date, days: int
) -> list[tuple[date, int]]:
    """Each day from ``first_day`` for ``days`` days, with how many lots of ``kind`` are free
    for a window of ``window_days`` handed over that day: the calendar of free start dates.

    Two queries whatever the number of days (the lots, and their holds in the range), the
    same overlap as the exclusion constraint's ([start, end + turnaround))."""
    lot_ids = list(bookable_lots(kind).values_list("pk", flat=True))
    first = handover(first_day)
    length = timedelta(days=window_days) + settings.RESERVATION_TURNAROUND
    last = handover(first_day + timedelta(days=days - 1)) + length
    holds = (
        Hold.objects.filter(
            lot_id__in=lot_ids,
            status__in=Hold.COUNTING,
            period__overlap=DateTimeTZRange(first, last, "[)"),
        )
        # The bounds as timestamps: a range object per row cost more than the rest.
        .annotate(
            lower=Func(F("period"), function="lower", output_field=DateTimeField()),
            upper=Func(F("period"), function="upper", output_field=DateTimeField()),
        )
        .values_list("lot_id", "lower", "upper")
    )
    # Per lot, one bit per day whose window a hold overlaps: day i's window is
    # [first + i days, first + i days + length), so a hold [lower, upper) takes the days i
    # with lower < first + i days + length and first + i days < upper.
    day = timedelta(days=1)
    taken = dict.fromkeys(lot_ids, 0)
    for lot_id, lower, upper in holds:
        low = 0 if lower is None else max(0, (lower - first - length) // day + 1)
        high = days - 1 if upper is None else min(days - 1, -((first - upper) // day) - 1)
        if low <= high:
            taken[lot_id] |= (1 << (high + 1)) - (1 << low)
    return [
        (
            first_day + timedelta(days=offset),
            sum(1 for bits in taken.values() if not bits >> offset & 1),
        )
        for offset in range(days)
    ]
