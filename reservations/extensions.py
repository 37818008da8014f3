"""Extending an order on the same lots: more days directly after its window, on the same cards.

An extension is an order of its own: the order's kind, environment, lots count and hypothesis,
a window of 3, 7 or 30 days priced from the price list of the day (locked into it as for any
order), its own holds, invoice, "I've paid", approval and receipt. What makes it an extension:

- its holds are on **the lots the order holds**, for the days directly after the order's
  blocked period ``[the order's hold end, the same + days)``, checked by the same exclusion
  constraint that prevents double booking (a lot taken meanwhile refuses it,
  ``lots_not_free_until``; two raced extensions: one wins, and a partial unique key lets only
  one extension of an order wait for payment or approval);
- it must be paid by the order's end less RESERVATION_EXTENSION_PAY_LEAD: its hold ends then
  (payments.expiry releases it as any unpaid order) and access closes when it would have;
- once approved (by the operator, or at once with PROVISIONING_AUTO_APPROVE), :func:`join`
  adds its days to the order's window in one transaction: the order's holds reach the new
  end, the extension's own holds are released into them, the order's ``ends_at`` moves and
  its end-of-window mail is due again. Provisioning moves the open access grants' end in the
  same transaction: no revocation, no new preparation, no new accounts.

A payment arriving after the deadline is a late payment as for any order (refund, or the
operator accepts it while the lots are free: the extension's released holds are taken again).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange  # type: ignore[import-untyped]
from django.utils import timezone

from reservations import availability, fairness, notifications
from reservations.errors import MESSAGES
from reservations.events import order_extended, order_extension_placed
from reservations.models import (
    WINDOW_DAYS,
    Checkpoint,
    Hold,
    Order,
    OrderEvent,
    Price,
    Window,
)
from reservations.services import (
    Actor,
    is_exclusion_violation,
    new_reference,
    new_secret,
    record_note,
    transition,
)
from reservations.validation import OrderRequest, planned_checkpoints

log = logging.getLogger(__name__)

EXTENDABLE = (Order.STATUS_PAID, Order.STATUS_APPROVED, Order.STATUS_ACTIVE)
"""An order is extended while it is paid and its window has not ended."""
PENDING = (Order.STATUS_AWAITING_PAYMENT, Order.STATUS_PAID)
"""An extension in these (not yet joined) is the order's pending one."""
CONFLICTS = ("not_extendable", "too_late_to_extend", "extension_pending", "lots_not_free_until")
"""Refusals by the order's state or its lots' (409 in the API); the others are bad input."""
CARRIED = (
    "user_id",
    "language",
    "contact_name",
    "contact_email",
    "organisation",
    "contact_phone",
    "kind_id",
    "environment_id",
    "usage_mode",
    "hypothesis",
    "hypothesis_text",
    "model_params_billion",
    "model_precision",
    "model_workload",
    "model_seq_len",
    "model_micro_batch",
    "client_key",
    "mailbox_key",
)
"""What an extension takes from its order as it is: who, what, and the research plan."""
SHORTEST_PAYMENT_TIME = timedelta(minutes=10)
"""An extension is offered only while at least this long is left to pay it."""


class ExtensionRefused(Exception):
    """An extension cannot be placed; ``code`` is stable (the API's), ``params`` fill its
    message (``free_until`` for ``lots_not_free_until``)."""

    def __init__(self, code: str, **params: Any) -> None:
        message = MESSAGES[code]
        formatted = {
            name: timezone.localtime(value) if isinstance(value, datetime) else value
            for name, value in params.items()
        }
        super().__init__(str(message) % formatted if formatted else str(message))
        self.code = code
        self.params = params


@dataclass(frozen=True)
class Offer:
    """One length the order may be extended by."""

    days: int
    starts_at: datetime
    ends_at: datetime
    unit_price_usd: Decimal
    total_usd: Decimal
    fits: bool
    """The order's lots are free for the whole of it."""
    elsewhere_from: datetime | None = None
    """For a length that does not fit: the earliest start, from the order's end on, of a new
    order as long on lots of the kind (as many, any of them; the booking form's handover
    times), to offer instead. None when it fits, or no start within the horizon works."""


@dataclass(frozen=True)
class Offers:
    """What the order page and the API say about extending an order now."""

    refused: str
    """Why it cannot be extended now (a code); empty when it can."""
    pay_by: datetime | None
    free_until: datetime | None
    """Until when the order's lots are free after its window (None: beyond the horizon)."""
    offers: tuple[Offer, ...]
    pending: Order | None
    extensions: tuple[Order, ...]
    """Every extension of the order, oldest first."""

    @property
    def any_fits(self) -> bool:
        return not self.refused and any(offer.fits for offer in self.offers)


