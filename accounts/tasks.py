"""Celery entry points for accounts: thin, calling the services."""

from __future__ import annotations

from smtplib import SMTPException

from celery import Task, shared_task

from accounts import services


@shared_task(
    bind=True,
    name="accounts.tasks.send_sign_in_link",
    autoretry_for=(SMTPException, OSError),
    retry_backoff=True,
    max_retries=5,
)
def send_sign_in_link(self: Task, email: str, language: str, client: str) -> bool:
    """Check the limits, create the account if new, mail the link (or silently not).
    Retried with backoff while the mail server is away; a retry is not counted again."""
    return services.send_sign_in_link(email, language, client, count=self.request.retries == 0)
