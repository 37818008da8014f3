"""Celery entry points for reservations: thin, idempotent, calling services."""

from celery import shared_task

from reservations import services


@shared_task(name="reservations.tasks.expire_unpaid_holds", acks_late=True)
def expire_unpaid_holds() -> int:
    """Beat runs this every minute; a missed run is caught up by the next one."""
    return services.expire_unpaid_holds()
