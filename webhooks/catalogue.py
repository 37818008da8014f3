"""The webhook events an endpoint can ask for: their names, meanings and who may have them.

A researcher's endpoint hears of their own orders only; an operator's endpoint (made in the
desk) hears of every order and also of the events only operators act on."""

from __future__ import annotations

from dataclasses import dataclass

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

API_VERSION = "v1"
"""The payload's version: ``data.order`` is the order as ``GET /api/v1/orders/<ref>/`` returns
it. A change that is not additive is a new version, announced beforehand."""


@dataclass(frozen=True)
class EventType:
    name: str
    meaning: Promise
    operators_only: bool = False


EVENT_TYPES: tuple[EventType, ...] = (
    EventType("order.placed", _("An order was placed and holds its lots, awaiting payment.")),
    EventType("order.partially_paid", _("Part of what is due arrived; the rest is awaited.")),
    EventType("order.paid", _("The order is paid: its lots are booked.")),
    EventType("order.overpaid", _("More than due arrived: the difference is to be refunded.")),
    EventType(
        "order.paid_late",
        _("A payment that came after the hold ended was accepted: the order is paid."),
    ),
    EventType("order.approved", _("The operator approved the order: its lots are prepared.")),
    EventType(
        "order.extended",
        _("An extension was approved: the window ends later, access continues on the same lots."),
    ),
    EventType("report.ready", _("A lot's validation report is stored: passed or not, why.")),
    EventType("access.opened", _("SSH access to a lot is open.")),
    EventType("access.closing_soon", _("The window ends soon (the reminder mail's time).")),
    EventType("access.closed", _("A lot's access was removed at the window's end.")),
    EventType(
        "lot.incident_opened",
        _("A lot failed its checks: it is replaced where a spare is free, the time credited."),
    ),
    EventType(
        "lot.replaced",
        _("A failed lot's booking moved to a spare lot, prepared and validated there."),
    ),
    EventType(
        "order.credited",
        _("Time a lot was not usable is credited (offered), or was taken as time or money."),
    ),
    EventType("order.cancelled", _("The order was cancelled and its lots released.")),
    EventType("order.expired", _("The hold ended without a payment: the order expired.")),
    EventType("refund.sent", _("A refund's transaction was recorded (verified on-chain next).")),
    EventType(
        "lot.held",
        _("A lot's validation failed or crashed: it is held until the operator decides."),
        operators_only=True,
    ),
    EventType(
        "payment.needs_decision",
        _("A payment came late or for a coin no longer accepted: accept it or refund it."),
        operators_only=True,
    ),
)
BY_NAME = {event.name: event for event in EVENT_TYPES}
TEST_EVENT = "webhook.test"
"""What "send a test event" sends: the same envelope, with no order."""


def offered(*, operator: bool) -> list[EventType]:
    """The event types an endpoint of this kind may ask for."""
    return [event for event in EVENT_TYPES if operator or not event.operators_only]
