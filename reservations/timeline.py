"""The occupancy timeline of the operator desk: lots (grouped by host) × days.

Rendered on the server as one row of HTML per lot: bars for a hold awaiting payment (with its
expiry), a booking, an active rental, the turnaround after a window, and a lot in
maintenance, and a red band over the time a lot was not usable (an incident, linked to it:
a card that keeps failing shows as bands on its row); today marked. Every bar is a link, with
a title that hover and keyboard focus both show. Hosts come a page at a time
(``HOSTS_PER_PAGE``, each with all its lots): 200 lots over the whole horizon are ~10,000
bars and 2.6 MB of HTML, too much to build fast or to read (or to tab through) on one page.
Four queries whatever the number of lots: the page's hosts, their lots, and the holds and
the incidents that overlap the range.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.safestring import SafeString, mark_safe
from django.utils.timezone import localtime
from django.utils.translation import gettext as _

from reservations.models import HardwareKind, Host, Incident, Lot, Order

DAY_WIDTH = 16
"""Pixels per day."""
DAYS_BACK = 7
HOSTS_PER_PAGE = 10
"""Hosts (each with all its lots) on one page of the timeline."""


class Bar(NamedTuple):
    kind: str
    """held · booked · active · turnaround · maintenance · joined (where a joined extension's
    days begin inside its order's bar; no width) · incident"""
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
    url: str
    """The lot's admin page."""
    bars: list[Bar] = field(default_factory=list)
    html: SafeString = field(default_factory=lambda: mark_safe(""))


@dataclass
class Group:
    title: str
    rows: list[Row] = field(default_factory=list)


@dataclass
class Timeline:
    start: datetime
    end: datetime
    width: float
    today_x: float
    days: SafeString
    """The header: each month's name and the day of the month on Mondays and today."""
    groups: list[Group]
    page: int = 1
    pages: int = 1
    """Pages of ``HOSTS_PER_PAGE`` hosts; at least one, even when nothing matches."""
    hosts: int = 0
    """Hosts matching the filters, on all pages."""


def _x(moment: datetime, start: datetime) -> float:
    return round((moment - start).total_seconds() / 86400 * DAY_WIDTH, 1)


def build(
    *,
    now: datetime | None = None,
    kind: str = "",
    host: str = "",
    days: int | None = None,
    page: int = 1,
) -> Timeline:
    """The timeline from a week back to the booking horizon (or ``days`` ahead), for the
    lots that are not retired, of one kind (slug) or one host (name) if given: page ``page``
    (from 1, brought into range) of ``HOSTS_PER_PAGE`` hosts, each with all its lots."""
    now = now or timezone.now()
    today = localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    start = today - timedelta(days=DAYS_BACK)
    ahead = days if days is not None else settings.RESERVATION_HORIZON.days
    end = today + timedelta(days=ahead + 1)
    lots = Lot.objects.exclude(status=Lot.Status.RETIRED)
    if kind:
        lots = lots.filter(host__kind__slug=kind)
    if host:
        lots = lots.filter(host__name=host)
    order = ("host__kind__name", "host__name", "host_id")
    host_ids = list(lots.order_by(*order).values_list("host_id", flat=True).distinct())
    pages = max(1, -(-len(host_ids) // HOSTS_PER_PAGE))
    page = min(max(page, 1), pages)
    shown = host_ids[(page - 1) * HOSTS_PER_PAGE : page * HOSTS_PER_PAGE]
    rows: dict[int, Row] = {}
    groups: dict[int, Group] = {}
    lot_url = reverse("admin:reservations_lot_change", args=[0]).replace("/0/", "/{}/")
    for lot in (
        lots.filter(host_id__in=shown).select_related("host__kind").order_by(*order, "gpu_a")
    ):
        group = groups.setdefault(lot.host_id, Group(f"{lot.host.name} · {lot.host.kind.name}"))
        row = Row(lot, f"GPU {lot.gpu_a},{lot.gpu_b}", lot_url.format(lot.pk))
        if lot.status == Lot.Status.MAINTENANCE:
            row.bars.append(Bar("maintenance", 0, _x(end, start), _("in maintenance")))
        group.rows.append(row)
        rows[lot.pk] = row
    _draw(rows, _holds(list(rows), start, end), (end - start).total_seconds() / 86400)
    _draw_incidents(rows, _incidents(list(rows), start, end, now))
    # The days' header as HTML, built here like the rows (~190 days through the template
    # language cost more than the rest of the page's template).
    header: list[str] = []
    for i in range((end - start).days):
        moment, x = start + timedelta(days=i), i * DAY_WIDTH
        is_today = moment.date() == today.date()
        # Each month's name where it begins, and the first one's at the left edge unless the
        # next begins within a week (the two names would overlap).
        first_month = i == 0 and (moment + timedelta(days=6)).month == moment.month
        if moment.day == 1 or first_month:
            month = html.escape(date_format(moment, "M Y"))
            header.append(f'<span class="tl-month" style="left:{x}px">{month}</span>')
        if moment.weekday() == 0 or is_today:  # Mondays and today (every day would crowd)
            mark = " is-today" if is_today else ""
            day = html.escape(date_format(moment, "j"))
            header.append(f'<span class="tl-day{mark}" style="left:{x}px">{day}</span>')
    return Timeline(
        start=start,
        end=end,
        width=_x(end, start),
        today_x=_x(now, start),
        days=mark_safe("".join(header)),  # noqa: S308 (escaped above, or ours)
        groups=list(groups.values()),
        page=page,
        pages=pages,
        hosts=len(host_ids),
    )


HOLDS_SQL = """
SELECT h.lot_id, h.status = 'held', o.id, o.reference, o.status,
       date_part('epoch', lower(h.period) - %(start)s) / 86400,
       date_part('epoch', o.ends_at - %(start)s) / 86400,
       date_part('epoch', upper(h.period) - %(start)s) / 86400,
       to_char(lower(h.period) AT TIME ZONE %(zone)s, 'DD Mon HH24:MI'),
       to_char(o.ends_at AT TIME ZONE %(zone)s, 'DD Mon HH24:MI'),
       coalesce(to_char(upper(h.period) AT TIME ZONE %(zone)s, 'DD Mon HH24:MI'), ''),
       CASE WHEN h.status = 'held'
            THEN to_char(o.hold_expires_at AT TIME ZONE %(zone)s, 'DD Mon HH24:MI') END,
       o.extends, j.refs, j.xs, j.texts
  FROM reservations_hold h
 CROSS JOIN LATERAL (
       SELECT o.id, o.reference, o.status, o.ends_at, o.hold_expires_at,
              (SELECT p.reference FROM reservations_order p WHERE p.id = o.extends_id) extends
         FROM reservations_order o WHERE o.id = h.order_id OFFSET 0
       ) o
  LEFT JOIN LATERAL (
       SELECT array_agg(e.reference ORDER BY e.starts_at) refs,
              array_agg(date_part('epoch', e.starts_at - %(start)s) / 86400
                        ORDER BY e.starts_at) xs,
              array_agg(to_char(e.starts_at AT TIME ZONE %(zone)s, 'DD Mon HH24:MI')
                        ORDER BY e.starts_at) texts
         FROM reservations_order e WHERE e.extends_id = o.id AND e.joined_at IS NOT NULL
       ) j ON true
 WHERE h.lot_id = ANY(%(lots)s) AND h.status IN ('held', 'booked')
   AND h.period && tstzrange(%(start)s, %(end)s)
 ORDER BY h.lot_id, lower(h.period)
"""
"""The holds that count (held or booked) overlapping the range, for the lots shown (each
order read by its key: OFFSET 0 keeps the planner from hashing the whole order table for
the page's ~2,000 holds, 16 → 6 ms on 20,000 orders, and growing with the table), with
what a bar needs as PostgreSQL computes it: positions in days from the range's start as
float8 (``date_part``; ``EXTRACT`` gives numeric, read as slow Decimals), times already
formatted (the expiry only for a hold awaiting payment), and the continuations: the
reference of the order an extension extends, and where each extension joined into the
order begins (its days are the order's holds now; the marker shows the seam). One query; the
exclusion constraint's GiST index on (lot, period) finds them, the index on
``extends_id`` the extensions."""


def _holds(lots: list[int], start: datetime, end: datetime) -> list[tuple[Any, ...]]:
    return _rows_of(HOLDS_SQL, lots, start=start, end=end)


def _rows_of(query: str, lots: list[int], **params: Any) -> list[tuple[Any, ...]]:
    """``query``'s rows for the page's ``lots`` (none without lots), in the desk's zone."""
    if not lots:
        return []
    params.update(lots=lots, zone=timezone.get_current_timezone_name())
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall()


def _draw(rows: dict[int, Row], holds: list[tuple[Any, ...]], days_shown: float) -> None:
    """Each hold's bar on its lot's row, and each row's bars as HTML: its window (held,
    booked or active), the turnaround after it as its grey right edge (positions in days
    from the range's start, clamped to the range); a window that ended before the range
    shows its turnaround only. Built here in one pass, the words translated once per page:
    thousands of bars through the template language (or one object and one escape call
    each through Django's lazy-aware helpers) would cost seconds. Each bar with an order is a
    link (focusable), its label the title."""
    statuses = {value: str(label) for value, label in Order.STATUS_CHOICES}
    active, turnaround_word = _("active"), _("turnaround")
    held_until = _("held until %(when)s (awaiting payment)")
    extension_of = _("extension of %(reference)s")
    extended_by = _("%(reference)s · extended by %(extension)s from %(when)s")
    order_url = reverse("admin:reservations_order_change", args=[0]).replace("/0/", "/{}/")
    escape, width_px, is_active = html.escape, DAY_WIDTH, Order.STATUS_ACTIVE
    parts: dict[int, list[str]] = {pk: [] for pk in rows}
    for row in rows.values():  # maintenance, drawn before the holds
        for bar in row.bars:
            label = escape(bar.title)
            parts[row.lot.pk].append(
                f'<span class="bar bar-{bar.kind}" style="left:{bar.x}px;width:{bar.width}px"'
                f' role="img" aria-label="{label}" title="{label}"></span>'
            )
    current = None
    for (
        lot_id,
        is_held,
        order_id,
        reference,
        order_status,
        starts,
        ends,
        upper,
        starts_text,
        ends_text,
        upper_text,
        expires_text,
        extends,
        join_refs,
        join_xs,
        join_texts,
    ) in holds:
        if lot_id != current:  # the holds come lot by lot
            current, add_bar, add_html = lot_id, rows[lot_id].bars.append, parts[lot_id].append
        first, last = max(starts, 0.0), min(ends, days_shown)
        upper = days_shown if upper is None else min(upper, days_shown)
        after = max(ends, 0.0)
        turnaround = round((upper - after) * width_px, 1) if upper > after else 0
        until = f"{turnaround_word} → {upper_text or '…'}"
        if last > first:
            if is_held:
                kind, state = "held", held_until % {"when": expires_text}
            elif order_status == is_active:
                kind, state = "active", active
            else:
                kind, state = "booked", statuses.get(order_status, order_status)
            if extends:  # a continuation not yet joined: marked as such
                state = f"{extension_of % {'reference': extends}} · {state}"
            title = f"{reference} · {state} · {starts_text} → {ends_text} · {until}"
            x, width = round(first * width_px, 1), max(2.0, round((last - first) * width_px, 1))
            edge = f";border-right-width:{turnaround}px" if turnaround else ""
        elif turnaround:
            kind, title = "turnaround", f"{reference} · {until}"
            x, width, turnaround, edge = round(after * width_px, 1), turnaround, 0, ""
        else:
            continue
        url = order_url.format(order_id)
        add_bar(Bar(kind, x, width, title, url, turnaround))
        continues = " bar-continues" if extends else ""
        add_html(
            f'<a class="bar bar-{kind}{continues}" href="{url}"'
            f' style="left:{x}px;width:{width}px{edge}" aria-label="{escape(title)}"></a>'
        )
        joins = zip(join_refs or (), join_xs or (), join_texts or (), strict=True)
        for extension, at, when in joins:
            if first <= at <= last:  # the seam where a joined extension's days begin
                seam = extended_by % {"reference": reference, "extension": extension, "when": when}
                add_bar(Bar("joined", round(at * width_px, 1), 0, seam, url))
                label = escape(seam)
                add_html(
                    f'<span class="tl-joint" style="left:{round(at * width_px, 1)}px"'
                    f' role="img" aria-label="{label}" title="{label}"></span>'
                )
    for pk, row in rows.items():
        row.html = mark_safe("".join(parts[pk]))  # noqa: S308 (every value above is escaped or ours)


INCIDENTS_SQL = """
SELECT i.lot_id, i.id, o.reference, i.kind, left(i.summary, 160),
       date_part('epoch', greatest(i.started_at, %(start)s) - %(start)s) / 86400,
       date_part('epoch', least(coalesce(i.ended_at, %(now)s), %(end)s) - %(start)s) / 86400,
       to_char(i.started_at AT TIME ZONE %(zone)s, 'DD Mon HH24:MI'),
       coalesce(to_char(i.ended_at AT TIME ZONE %(zone)s, 'DD Mon HH24:MI'), ''),
       (SELECT h.name || ' GPU ' || l.gpu_a || ',' || l.gpu_b
          FROM reservations_lot l JOIN reservations_host h ON h.id = l.host_id
         WHERE l.id = i.replacement_id)
  FROM reservations_incident i JOIN reservations_order o ON o.id = i.order_id
 WHERE i.lot_id = ANY(%(lots)s) AND i.started_at < %(end)s
   AND coalesce(i.ended_at, %(now)s) >= %(start)s
 ORDER BY i.lot_id, i.started_at
"""
"""The incidents of the lots shown overlapping the range (open ones up to now), with their
band's position in days from the range's start and the lot the booking moved to."""


def _incidents(
    lots: list[int], start: datetime, end: datetime, now: datetime
) -> list[tuple[Any, ...]]:
    return _rows_of(INCIDENTS_SQL, lots, start=start, end=end, now=now)


def _draw_incidents(rows: dict[int, Row], found: list[tuple[Any, ...]]) -> None:
    """Each incident's band on its lot's row, over the bars, a link to the incident."""
    from_to, still_open = _("%(start)s → %(end)s"), _("%(start)s → (not over)")
    moved = _("moved to %(lot)s")
    url = reverse("admin:reservations_incident_change", args=[0]).replace("/0/", "/{}/")
    kinds = {value: str(label) for value, label in Incident.Kind.choices}
    extra: dict[int, list[str]] = {}
    for lot_id, pk, reference, kind, summary, x0, x1, since, until, spare in found:
        when = (from_to if until else still_open) % {"start": since, "end": until}
        words = [reference, kinds.get(kind, kind), when, summary]
        if spare:
            words.append(moved % {"lot": spare})
        title = " · ".join(words)
        x, width = round(x0 * DAY_WIDTH, 1), max(2.0, round((x1 - x0) * DAY_WIDTH, 1))
        rows[lot_id].bars.append(Bar("incident", x, width, title, url.format(pk)))
        extra.setdefault(lot_id, []).append(
            f'<a class="bar bar-incident" href="{url.format(pk)}"'
            f' style="left:{x}px;width:{width}px" aria-label="{html.escape(title)}"></a>'
        )
    for lot_id, bands in extra.items():
        row = rows[lot_id]
        row.html = mark_safe(row.html + "".join(bands))  # noqa: S308 (escaped above, or ours)


def filters() -> dict[str, Any]:
    """The choices of the kind and host filters."""
    return {
        "kinds": list(HardwareKind.objects.order_by("name").values_list("slug", "name")),
        "hosts": list(Host.objects.order_by("name").values_list("name", flat=True)),
    }
