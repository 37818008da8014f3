"""When a lot of an order is not usable: the incident, its replacement, and the credit.

An :class:`~reservations.models.Incident` opens when a lot fails its acceptance benchmark
(or, while access is open, a reading of its cards goes outside the kind's limits) and ends
when the lot is usable again for the order: access opened on a replacement lot, the lot
passed after all, or the window ended. Provisioning opens and ends them
(provisioning.replacement); this module keeps the rules:

- **one open incident per order and lot** (a partial unique key): two ticks or two workers
  seeing the same failure open one;
- **the replacement**: the booking moves (inventory.move_booking, audited, mailed) to a lot
  of the same kind that is free for the booking's period, a spare first (a lot kept out of
  sale for this), then any active lot;
- **the credit**: when the incident ends, the time it took from the order's own window,
  ``[max(start, window start), min(end, window end))`` (from the window's start for a lot
  that failed its acceptance: it never served the order), is credited pro rata to what the
  order paid for that lot (``seconds / (window × lots)`` of the order's price), once per
  incident (a unique key, not a check in Python), with no claim to file. The researcher
  takes it as time (:func:`take_as_time`: the hours added to the end of the window on the
  same lots, nothing to pay) or as money (:func:`take_as_money`: payments owes it back in
  the order's coin); an operator may refuse it with a reason (:func:`refuse`), mailed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange  # type: ignore[import-untyped]
from django.db.models import Case, IntegerField, Q, Value, When
from django.utils import timezone

from reservations import notifications
from reservations.errors import MESSAGES
from reservations.events import credit_decided, incident_opened, order_credited
from reservations.models import Credit, Hold, Incident, Lot, Order
from reservations.services import Actor, is_exclusion_violation, record_note

log = logging.getLogger(__name__)

DAY = timedelta(days=1)


REFUSALS = {
    "credit_decided": "credit_decided",
    "credit_window_over": "credit_window_over",
    "lots_not_free": "credit_lots_not_free",
    "reason_required": "credit_reason_required",
}
"""Why a credit is refused (the API's ``code``) → its message in reservations.errors."""


class CreditRefused(Exception):
    """A credit cannot be taken or refused that way now; ``code`` says why (REFUSALS)."""

    def __init__(self, code: str) -> None:
        self.message = str(MESSAGES[REFUSALS[code]])
        super().__init__(self.message)
        self.code = code


# --------------------------------------------------------------------------- incidents


def open_incident(
    order: Order,
    lot: Lot,
    *,
    kind: str,
    summary: str,
    evidence: dict[str, Any] | None = None,
    at: datetime,
    at_acceptance: bool = False,
) -> tuple[Incident, bool]:
    """The open incident of ``order`` on ``lot``, opened at ``at`` unless one is open
    already (then it is returned unchanged); whether this call opened it.

    An incident still open on a lot that replaced this one ends here: the time lost goes on
    under the new incident, never counted twice nor dropped."""
    if kind not in Incident.Kind.values:
        raise ValueError(f"unknown incident kind {kind!r}")
    with transaction.atomic():
        try:
            with transaction.atomic():
                incident = Incident.objects.create(
                    order=order,
                    lot=lot,
                    kind=kind,
                    summary=summary[:2000],
                    evidence=evidence or {},
                    started_at=at,
                    at_acceptance=at_acceptance,
                )
        except IntegrityError:  # one_open_incident_per_lot: another tick opened it
            return Incident.objects.get(order=order, lot=lot, ended_at__isnull=True), False
        for earlier in Incident.objects.filter(
            order=order, replacement=lot, ended_at__isnull=True
        ).exclude(pk=incident.pk):
            end_incident(earlier, at=at, why=f"its replacement {lot} failed in turn")
        record_note(order, actor=_actor(), reason=f"incident on {lot}: {summary[:300]}")
        incident_opened.announce(order_id=order.pk, incident_id=incident.pk)
    log.info("incident opened", extra={"order": order.reference, "lot": lot.pk, "kind": kind})
    return incident, True


def end_incident(incident: Incident, *, at: datetime, why: str) -> Credit | None:
    """End ``incident`` at ``at`` (once: a conditional update) and credit the time it took
    from the window; the credit, or None when nothing of the window was lost or another
    call ended it."""
    with transaction.atomic():
        ended = Incident.objects.filter(pk=incident.pk, ended_at__isnull=True).update(
            ended_at=max(at, incident.started_at)
        )
        if not ended:
            return None
        incident.ended_at = max(at, incident.started_at)
        record_note(
            incident.order, actor=_actor(), reason=f"incident on {incident.lot} ended: {why}"
        )
        return credit_for(incident)


def end_on_access(order: Order, lot: Lot, *, at: datetime) -> list[Credit]:
    """Access opened for ``order`` on ``lot`` at ``at``: the incidents it answers end (the
    lot's own, passed after all, and those that ``lot`` replaced)."""
    open_ones = Incident.objects.filter(order=order, ended_at__isnull=True).filter(
        Q(lot=lot) | Q(replacement=lot)
    )
    credits = []
    for incident in open_ones.select_related("order", "lot"):
        credit = end_incident(incident, at=at, why=f"access open on {lot}")
        if credit is not None:
            credits.append(credit)
    return credits


def end_with_window(order: Order, *, at: datetime) -> list[Credit]:
    """The order's window ended (or it was completed): its open incidents end with it, the
    rest of the window lost on each credited."""
    credits = []
    for incident in Incident.objects.filter(order=order, ended_at__isnull=True).select_related(
        "order", "lot"
    ):
        credit = end_incident(incident, at=min(at, order.ends_at), why="the window ended")
        if credit is not None:
            credits.append(credit)
    return credits


def spare_for(hold: Hold, *, failed: Lot) -> Lot | None:
    """A lot to replace ``failed`` for ``hold``'s booking: same kind, in service (a spare
    first, kept out of sale for this), no counting hold over the booking's period. Read
    without locks: the move decides under them and the exclusion constraint has the last
    word."""
    kind = Order.objects.values_list("kind_id", flat=True).get(pk=hold.order_id)
    busy = Hold.objects.filter(status__in=Hold.COUNTING, period__overlap=hold.period).values(
        "lot_id"
    )
    spare_first = Case(
        When(status=Lot.Status.SPARE, then=Value(0)), default=Value(1), output_field=IntegerField()
    )
    return (
        Lot.objects.filter(host__kind=kind, status__in=Lot.IN_SERVICE)
        .exclude(pk=failed.pk)
        .exclude(pk__in=busy)
        .select_related("host")
        .order_by(spare_first, "pk")
        .first()
    )


def record_replacement(incident: Incident, lot: Lot, ssh: list[str]) -> None:
    """The booking of ``incident``'s lot moved to ``lot``; ``ssh``: how to connect there."""
    Incident.objects.filter(pk=incident.pk).update(replacement=lot, replacement_ssh=ssh)
    incident.replacement, incident.replacement_ssh = lot, ssh


# --------------------------------------------------------------------------- credits


@dataclass(frozen=True)
class Lost:
    seconds: int
    share: Decimal
    value_usd: Decimal


def lost(incident: Incident) -> Lost:
    """What ``incident`` took from its order's own window (a joined extension's days are
    the extension's, paid by it): seconds, the part of the order's price, its value. A lot
    that failed its acceptance never served the order: from the window's start, whenever
    the failure was seen."""
    order = incident.order
    window_start = order.starts_at
    window_end = min(order.ends_at, order.starts_at + order.window_days * DAY)
    since = window_start if incident.at_acceptance else max(incident.started_at, window_start)
    end = incident.ended_at or window_end
    seconds = max(0, int((min(end, window_end) - since).total_seconds()))
    whole = order.window_days * int(DAY.total_seconds()) * order.lot_count
    share = (Decimal(seconds) / Decimal(whole)).quantize(Decimal("1e-8"), rounding=ROUND_DOWN)
    value = (order.total_usd * seconds / whole).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    return Lost(seconds, share, value)


def credit_for(incident: Incident) -> Credit | None:
    """The credit of an ended incident: inserted once (the incident's unique key), None
    when the incident took nothing from the window."""
    taken = lost(incident)
    if taken.seconds <= 0:
        return None
    try:
        with transaction.atomic():
            credit = Credit.objects.create(
                incident=incident,
                order=incident.order,
                seconds=taken.seconds,
                share=taken.share,
                value_usd=taken.value_usd,
            )
    except IntegrityError:  # credited already: one incident, one credit
        return None
    record_note(
        incident.order,
        actor=_actor(),
        reason=f"credit of {credit.hours} h ({taken.value_usd} USD) for the incident on "
        f"{incident.lot}: the researcher chooses time or money",
    )
    notifications.enqueue_order_mail(incident.order, "order_credited")
    order_credited.announce(order_id=incident.order_id, credit_id=credit.pk)
    return credit


def units_of(credit: Credit, paid_units: int) -> int:
    """The credit's part of ``paid_units`` (what the order's invoice took, in base units),
    rounded down: exactly ``seconds / (window × lots)`` of it."""
    order = credit.order
    whole = order.window_days * int(DAY.total_seconds()) * order.lot_count
    return paid_units * credit.seconds // whole


def decide(credit: Credit, status: str, *, actor: Actor, note: str, **fields: Any) -> bool:
    """The one change of a credit's status: offered → ``status``, once (a conditional
    update), with the audit entry ``note`` and ``credit.decided`` after commit (payments
    owes a credit taken as money, provisioning moves access for one taken as time).
    False: it was decided already."""
    with transaction.atomic():
        changed = Credit.objects.filter(pk=credit.pk, status=Credit.Status.OFFERED).update(
            status=status, decided_at=timezone.now(), **fields
        )
        if changed:
            record_note(credit.order, actor=actor, reason=note)
            credit_decided.announce(order_id=credit.order_id, credit_id=credit.pk)
    return bool(changed)


def take_as_time(credit: Credit, *, actor: Actor, now: datetime | None = None) -> Order:
    """The credit's hours are added to the end of the order's window on the same lots, with
    nothing to pay: every counting hold of the order reaches that much further (the
    exclusion constraint refuses a lot booked meanwhile: ``lots_not_free``, nothing
    changed), the order ends later and its end-of-window mail is due again; provisioning
    moves the open grants' end (``order.credited``). Refused once decided, or once the
    order's window has ended."""
    now = now or timezone.now()
    with transaction.atomic():
        # Locks: the order's row first (as placing and extending do), then the credit's.
        order = Order.objects.select_for_update().get(pk=credit.order_id)
        locked = Credit.objects.select_for_update().get(pk=credit.pk)
        if locked.status != Credit.Status.OFFERED:
            raise CreditRefused("credit_decided")
        if order.status not in Order.HOLDING_STATUSES or order.ends_at <= now:
            raise CreditRefused("credit_window_over")
        more = timedelta(seconds=locked.seconds)
        holds = list(Hold.objects.filter(order=order, status__in=Hold.COUNTING))
        try:
            with transaction.atomic():
                for hold in holds:
                    Hold.objects.filter(pk=hold.pk).update(
                        period=DateTimeTZRange(hold.period.lower, hold.period.upper + more, "[)")
                    )
        except IntegrityError as exc:
            if not is_exclusion_violation(exc):
                raise
            raise CreditRefused("lots_not_free") from None
        old_end = order.ends_at
        Order.objects.filter(pk=order.pk).update(
            ends_at=old_end + more, ending_mail_sent_at=None, updated_at=now
        )
        order.ends_at = old_end + more
        decide(
            locked,
            Credit.Status.TIME,
            actor=actor,
            note=f"credit of {locked.hours} h taken as time: the window ends "
            f"{order.ends_at.isoformat()} instead of {old_end.isoformat()}",
        )
    return order


def take_as_money(credit: Credit, *, actor: Actor) -> Credit:
    """The credit goes back as money in the order's coin: payments adds its part of what
    was paid to what the invoice owes back (``order.credited``), and the refund flow asks
    for the address."""
    with transaction.atomic():
        locked = Credit.objects.select_for_update().get(pk=credit.pk)
        if not decide(
            locked,
            Credit.Status.MONEY,
            actor=actor,
            note=f"credit of {locked.hours} h taken as money",
        ):
            raise CreditRefused("credit_decided")
    locked.refresh_from_db()
    return locked


def refuse(credit: Credit, *, actor: Actor, reason: str) -> Credit:
    """The operator refuses a credit not yet decided, saying why; the researcher is mailed."""
    if not reason.strip():
        raise CreditRefused("reason_required")
    with transaction.atomic():
        locked = Credit.objects.select_for_update().get(pk=credit.pk)
        if not decide(
            locked,
            Credit.Status.REFUSED,
            actor=actor,
            note=f"credit refused: {reason.strip()[:300]}",
            reason=reason.strip()[:500],
        ):
            raise CreditRefused("credit_decided")
        notifications.enqueue_order_mail(locked.order, "credit_refused")
    locked.refresh_from_db()
    return locked


def _actor() -> Actor:
    return Actor("system: incidents")


__all__ = [
    "CreditRefused",
    "credit_for",
    "decide",
    "end_incident",
    "end_on_access",
    "end_with_window",
    "open_incident",
    "record_replacement",
    "refuse",
    "spare_for",
    "take_as_money",
    "take_as_time",
]