def pay_by(order: Order) -> datetime:
    """The latest an extension of ``order`` may be paid: its end less the payment lead."""
    return order.ends_at - settings.RESERVATION_EXTENSION_PAY_LEAD


def _holds(order: Order) -> list[Hold]:
    return list(Hold.objects.filter(order=order, status__in=Hold.COUNTING).order_by("lot_id"))


def _blocked_until(holds: list[Hold]) -> datetime:
    """Where the order's blocked period ends (its window plus the turnaround frozen in it)."""
    return max(hold.period.upper for hold in holds)


def free_until(order: Order) -> datetime | None:
    """Until when the order's lots are all free after its blocked period, as a window end
    (the next booking's start less the turnaround); None: nothing booked after it."""
    return _free_until(order, _read_for_offers(order))


def _free_until(order: Order, reading: _Reading) -> datetime | None:
    """:func:`free_until` from what :data:`OFFER_READING` read."""
    if reading.next_start is None or reading.blocked_until is None:
        return None
    return reading.next_start - (reading.blocked_until - order.ends_at)


OFFER_READING = """
SELECT own.holds, own.blocked_until,
       (SELECT min(lower(h.period))
          FROM reservations_hold h JOIN reservations_order o ON o.id = h.order_id
         WHERE h.lot_id = ANY(own.lots) AND h.status = ANY(%(counting)s)
           AND lower(h.period) >= own.blocked_until
           AND h.order_id <> %(order)s AND o.extends_id IS DISTINCT FROM %(order)s),
       (SELECT array_agg(id ORDER BY created_at, id)
          FROM reservations_order WHERE extends_id = %(order)s),
       (SELECT array_agg(window_days ORDER BY window_days)
          FROM reservations_price WHERE kind_id = %(kind)s),
       (SELECT array_agg(amount_usd ORDER BY window_days)
          FROM reservations_price WHERE kind_id = %(kind)s)
  FROM (SELECT count(*) holds, max(upper(period)) blocked_until, array_agg(lot_id) lots
          FROM reservations_hold
         WHERE order_id = %(order)s AND status = ANY(%(counting)s)) own
"""
"""What the offers need, in one statement (the order page of every paid order reads it): how
many holds count, where the order's blocked period ends, the next start on its lots of a
booking not its own nor its extensions' (what :func:`free_until` derives), its extensions'
ids, and the kind's prices."""


@dataclass(frozen=True)
class _Reading:
    holds: int
    blocked_until: datetime | None
    next_start: datetime | None
    extension_ids: list[int]
    prices: dict[int, Decimal]


def _read_for_offers(order: Order) -> _Reading:
    params: dict[str, Any] = {
        "order": order.pk,
        "kind": order.kind_id,
        "counting": [str(status) for status in Hold.COUNTING],
    }
    with connection.cursor() as cursor:
        cursor.execute(OFFER_READING, params)
        holds, blocked_until, next_start, ids, days, amounts = cursor.fetchone()
    prices = dict(zip(days or (), amounts or (), strict=True))
    return _Reading(holds, blocked_until, next_start, ids or [], prices)


def _pending(order: Order) -> Order | None:
    return order.extensions.filter(status__in=PENDING, joined_at__isnull=True).first()


def why_not(order: Order, now: datetime) -> str:
    """The refusal code for extending ``order`` now; empty when it may be extended."""
    return _refusal(order, now, _pending(order))


def _refusal(order: Order, now: datetime, pending: Order | None) -> str:
    """:func:`why_not`, given the order's pending extension (None: it has none)."""
    if order.extends_id is not None or order.status not in EXTENDABLE or now >= order.ends_at:
        return "not_extendable"
    if now > pay_by(order) - SHORTEST_PAYMENT_TIME:
        return "too_late_to_extend"
    if pending is not None:
        return "extension_pending"
    return ""


