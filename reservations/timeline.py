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
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
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
    turnaround: float = 0
    """Width of the turnaround after the window, drawn as the bar's grey right edge."""


@dataclass
class Row:
    lot: Lot
    label: str
    bars: list[Bar] = field(default_factory=list)
    html: SafeString = field(default_factory=lambda: mark_safe(""))


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
    holds = _holds(list(rows), start, end)
    words = _Words()
    days_shown = (end - start).total_seconds() / 86400
    for lot_id, *values in holds:
        rows[lot_id].bars.extend(_bars(_Hold(*values), days_shown, words))
    for row in rows.values():
        row.html = _track(row, now, start)
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


@dataclass(frozen=True)
class _Hold:
    """What a bar needs of a hold and its order, as PostgreSQL computed it: positions in days
    from the range's start, times already formatted (no datetimes to parse per row)."""

    status: str
    order_id: int
    reference: str
    order_status: str
    starts: float
    ends: float
    upper: float | None
    starts_text: str
    ends_text: str
    upper_text: str
    expires_text: str


HOLDS_SQL = """
SELECT h.lot_id, h.status, o.id, o.reference, o.status,
       EXTRACT(EPOCH FROM lower(h.period) - %(start)s) / 86400,
       EXTRACT(EPOCH FROM o.ends_at - %(start)s) / 86400,
       EXTRACT(EPOCH FROM upper(h.period) - %(start)s) / 86400,
       to_char(lower(h.period) AT TIME ZONE %(zone)s, 'DD Mon HH24:MI'),
       to_char(o.ends_at AT TIME ZONE %(zone)s, 'DD Mon HH24:MI'),
       coalesce(to_char(upper(h.period) AT TIME ZONE %(zone)s, 'DD Mon HH24:MI'), ''),
       to_char(o.hold_expires_at AT TIME ZONE %(zone)s, 'DD Mon HH24:MI')
  FROM reservations_hold h JOIN reservations_order o ON o.id = h.order_id
 WHERE h.lot_id = ANY(%(lots)s) AND h.status IN ('held', 'booked')
   AND h.period && tstzrange(%(start)s, %(end)s)
 ORDER BY h.lot_id, lower(h.period)
"""
"""The holds that count (held or booked) overlapping the range, for the lots shown: one
query; the exclusion constraint's GiST index on (lot, period) finds them."""


def _holds(lots: list[int], start: datetime, end: datetime) -> list[tuple[Any, ...]]:
    params: dict[str, Any] = {
        "lots": lots,
        "start": start,
        "end": end,
        "zone": timezone.get_current_timezone_name(),
    }
    with connection.cursor() as cursor:
        cursor.execute(HOLDS_SQL, params)
        return [
            (
                row[0],
                row[1],
                row[2],
                row[3],
                row[4],
                float(row[5]),
                float(row[6]),
                None if row[7] is None else float(row[7]),
                *row[8:],
            )
            for row in cursor.fetchall()
        ]


class _Words:
    """The bars' words, translated once per page (not once per bar)."""

    def __init__(self) -> None:
        self.statuses = {value: str(label) for value, label in Order.STATUS_CHOICES}
        self.active = _("active")
        self.turnaround = _("turnaround")
        self.held = _("held until %(when)s (awaiting payment)")
        self.order_url = reverse("admin:reservations_order_change", args=[0]).replace("/0/", "/{}/")


def _bars(hold: _Hold, days_shown: float, words: _Words) -> list[Bar]:
    """A hold's bar: its window (held, booked or active), the turnaround after it as its
    grey right edge (positions in days from the range's start, clamped to the range)."""
    url = words.order_url.format(hold.order_id)
    if hold.status == Hold.Status.HELD:
        kind, state = "held", words.held % {"when": hold.expires_text}
    elif hold.order_status == Order.STATUS_ACTIVE:
        kind, state = "active", words.active
    else:
        kind, state = "booked", words.statuses.get(hold.order_status, hold.order_status)
    first, last = max(hold.starts, 0.0), min(hold.ends, days_shown)
    upper = days_shown if hold.upper is None else min(hold.upper, days_shown)
    after = max(hold.ends, 0.0)
    turnaround = round((upper - after) * DAY_WIDTH, 1) if upper > after else 0
    until = f"{words.turnaround} → {hold.upper_text or '…'}"
    if last > first:
        title = f"{hold.reference} · {state} · {hold.starts_text} → {hold.ends_text} · {until}"
        x, width = round(first * DAY_WIDTH, 1), max(2.0, round((last - first) * DAY_WIDTH, 1))
        return [Bar(kind, x, width, title, url, turnaround)]
    if turnaround:  # the window ended before the range: its turnaround only
        title = f"{hold.reference} · {until}"
        return [Bar("turnaround", round(after * DAY_WIDTH, 1), turnaround, title, url)]
    return []


def _track(row: Row, now: datetime, start: datetime) -> SafeString:
    """A row's bars as HTML, built here: thousands of bars through the template language
    would cost seconds. Each bar with an order is a link (focusable), its label the title."""
    parts = []
    for bar in row.bars:
        style = f"left:{bar.x}px;width:{bar.width}px"
        if bar.turnaround:
            style += f";border-right-width:{bar.turnaround}px"
        label = escape(bar.title)
        if bar.url:
            parts.append(
                f'<a class="bar bar-{bar.kind}" href="{bar.url}" style="{style}" '
                f'aria-label="{label}"></a>'
            )
        else:
            parts.append(
                f'<span class="bar bar-{bar.kind}" style="{style}" role="img" '
                f'aria-label="{label}" title="{label}"></span>'
            )
    return mark_safe("".join(parts))  # noqa: S308 (every value above is escaped or ours)


def filters() -> dict[str, Any]:
    """The choices of the kind and host filters."""
    from reservations.models import HardwareKind, Host

    return {
        "kinds": list(HardwareKind.objects.order_by("name").values_list("slug", "name")),
        "hosts": list(Host.objects.order_by("name").values_list("name", flat=True)),
    }
