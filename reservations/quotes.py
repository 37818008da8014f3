"""What the booking form shows as it changes: price, availability and the advisor's answer.

Read-only, a handful of queries, safe to call on every keystroke.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date, datetime
from decimal import Decimal
from typing import Any, TypeVar, cast

from django.core.cache import cache
from django.utils import timezone
from django.utils.dates import WEEKDAYS_ABBR

from reservations import availability
from reservations.advisor import Advice, AdvisorError, Context, advise
from reservations.errors import MESSAGES
from reservations.models import Environment, HardwareKind, Price, Window
from reservations.validation import MAX_LOT_COUNT, start_refusal

T = TypeVar("T")


def per_gpu_hour(amount_usd: Decimal, window_days: int, cards: int = 2) -> Decimal:
    """A lot's price for a window as dollars per GPU-hour (what GPU clouds quote)."""
    return (amount_usd / (window_days * 24 * cards)).quantize(Decimal("0.01"))


@dataclass(frozen=True)
class Alternative:
    """Another offered kind for the same window and start: what is free there, its price."""

    kind: HardwareKind
    free_lots: int
    unit_price_usd: Decimal | None
    per_gpu_hour_usd: Decimal | None

    @property
    def enough(self) -> bool:
        return self.free_lots > 0


CALENDAR_DAYS = 28
"""How far the calendar of free start dates looks ahead (four weeks)."""


@dataclass(frozen=True)
class CalendarDay:
    day: date
    free_lots: int
    enough: bool
    chosen: bool


def _weeks(days: list[CalendarDay]) -> tuple[tuple[CalendarDay | None, ...], ...]:
    """The days as weeks from Monday, the first week padded with None before its first day."""
    if not days:
        return ()
    slots: list[CalendarDay | None] = [None] * days[0].day.weekday() + list(days)
    slots += [None] * (-len(slots) % 7)
    return tuple(tuple(slots[i : i + 7]) for i in range(0, len(slots), 7))


@dataclass(frozen=True)
class Quote:
    kind: HardwareKind | None
    window_days: int | None
    lot_count: int
    starts_at: datetime | None
    unit_price_usd: Decimal | None = None
    total_usd: Decimal | None = None
    per_card_day_usd: Decimal | None = None
    per_gpu_hour_usd: Decimal | None = None
    free_lots: int | None = None
    bookable_lots: int | None = None
    next_start: datetime | None = None
    environment_ok: bool | None = None
    environment: Environment | None = None
    advice: Advice | None = None
    advice_error: str | None = None
    alternatives: tuple[Alternative, ...] = ()
    """The other offered kinds for this window and start (free lots and price each)."""
    calendar: tuple[tuple[CalendarDay | None, ...], ...] = ()
    """The chosen kind's free start dates for the next weeks, as weeks from Monday."""
    refusals: tuple[str, ...] = ()
    plan_key: str = ""
    """Names this reading of the plan while it is shared (``quote(shared_seconds=…)``): the
    fragment showing it may be shared under it; empty: read for this request alone."""
    shared_seconds: int = 0
    """Why this start or lot count cannot be booked at all (then nothing is looked up)."""

    @property
    def weekdays(self) -> list[str]:
        """Monday to Sunday, abbreviated in the current language (the calendar's columns)."""
        return [str(WEEKDAYS_ABBR[i]) for i in range(7)]

    @property
    def available(self) -> bool:
        return self.free_lots is not None and self.free_lots >= self.lot_count

    @property
    def too_many_lots(self) -> bool:
        return self.bookable_lots is not None and self.lot_count > self.bookable_lots


