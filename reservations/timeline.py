"""The occupancy timeline of the operator desk: lots (grouped by host) × days.

Rendered on the server as one SVG row per lot: bars for a hold awaiting payment (with its
expiry), a booking, an active rental, the turnaround after a window, and a lot in
maintenance; today marked. Every bar is a link to its order, with a title that hover and
keyboard focus both show. Two queries whatever the number of lots: the lots, and the holds
that overlap the range.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange  # type: ignore[import-untyped]
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.timezone import localtime
from django.utils.translation import gettext as _

from reservations.models import Hold, Lot, Order

DAY_WIDTH = 16
"""Pixels per day."""
DAYS_BACK = 7


@dataclass(frozen=True)
class Bar:
    kind: str
    """held · booked · active · turnaround · maintenance"""
    x: float
    width: float
    title: str
    url: str = ""


@dataclass
class Row:
    lot: Lot
    label: str
    bars: list[Bar] = field(default_factory=list)


@dataclass
class Group:
    title: str
    rows: list[Row] = field(default_factory=list)


@dataclass(frozen=True)
class Day:
    x: float
    day: date
    label: str
    """The day of the month, shown on Mondays and today (every label would crowd)."""
    is_today: bool
    starts_month: bool


@dataclass
class Timeline:
    start: datetime
    end: datetime
    width: float
    today_x: float
    days: list[Day]
    groups: list[Group]


def _x(moment: datetime, start: datetime) -> float:
    return round((moment - start).total_seconds() / 86400 * DAY_WIDTH, 1)


def _when(moment: datetime) -> str:
    return date_format(localtime(moment), "SHORT_DATETIME_FORMAT")


def build(
    *, now: datetime | None = None, kind: str = "", host: str = "", days: int | None = None
) -> Timeline:
    """The timeline from a week back to the booking horizon (or ``days`` ahead), for the
    lots that are not retired, of one kind (slug) or one host (name) if given."""
    now = now or timezone.now()
    today = localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    start = today - timedelta(days=DAYS_BACK)
    ahead = days if days is not None else settings.RESERVATION_HORIZON.days
    end = today + timedelta(days=ahead + 1)
    lots = Lot.objects.exclude(status=Lot.Status.RETIRED).select_related("host__kind")
    if kind:
        lots = lots.filter(host__kind__slug=kind)
    if host:
        lots = lots.filter(host__name=host)
    lots = lots.order_by("host__kind__name", "host__name", "gpu_a")
    rows: dict[int, Row] = {}
    groups: dict[int, Group] = {}
    for lot in lots:
        group = groups.setdefault(lot.host_id, Group(f"{lot.host.name} · {lot.host.kind.name}"))
        row = Row(lot, f"GPU {lot.gpu_a},{lot.gpu_b}")
        if lot.status == Lot.Status.MAINTENANCE:
            row.bars.append(Bar("maintenance", 0, _x(end, start), _("in maintenance")))
        group.rows.append(row)
        rows[lot.pk] = row
    holds = (
        Hold.objects.filter(
            lot_id__in=list(rows),
            status__in=Hold.COUNTING,
            period__overlap=DateTimeTZRange(start, end),
        )
        .select_related("order")
        .order_by("lot_id", "period")
    )
    for hold in holds:
        rows[hold.lot_id].bars.extend(_bars(hold, start, end))
    day_list = []
    for i in range((end - start).days):
        moment = start + timedelta(days=i)
        day_list.append(
            Day(
                x=i * DAY_WIDTH,
                day=moment.date(),
                label=date_format(moment, "j")
                if moment.weekday() == 0 or moment.date() == today.date()
                else "",
                is_today=moment.date() == today.date(),
                starts_month=moment.day == 1 or i == 0,
            )
        )
    return Timeline(
        start=start,
        end=end,
        width=_x(end, start),
        today_x=_x(now, start),
        days=day_list,
        groups=list(groups.values()),
    )


def _bars(hold: Hold, start: datetime, end: datetime) -> list[Bar]:
    """A hold's bars: the window (held, booked or active) and its turnaround after it."""
    order = hold.order
    url = reverse("admin:reservations_order_change", args=[order.pk])
    window_start = max(order.starts_at, start)
    window_end = min(order.ends_at, end)
    if hold.status == Hold.Status.HELD:
        kind = "held"
        state = _("held until %(when)s (awaiting payment)") % {"when": _when(order.hold_expires_at)}
    elif order.status == Order.STATUS_ACTIVE:
        kind, state = "active", _("active")
    else:
        kind, state = "booked", str(order.get_status_display())
    title = (
        f"{order.reference} · {order.contact_email} · {state} · "
        f"{_when(order.starts_at)} → {_when(order.ends_at)}"
    )
    bars = []
    if window_end > window_start:
        x = _x(window_start, start)
        bars.append(Bar(kind, x, max(2.0, _x(window_end, start) - x), title, url))
    turnaround_end = min(hold.period.upper, end) if hold.period.upper else end
    after = max(order.ends_at, start)
    if turnaround_end > after:
        x = _x(after, start)
        bars.append(
            Bar(
                "turnaround",
                x,
                _x(turnaround_end, start) - x,
                f"{order.reference} · {_('turnaround')} · {_when(order.ends_at)} → "
                f"{_when(hold.period.upper)}",
                url,
            )
        )
    return bars


def filters() -> dict[str, Any]:
    """The choices of the kind and host filters."""
    from reservations.models import HardwareKind, Host

    return {
        "kinds": list(HardwareKind.objects.order_by("name").values_list("slug", "name")),
        "hosts": list(Host.objects.order_by("name").values_list("name", flat=True)),
    }
