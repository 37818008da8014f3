"""30-day campaigns: reminders before each checkpoint, the outcome the researcher records at
each, and requests to end early. Every change to a checkpoint or an early-end request
happens here, with an audit entry on the order (OrderEvent).

A checkpoint is a day (UTC) within the window. Its reminder is due from the start of the
day before (REMINDER_LEAD) until the checkpoint's day is over: a beat that was down catches
up as long as the reminder still comes before its checkpoint, and a reminder is never sent
early or twice (a conditional update stamps ``reminder_sent_at`` in the transaction that
mails it). Its outcome is overdue for the operator once the day after it is over.
"""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, time, timedelta
from smtplib import SMTPException

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from infra.mail import send_templated
from reservations import notifications
from reservations.errors import MESSAGES
from reservations.models import Checkpoint, EarlyEndRequest, Order, Window
from reservations.services import Actor, record_note, system
from reservations.validation import has_bidi_controls

log = logging.getLogger(__name__)

REMINDER_LEAD = timedelta(days=1)
"""A checkpoint's reminder is due this long before its day begins (UTC)."""
OUTCOME_GRACE = timedelta(days=2)
"""An outcome not recorded this long after its day began (the day after it is over) is
overdue: the operator sees it on Today."""
NOTE_LIMIT = 2000
REMINDED = (Order.STATUS_PAID, Order.STATUS_APPROVED, Order.STATUS_ACTIVE)
"""Orders whose checkpoints are reminded: booked, the window ahead or running."""
RECORDING = (Order.STATUS_ACTIVE, Order.STATUS_COMPLETED)
"""Orders whose checkpoints take an outcome: the window running, or just over."""


class CampaignRefused(Exception):
    """A campaign action refused; ``code`` is a key of reservations.errors.MESSAGES."""

    def __init__(self, code: str, **params: object) -> None:
        message = MESSAGES[code]
        super().__init__(str(message) % params if params else str(message))
        self.code = code