def quote(
    *,
    kind: str,
    window_days: int | None,
    lot_count: int,
    start_date: date | None,
    environment: str = "",
    params_billion: Decimal | None = None,
    precision: str = "",
    workload: str = "",
    seq_len: int | None = None,
    micro_batch: int | None = None,
    now: datetime | None = None,
    shared_seconds: int = 0,
) -> Quote:
    """Price, free lots (and the earliest start when too few), environment fit, advice.

    ``shared_seconds``: how long what depends on the plan alone (price, free lots, the
    calendar, the other kinds — not the model the advisor weighs) may be shared between
    everyone asking about the same plan. The booking form passes its fragments' own
    lifetime, so a researcher typing a model size reads the plan once per few seconds, not
    at every keystroke; 0 computes it afresh."""
    now = now or timezone.now()
    window = window_days if window_days in Window.values else None
    lot_count = max(lot_count, 1)

    def read_plan() -> _Plan:
        part = _plan(kind, window, lot_count, start_date, environment, now)
        if not shared_seconds:
            return part
        # A new key each time the plan is read anew: its rendered HTML, shared under that
        # key, is never older than the figures it shows.
        shown = replace(part.quote, plan_key=secrets.token_hex(8), shared_seconds=shared_seconds)
        return replace(part, quote=shown)

    plan = (kind, window, lot_count, start_date, environment, now.date())
    part: _Plan = _shared(plan_cache_key(*plan), shared_seconds, read_plan)
    advice, advice_error = _advice(
        params_billion,
        precision,
        workload,
        seq_len,
        micro_batch,
        window,
        environment,
        part.quote.lot_count,
        part.free_by_kind,
        shared_seconds,
    )
    return replace(part.quote, advice=advice, advice_error=advice_error)


def plan_cache_key(*plan: object) -> str:
    """Where a shared reading of one plan (kind, window, lots, start, environment, day) is."""
    return "quote-plan:v2:" + hashlib.sha256(repr(plan).encode()).hexdigest()


@dataclass(frozen=True)
class _Plan:
    """What a quote holds before the advisor: shared between form states of one plan."""

    quote: Quote
    free_by_kind: dict[int, int] | None
    """Free lots per kind id on the window asked for (None: no window or start, or refused)."""


def _plan(
    kind: str,
    window: int | None,
    lot_count: int,
    start_date: date | None,
    environment: str,
    now: datetime,
) -> _Plan:
    hardware = HardwareKind.objects.filter(slug=kind, is_offered=True).first()
    starts_at = availability.handover(start_date) if start_date else None
    refusals: list[str] = []
    if lot_count > MAX_LOT_COUNT:
        refusals.append(str(MESSAGES["lot_count_above_limit"] % {"limit": MAX_LOT_COUNT}))
        lot_count = MAX_LOT_COUNT
    refused_start = start_refusal(starts_at, now) if starts_at is not None else None
    if refused_start is not None:
        refusals.extend(refused_start.messages)
    # Free lots per kind on the window asked for: read once, for the advisor's context and
    # the other kinds' list.
    free_counts = (
        availability.free_lot_counts(starts_at, window)
        if window is not None and starts_at is not None and not refusals
        else None
    )
    if hardware is None:
        return _Plan(
            Quote(None, window, lot_count, starts_at, refusals=tuple(refusals)), free_counts
        )

    price = Price.objects.filter(kind=hardware, window_days=window).first() if window else None
    env = Environment.objects.filter(slug=environment, is_offered=True).first()
    result: dict[str, Any] = dict(
        kind=hardware,
        window_days=window,
        lot_count=lot_count,
        starts_at=starts_at,
        environment=env,
        environment_ok=(
            None if env is None else env.compatible_kinds.filter(pk=hardware.pk).exists()
        ),
        bookable_lots=availability.bookable_lots(hardware).count(),
        refusals=tuple(refusals),
    )
    if price is not None and window is not None:
        result.update(
            unit_price_usd=price.amount_usd,
            total_usd=price.amount_usd * lot_count,
            per_card_day_usd=(price.amount_usd / (window * hardware.cards_per_lot)).quantize(
                Decimal("0.01")
            ),
            per_gpu_hour_usd=per_gpu_hour(price.amount_usd, window, hardware.cards_per_lot),
        )
    if window is not None and lot_count <= result["bookable_lots"]:
        first = availability.first_bookable_day(now)
        chosen_day = starts_at.date() if starts_at is not None else None
        result["calendar"] = _weeks(
            [
                CalendarDay(day, free, free >= lot_count, day == chosen_day)
                for day, free in availability.start_calendar(hardware, window, first, CALENDAR_DAYS)
            ]
        )
    if window is not None and starts_at is not None and free_counts is not None:
        free = free_counts.get(hardware.pk, 0)
        result["free_lots"] = free
        if free < lot_count:
            result["next_start"] = availability.earliest_handover(
                hardware, window, lot_count, starts_at
            )
        result["alternatives"] = _alternatives(hardware, window, free_counts)
    return _Plan(Quote(**result), free_counts)