def offers(order: Order, *, now: datetime | None = None) -> Offers:
    """Each length (3, 7, 30 days) with its price today and whether the lots are free for it;
    and the order's extensions. An order that was never paid had none: no query is made."""
    now = now or timezone.now()
    if order.extends_id is not None or order.status not in (*EXTENDABLE, Order.STATUS_COMPLETED):
        return Offers("not_extendable", None, None, (), None, ())
    reading = _read_for_offers(order)
    made: tuple[Order, ...] = ()
    if reading.extension_ids:  # most orders have none: no second statement
        extensions = Order.objects.filter(pk__in=reading.extension_ids)
        made = tuple(extensions.order_by("created_at", "id"))
    pending = next((e for e in made if e.status in PENDING and e.joined_at is None), None)
    if order.status not in EXTENDABLE or now >= order.ends_at:
        return Offers("not_extendable", None, None, (), None, made)
    refused = _refusal(order, now, pending)
    if not reading.holds and not refused:
        refused = "not_extendable"
    until = _free_until(order, reading)
    prices = reading.prices
    listed = []
    for days in WINDOW_DAYS:
        if days not in prices:
            continue
        ends_at = order.ends_at + timedelta(days=days)
        fits = until is None or ends_at <= until
        elsewhere = (
            None
            if fits or refused
            else availability.earliest_handover(
                order.kind_id, days, order.lot_count, max(now, order.ends_at)
            )
        )
        listed.append(
            Offer(
                days=days,
                starts_at=order.ends_at,
                ends_at=ends_at,
                unit_price_usd=prices[days],
                total_usd=prices[days] * order.lot_count,
                fits=fits,
                elsewhere_from=elsewhere,
            )
        )
    return Offers(refused, pay_by(order), until, tuple(listed), pending, made)


def place_extension(
    order: Order,
    days: int,
    *,
    actor: Actor,
    checkpoints: list[dict[str, Any]] | None = None,
    abort_criteria: str = "",
    now: datetime | None = None,
) -> Order:
    """An extension of ``order`` by ``days``, holding its lots directly after its window.

        All or nothing: on ExtensionRefused (``not_extendable``, ``too_late_to_extend``,
        ``extension_pending``, ``invalid_window``, ``no_price``, ``checkpoints_required``,
        ``abort_criteria_required`` or a checkpoint's refusal, ``lots_not_free_until``) nothing
        was written. Announces ``order.extension_placed`` (its link is mailed by the caller, as for
    an order: ``notifications.enqueue_order_placed``)."""
    now = now or timezone.now()
    if days not in WINDOW_DAYS:
        raise ExtensionRefused("invalid_window")
    with transaction.atomic():
        # Locks: the order's row, then its lots' holds' lots (as placing does).
        parent = (
            Order.objects.select_for_update().select_related("kind", "environment").get(pk=order.pk)
        )
        refused = why_not(parent, now)
        if refused:
            raise ExtensionRefused(refused)
        price = Price.objects.filter(kind_id=parent.kind_id, window_days=days).first()
        if price is None:
            raise ExtensionRefused("no_price")
        holds = _holds(parent)
        if not holds:
            raise ExtensionRefused("not_extendable")
        planned = _campaign_plan(parent, days, checkpoints or [], abort_criteria)
        after = _blocked_until(holds)
        period = DateTimeTZRange(after, after + timedelta(days=days), "[)")
        deadline = min(now + fairness.hold_duration(True), pay_by(parent))
        extension = Order(
            reference=new_reference(),
            secret=new_secret(),
            **{name: getattr(parent, name) for name in CARRIED},
            status=Order.STATUS_AWAITING_PAYMENT,
            lot_count=len(holds),
            window_days=days,
            starts_at=parent.ends_at,
            ends_at=parent.ends_at + timedelta(days=days),
            abort_criteria=abort_criteria.strip() if days == Window.THIRTY_DAYS else "",
            unit_price_usd=price.amount_usd,
            total_usd=price.amount_usd * len(holds),
            hold_expires_at=deadline,
            contact_confirmed_at=parent.contact_confirmed_at or now,
            extends=parent,
        )
        try:
            with transaction.atomic():
                extension.save()
                Hold.objects.bulk_create(
                    Hold(order=extension, lot_id=hold.lot_id, period=period) for hold in holds
                )
        except IntegrityError as exc:
            if "one_pending_extension" in str(exc):
                raise ExtensionRefused("extension_pending") from None
            if not is_exclusion_violation(exc):
                raise
            until = free_until(parent)
            raise ExtensionRefused("lots_not_free_until", free_until=until) from None
        Checkpoint.objects.bulk_create(
            Checkpoint(order=extension, position=number, due_on=c.due_on, what=c.what)
            for number, c in enumerate(planned, start=1)
        )
        OrderEvent.objects.create(
            order=extension,
            actor=actor.user,
            actor_label=actor.label[:120],
            to_status=Order.STATUS_AWAITING_PAYMENT,
            reason=f"extends {parent.reference} by {days} days on the same lots; "
            f"pay by {deadline.isoformat()}",
        )
        record_note(
            parent,
            actor=actor,
            reason=f"extension {extension.reference} placed: {days} more days, to "
            f"{extension.ends_at.isoformat()}, if paid by {deadline.isoformat()}",
        )
        order_extension_placed.announce(order_id=extension.pk)
    log.info("extension placed", extra={"order": parent.reference, "days": days})
    return extension