def day_start(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


def reminder_due_at(checkpoint: Checkpoint) -> datetime:
    return day_start(checkpoint.due_on) - REMINDER_LEAD


def _stopped() -> Exists:
    """The order's campaign was stopped at an earlier checkpoint: nothing more to remind."""
    return Exists(
        Checkpoint.objects.filter(order=OuterRef("order"), outcome=Checkpoint.Outcome.STOP)
    )


def _reminder_due(now: datetime) -> Q:
    today = now.astimezone(UTC).date()
    return Q(
        reminder_sent_at__isnull=True,
        due_on__gte=today,  # its day not over yet: a late reminder still comes before it
        due_on__lte=(now + REMINDER_LEAD).astimezone(UTC).date(),
        order__status__in=REMINDED,
        order__window_days=Window.THIRTY_DAYS,
    )


def due_reminders(now: datetime) -> QuerySet[Checkpoint]:
    return Checkpoint.objects.filter(_reminder_due(now)).exclude(_stopped()).order_by("due_on")


def send_checkpoint_reminders(*, now: datetime | None = None) -> int:
    """Mail every reminder that is due and not yet sent; how many this call sent.

    Each is claimed by a conditional update of its stamp in the transaction that mails it:
    two workers never both send one, a mail server away rolls the stamp back for the next
    run. A crash after the mail left and before the commit sends it again (at least once,
    never silently none), as the order mails do.
    """
    now = now or timezone.now()
    sent = 0
    for checkpoint_id in due_reminders(now).values_list("pk", flat=True):
        try:
            sent += remind(checkpoint_id, now=now)
        except (SMTPException, OSError):
            log.warning("checkpoint reminder not sent; the next run retries", exc_info=True)
    return sent


def remind(checkpoint_id: int, *, now: datetime) -> bool:
    """Mail one checkpoint's reminder if it is due and unsent; True if this call sent it."""
    if not due_reminders(now).filter(pk=checkpoint_id).exists():
        return False
    with transaction.atomic():
        # The claim names only the row's own columns: PostgreSQL re-checks those on the
        # row a concurrent claim just committed (a condition through a join or subquery
        # would be judged on the old snapshot, and both workers would mail).
        claimed = Checkpoint.objects.filter(pk=checkpoint_id, reminder_sent_at__isnull=True).update(
            reminder_sent_at=now
        )
        if not claimed:
            return False
        checkpoint = Checkpoint.objects.select_related("order").get(pk=checkpoint_id)
        order = checkpoint.order
        confirmed = order.contact_confirmed_at is not None
        context = {
            "order": order,
            "checkpoint": checkpoint,
            "link": notifications.order_link(order),
            # Until the address proved itself, a mail carries nothing the booker typed.
            "name": order.contact_name if confirmed else "",
            "what": checkpoint.what if confirmed else "",
        }
        send_templated("checkpoint_reminder", context, order.contact_email, order.language)
        record_note(
            order,
            actor=system("campaign reminder"),
            reason=f"checkpoint {checkpoint.position} ({checkpoint.due_on}): reminder mailed",
        )
    return True


def _note(note: str, *, required: bool) -> str:
    note = (note or "").strip()
    if required and not note:
        raise CampaignRefused("required")
    if len(note) > NOTE_LIMIT:
        raise CampaignRefused("too_long", limit=NOTE_LIMIT)
    if has_bidi_controls(note):
        raise CampaignRefused("bidi_control")
    return note


def _lock_campaign(order: Order, statuses: tuple[str, ...]) -> Order:
    # Locks: this order's row, so that a status change and this action do not cross.
    locked = Order.objects.select_for_update(of=("self",)).get(pk=order.pk)
    if locked.window_days != Window.THIRTY_DAYS or locked.status not in statuses:
        raise CampaignRefused("campaign_not_running")
    return locked


def record_outcome(
    checkpoint: Checkpoint,
    *,
    outcome: str,
    note: str,
    actor: Actor,
    now: datetime | None = None,
) -> Checkpoint:
    """Record what the researcher decided at a checkpoint: continue, adjust or stop.

    Once per checkpoint (a conditional update: a second answer is refused, never mixed
    in), from the checkpoint's day on, while the window runs or just after it ended. A
    "stop" ends nothing by itself: ending early is a request the operator answers.
    """
    now = now or timezone.now()
    if outcome not in Checkpoint.Outcome.values:
        raise CampaignRefused("invalid_choice")
    note = _note(note, required=outcome != Checkpoint.Outcome.CONTINUE)
    with transaction.atomic():
        order = _lock_campaign(checkpoint.order, RECORDING)
        if now < day_start(checkpoint.due_on):
            raise CampaignRefused("checkpoint_not_yet")
        recorded = Checkpoint.objects.filter(pk=checkpoint.pk, outcome="").update(
            outcome=outcome, outcome_note=note, outcome_recorded_at=now
        )
        if not recorded:
            raise CampaignRefused("outcome_recorded")
        record_note(
            order,
            actor=actor,
            reason=f"checkpoint {checkpoint.position} ({checkpoint.due_on}): {outcome}"
            + (f" — {note}" if note else ""),
        )
    checkpoint.refresh_from_db()
    return checkpoint


def request_early_end(
    order: Order, *, reason: str, actor: Actor, now: datetime | None = None
) -> EarlyEndRequest:
    """Ask the operator to end a running campaign early. Nothing is revoked or refunded
    by itself: the request waits on Today until the operator answers it. One open request
    per order (checked under the order's lock; the database's constraint backs it)."""
    now = now or timezone.now()
    reason = _note(reason, required=True)
    with transaction.atomic():
        locked = _lock_campaign(order, (Order.STATUS_ACTIVE,))
        if EarlyEndRequest.objects.filter(order=locked, handled_at__isnull=True).exists():
            raise CampaignRefused("early_end_open")
        request = EarlyEndRequest.objects.create(order=locked, requested_at=now, reason=reason)
        record_note(locked, actor=actor, reason=f"early end requested: {reason}")
    return request


def answer_early_end(
    request: EarlyEndRequest, *, actor: Actor, note: str, now: datetime | None = None
) -> bool:
    """The operator's answer to an early-end request (what was decided: ended and refunded
    in part, or kept running). Once (a conditional update); True if this call answered it."""
    now = now or timezone.now()
    note = _note(note, required=True)
    with transaction.atomic():
        answered = EarlyEndRequest.objects.filter(pk=request.pk, handled_at__isnull=True).update(
            handled_at=now, handled_by=actor.label[:120], handling_note=note
        )
        if answered:
            record_note(request.order, actor=actor, reason=f"early-end request answered: {note}")
            notifications.enqueue_order_mail(request.order, "early_end_answered")
    return bool(answered)


def outcomes_overdue(now: datetime) -> QuerySet[Checkpoint]:
    """Checkpoints of running campaigns whose outcome is overdue (not stopped before)."""
    return (
        Checkpoint.objects.filter(
            outcome="",
            due_on__lte=(now - OUTCOME_GRACE).astimezone(UTC).date(),
            order__status=Order.STATUS_ACTIVE,
        )
        .exclude(_stopped())
        .select_related("order")
        .order_by("due_on")
    )


def open_early_end_requests() -> QuerySet[EarlyEndRequest]:
    return EarlyEndRequest.objects.filter(handled_at__isnull=True).select_related("order")


def may_record(checkpoint: Checkpoint, now: datetime) -> bool:
    """Whether the order page offers the outcome form for this checkpoint."""
    return (
        not checkpoint.outcome
        and checkpoint.order.status in RECORDING
        and now >= day_start(checkpoint.due_on)
    )
