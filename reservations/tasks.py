"""Celery entry points for reservations: thin, idempotent where it matters, calling services."""

from __future__ import annotations

from smtplib import SMTPException

from celery import shared_task

from infra.beat import once_per_slot
from reservations import campaign, notifications


@shared_task(
    name="reservations.tasks.send_order_placed",
    autoretry_for=(SMTPException, OSError),
    retry_backoff=True,
    max_retries=8,
)
def send_order_placed(order_id: int) -> bool:
    """Mail the order's link, unless it was mailed already. Retried with backoff while the
    mail server is away; a lost message is caught up by ``send_missing_order_mails``."""
    return notifications.send_order_placed_once(order_id)


@shared_task(
    name="reservations.tasks.send_order_mail",
    autoretry_for=(SMTPException, OSError),
    retry_backoff=True,
    max_retries=8,
)
def send_order_mail(order_id: int, name: str) -> None:
    """Payment settled, hold expired: mailed in the order's language, retried while the
    mail server is away."""
    notifications.send_order_mail(order_id, name)


@shared_task(name="reservations.tasks.send_missing_order_mails", acks_late=True)
@once_per_slot  # one run a period, however many beats send it
def send_missing_order_mails() -> int:
    """Beat: mail every recent order whose link was never mailed (broker down when it was
    placed, task lost, worker killed)."""
    return notifications.send_missing_order_mails()


@shared_task(name="reservations.tasks.send_checkpoint_reminders", acks_late=True)
@once_per_slot  # one run a period, however many beats send it
def send_checkpoint_reminders() -> int:
    """Beat: mail the reminders of 30-day campaigns' checkpoints that are due (catching up
    after downtime, never twice: reservations.campaign)."""
    return campaign.send_checkpoint_reminders()
