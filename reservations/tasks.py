"""Celery entry points for reservations: thin, idempotent where it matters, calling services."""

from __future__ import annotations

from smtplib import SMTPException

from celery import shared_task

from reservations import notifications, services
from reservations.models import Order


@shared_task(name="reservations.tasks.expire_unpaid_holds", acks_late=True)
def expire_unpaid_holds() -> int:
    """Beat runs this every minute; a missed run is caught up by the next one."""
    return services.expire_unpaid_holds()


@shared_task(
    name="reservations.tasks.send_order_placed",
    autoretry_for=(SMTPException, OSError),
    retry_backoff=True,
    max_retries=8,
)
def send_order_placed(order_id: int) -> None:
    """Mail the order's link. Retried with backoff while the mail server is away."""
    order = Order.objects.select_related("kind", "environment").get(pk=order_id)
    notifications.send_order_placed(order)
