"""Celery entry points for infrastructure."""

from __future__ import annotations

from celery import shared_task

from infra import events
from infra.beat import once_per_slot


@shared_task(name="infra.tasks.retry_failed_reactions", acks_late=True)
@once_per_slot  # one run a period, however many beats send it
def retry_failed_reactions() -> int:
    """Beat, every minute: the reactions to domain events that failed and are due again."""
    return events.retry_failed()
