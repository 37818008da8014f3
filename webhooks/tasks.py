"""Celery entry points for webhooks: thin and idempotent; PostgreSQL holds what is pending,
so a lost message or a killed worker only delays a delivery (``deliver_due`` finds it)."""

from __future__ import annotations

from celery import shared_task

from infra.beat import once_per_slot
from webhooks import services


@shared_task(name="webhooks.tasks.deliver", acks_late=True, ignore_result=True)
def deliver(delivery_id: int, *, by_hand: bool = False) -> bool:
    """One attempt of a due delivery (a second task for the same one does nothing)."""
    return services.deliver(delivery_id, by_hand=by_hand)


@shared_task(name="webhooks.tasks.deliver_due", acks_late=True, ignore_result=True)
@once_per_slot  # one run a period, however many beats send it
def deliver_due() -> int:
    """Beat, every few seconds: enqueue the retries that are due and the lost deliveries."""
    return services.queue_due()


@shared_task(name="webhooks.tasks.disable_failing", acks_late=True, ignore_result=True)
@once_per_slot  # one run a period, however many beats send it
def disable_failing() -> int:
    """Beat, hourly: turn off the endpoints failing for WEBHOOK_DISABLE_AFTER_DAYS."""
    return services.disable_failing()
