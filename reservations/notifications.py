"""Mail to researchers about their orders, in the language they booked in."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.crypto import salted_hmac

from infra.mail import send_templated
from reservations.models import Credit, Order

log = logging.getLogger(__name__)


def order_link(order: Order) -> str:
    with translation.override(order.language):
        path = reverse("pages:order", args=[order.reference, order.secret])
    return f"{settings.SITE_URL}{path}"


def contact_token(order: Order) -> str:
    """The key of the confirmation link mailed to the order's contact address: only a
    reader of that mailbox (or of the order page's link, which the booker already has)
    can present it."""
    return salted_hmac("reservations.contact", f"{order.reference}:{order.secret}").hexdigest()[:32]


def confirm_link(order: Order) -> str:
    with translation.override(order.language):
        path = reverse(
            "pages:confirm_contact",
            args=[order.reference, order.secret, contact_token(order)],
        )
    return f"{settings.SITE_URL}{path}"


def _send(order: Order, name: str) -> None:
    """Until the contact address proved itself, a mail carries nothing the booker wrote (a
    stranger could book with anyone's address and a phishing line for a name)."""
    confirmed = order.contact_confirmed_at is not None
    context = {
        "order": order,
        "link": order_link(order),
        "name": order.contact_name if confirmed else "",
        "confirm_link": "" if confirmed else confirm_link(order),
        "ssh_keys": (
            list(order.ssh_keys.values_list("algorithm", "fingerprint"))
            if name == "order_placed"
            else []
        ),
        # A campaign's checkpoints: their days always, what the booker wrote once confirmed.
        "checkpoints": (list(order.campaign_checkpoints.all()) if name == "order_placed" else []),
        "abort_criteria": order.abort_criteria if confirmed else "",
        "confirmed": confirmed,
        # The operator's newest answer to an early-end request (the operator wrote it).
        "early_end": (
            order.early_end_requests.filter(handled_at__isnull=False)
            .order_by("-handled_at")
            .first()
            if name == "early_end_answered"
            else None
        ),
    }
    if name == "order_cancelled":  # why (the operator's or the researcher's words), and
        # whether money came in (all of it to be refunded; refund_due mails for an address)
        cancelled = order.events.filter(to_status=Order.STATUS_CANCELLED).order_by("-id").first()
        context["cancellation"] = cancelled
        context["was_paid"] = cancelled is not None and cancelled.from_status == Order.STATUS_PAID
    if name == "lot_replaced":  # the newest replacement: what failed, where it went
        grace = settings.PROVISIONING_REPLACED_ACCESS_GRACE
        context["grace_minutes"] = int(grace.total_seconds() // 60)
        context["replaced"] = (
            order.incidents.filter(replacement__isnull=False)
            .select_related("lot__host", "replacement__host")
            .first()
        )
    credits = order.credits.select_related("incident__lot__host").order_by("-id")
    if name == "order_credited":  # the newest credit
        context["credit"] = credits.first()
    if name == "credit_refused":  # the newest refusal
        refused = credits.filter(status=Credit.Status.REFUSED)
        context["credit"] = refused.order_by("-decided_at", "-id").first()
    send_templated(name, context, order.contact_email, order.language)


def send_once(order_id: int, name: str, stamp: str, *, now: datetime | None = None) -> bool:
    """Mail ``name`` unless the order's ``stamp`` field says it went; stamp it. True if this
    call sent it.

    The row is locked while the mail goes out, so two workers never both send it; a crash
    after sending and before commit sends it again (at least once, never silently none).
    """
    with transaction.atomic():
        # Locks: this order's row.
        order = (
            Order.objects.select_for_update(of=("self",))
            .select_related("kind", "environment")
            .filter(pk=order_id, **{f"{stamp}__isnull": True})
            .first()
        )
        if order is None:
            return False
        _send(order, name)
        Order.objects.filter(pk=order.pk).update(**{stamp: now or timezone.now()})
    return True


def send_order_placed_once(order_id: int) -> bool:
    """Mail the order's link (what was booked; the link is how a guest comes back) once."""
    return send_once(order_id, "order_placed", "placed_mail_sent_at")


MAIL_CATCH_UP = timedelta(days=2)
"""Orders older than this without a mail are left to the operator (the link is in the admin)."""


def send_missing_order_mails(*, now: datetime | None = None) -> int:
    """Send the link of every order placed in the last two days but not mailed yet."""
    now = now or timezone.now()
    pending = Order.objects.filter(
        placed_mail_sent_at__isnull=True,
        created_at__gte=now - MAIL_CATCH_UP,
        created_at__lte=now - timedelta(minutes=1),  # leave fresh orders to their own task
    ).values_list("pk", flat=True)
    return sum(1 for order_id in pending if send_order_placed_once(order_id))


ORDER_MAILS = (
    "order_paid",
    "order_expired",
    "order_active",
    "order_ending",
    "order_revoked",
    "booking_moved",
    "early_end_answered",
    "order_extended",
    "order_cancelled",
    "lot_replaced",
    "order_credited",
    "credit_refused",
)
"""Mails about an order's progress (the placed mail has its own once-only path above)."""


def send_order_mail(order_id: int, name: str) -> None:
    if name not in ORDER_MAILS:
        raise ValueError(name)
    _send(Order.objects.select_related("kind", "environment", "extends").get(pk=order_id), name)


def enqueue_order_mail(order: Order, name: str) -> None:
    """After commit, hand ``name`` to a worker; a broker outage is logged, never raised."""

    def enqueue() -> None:
        try:
            _queue("send_order_mail", order.pk, name)
        except Exception:  # any broker failure: the state change stands
            log.warning("order mail not queued", exc_info=True, extra={"order": order.reference})

    transaction.on_commit(enqueue)


def enqueue_order_placed(order: Order) -> None:
    """After commit, hand the mail to a worker; if the broker is away, the beat catch-up
    sends it later. Placing the order never fails because of mail."""

    def enqueue() -> None:
        try:
            _queue("send_order_placed", order.pk)
        except Exception:  # any broker failure: the database still says "not mailed"
            log.warning(
                "order mail not queued; the catch-up will send it",
                exc_info=True,
                extra={"order": order.reference},
            )

    transaction.on_commit(enqueue)


def _queue(task: str, *args: object) -> None:
    # The tasks' module imports this one: its tasks are looked up when first queued.
    from reservations import tasks

    getattr(tasks, task).delay(*args)