def _alternatives(
    chosen: HardwareKind, window: int, free: dict[int, int]
) -> tuple[Alternative, ...]:
    """The other offered kinds on the same window, with ``free`` lots per kind id (one
    query: the prices)."""
    prices = {
        p.kind_id: p.amount_usd
        for p in Price.objects.filter(window_days=window, kind__is_offered=True)
    }
    others = HardwareKind.objects.filter(is_offered=True).exclude(pk=chosen.pk).order_by("name")
    return tuple(
        Alternative(
            kind=kind,
            free_lots=free.get(kind.pk, 0),
            unit_price_usd=prices.get(kind.pk),
            per_gpu_hour_usd=(
                per_gpu_hour(prices[kind.pk], window, kind.cards_per_lot)
                if kind.pk in prices
                else None
            ),
        )
        for kind in others
    )


def _advice(
    params_billion: Decimal | None,
    precision: str,
    workload: str,
    seq_len: int | None,
    micro_batch: int | None,
    window: int | None,
    environment: str,
    lot_count: int,
    free_counts: dict[int, int] | None,
    shared_seconds: int = 0,
) -> tuple[Advice | None, str | None]:
    """The advisor's answer, its recommendation weighing the price per GPU-hour for the
    window, the lots free on the date and the chosen environment."""
    if params_billion is None or not precision or not workload:
        return None, None
    kinds, rates, environment_kinds = _catalogue_for_advice(window, environment, shared_seconds)
    free: dict[str, int] = {}
    if free_counts is not None:
        free = {kind.slug: free_counts.get(kind.pk, 0) for kind in kinds}
    context = Context(
        per_gpu_hour=rates,
        free_lots=free,
        environment_kinds=environment_kinds,
        lot_count=lot_count,
    )
    try:
        advice = advise(
            params_billion,
            precision,
            workload,
            kinds,
            seq_len=seq_len,
            micro_batch=micro_batch,
            context=context,
        )
    except AdvisorError as exc:
        return None, exc.code
    return advice, None


def _catalogue_for_advice(
    window: int | None, environment: str, shared_seconds: int
) -> tuple[list[HardwareKind], dict[str, Decimal], frozenset[str] | None]:
    """The offered kinds, their price per GPU-hour for the window and the kinds the chosen
    environment runs on (three queries; shared for ``shared_seconds`` when asked)."""
    key = "quote-catalogue:v2:" + hashlib.sha256(repr((window, environment)).encode()).hexdigest()
    return _shared(key, shared_seconds, lambda: _read_catalogue(window, environment))


def _read_catalogue(
    window: int | None, environment: str
) -> tuple[list[HardwareKind], dict[str, Decimal], frozenset[str] | None]:
    kinds = list(HardwareKind.objects.filter(is_offered=True).prefetch_related("prices"))
    rates = {
        kind.slug: per_gpu_hour(price.amount_usd, price.window_days, kind.cards_per_lot)
        for kind in kinds
        for price in kind.prices.all()
        if price.window_days == window
    }
    env = Environment.objects.filter(slug=environment, is_offered=True).first()
    environment_kinds = (
        frozenset(env.compatible_kinds.values_list("slug", flat=True)) if env else None
    )
    return kinds, rates, environment_kinds


_read_here: dict[str, tuple[float, Any]] = {}
"""This process's copies of the shared readings: key -> (the reading's end, its value)."""
READ_HERE_LIMIT = 1024


def _clock() -> float:
    return time.time()


def _shared(key: str, seconds: int, read: Callable[[], T]) -> T:
    """``read()``, shared for ``seconds`` under ``key`` (0: read afresh, nothing shared).

    One reading serves every process for its ``seconds`` (Redis holds it with the time it
    ends); each process keeps a copy until that same end, so most requests skip Redis and
    the unpickling of model rows. Nothing is served past its reading's end.
    Not ``cache.get_or_set``: its ``add`` raises while Redis is down (infra.cache)."""
    if not seconds:
        return read()
    now = _clock()
    here = _read_here.get(key)
    if here is not None and here[0] > now:
        return cast(T, here[1])
    # Stored as (the reading's end, its value): the keys' v2 (a v1 value was the bare value).
    found: tuple[float, T] | None = cache.get(key)
    if found is None or found[0] <= now:
        found = (now + seconds, read())
        cache.set(key, found, seconds)
    if len(_read_here) >= READ_HERE_LIMIT:
        _read_here.clear()
    _read_here[key] = found
    return found[1]


def forget_readings_here() -> None:
    """Drop this process's copies (the tests' fresh cache; Redis is cleared beside it)."""
    _read_here.clear()