def _campaign_plan(
    parent: Order, days: int, checkpoints: list[dict[str, Any]], abort_criteria: str
) -> list[Any]:
    """A 30-day extension is a campaign: its checkpoints and abort criteria, as a 30-day
    booking asks for them (the same rules), within the extension's own window."""
    if days != Window.THIRTY_DAYS:
        return []
    request = OrderRequest(
        kind=parent.kind.slug,
        lot_count=parent.lot_count,
        window_days=days,
        starts_at=parent.ends_at,
        environment=parent.environment.slug,
        usage_mode=parent.usage_mode,
        hypothesis=parent.hypothesis,
        contact_name=parent.contact_name,
        contact_email=parent.contact_email,
        ssh_public_keys="",
        checkpoints=checkpoints,
        abort_criteria=abort_criteria,
    )
    planned, refusals = planned_checkpoints(request)
    if refusals:
        code, params = refusals[0]
        raise ExtensionRefused(code, **params)
    if not abort_criteria.strip():
        raise ExtensionRefused("abort_criteria_required")
    return planned


def joinable(extension: Order) -> bool:
    """Whether the extension's days can still be added to its order's window: the order is
    paid and not ended, and its window still ends where the extension starts."""
    parent = extension.extends
    return (
        parent is not None
        and extension.joined_at is None
        and parent.status in EXTENDABLE
        and parent.ends_at == extension.starts_at
    )


def join(extension: Order, *, actor: Actor, now: datetime | None = None) -> Order | None:
    """Add an approved extension's days to its order's window; the order, or None (nothing
    changed) when it is not joinable any more (then it is provisioned as an order of its own).

    In the caller's transaction (approval's), under both rows' locks: each of the order's
    holds is widened to the extension's end on its lot (the extension's hold released into
    it, so capacity never has a gap), the order's end moves, its end-of-window mail is due
    again, and ``order.extended`` is announced."""
    now = now or timezone.now()
    if extension.extends_id is None:
        return None
    # Locks: the order's row, then the extension's (placing locks the order first too).
    parent = Order.objects.select_for_update().get(pk=extension.extends_id)
    locked = Order.objects.select_for_update().get(pk=extension.pk)
    locked.extends = parent
    if not joinable(locked):
        return None
    own = {hold.lot_id: hold for hold in _holds(parent)}
    theirs = list(Hold.objects.filter(order=locked, status__in=Hold.COUNTING))
    if {hold.lot_id for hold in theirs} != set(own):
        return None
    until = max(hold.period.upper for hold in theirs)
    Hold.objects.filter(pk__in=[hold.pk for hold in theirs]).update(
        status=Hold.Status.RELEASED, released_at=now
    )
    for hold in own.values():
        Hold.objects.filter(pk=hold.pk).update(
            period=DateTimeTZRange(hold.period.lower, until, "[)")
        )
    old_end = parent.ends_at
    Order.objects.filter(pk=parent.pk).update(
        ends_at=locked.ends_at, ending_mail_sent_at=None, updated_at=now
    )
    Order.objects.filter(pk=locked.pk).update(joined_at=now, updated_at=now)
    parent.ends_at = locked.ends_at
    locked.joined_at = now
    record_note(
        parent,
        actor=actor,
        reason=f"extended by {locked.window_days} days ({locked.reference}): the window ends "
        f"{locked.ends_at.isoformat()} instead of {old_end.isoformat()}",
    )
    if parent.status == Order.STATUS_ACTIVE:  # access continues on the same lots
        activate_joined(parent, actor=actor)
    notifications.enqueue_order_mail(parent, "order_extended")
    order_extended.announce(order_id=parent.pk, extension_id=locked.pk)
    return parent


def activate_joined(order: Order, *, actor: Actor) -> int:
    """``order`` became active: the extensions joined to it before its window began are
    active with it (a 30-day extension's campaign takes outcomes and early-end requests
    while it runs). In the caller's transaction; how many changed."""
    return sum(
        transition(
            extension,
            Order.STATUS_ACTIVE,
            allowed_from=[Order.STATUS_APPROVED],
            actor=actor,
            reason=f"{order.reference}, which it extends, is active",
        )
        for extension in Order.objects.filter(extends=order, joined_at__isnull=False)
    )


def pending_approval(order: Order) -> bool:
    """An extension of ``order`` is paid and waits for the operator: its access is not
    closed at the window's end until the operator decides."""
    return order.extensions.filter(status=Order.STATUS_PAID, joined_at__isnull=True).exists()
