"""What webhooks keep in PostgreSQL: the endpoints, each event's message (its payload, built
once), one delivery per endpoint (its state, due time and lease) and every attempt. The
pending deliveries are the queue's truth: a lost broker message or a killed worker leaves the
row, which beat finds again (webhooks.services.queue_due)."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils.translation import gettext_lazy as _


def endpoint_id() -> str:
    return f"ep_{secrets.token_urlsafe(12)}"


def message_id() -> str:
    return f"msg_{secrets.token_urlsafe(18)}"


class Endpoint(models.Model):
    """A URL that hears of events: a researcher's (their own orders) or, made in the desk,
    an operator's (every order, and the operators' events)."""

    public_id = models.CharField(max_length=24, unique=True, default=endpoint_id, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhook_endpoints"
    )
    all_orders = models.BooleanField(
        _("every order"),
        default=False,
        help_text=_("An operator's endpoint: every order, and the events only operators get."),
    )
    url = models.URLField(_("URL"), max_length=500)
    description = models.CharField(_("description"), max_length=200, blank=True)
    event_types = ArrayField(
        models.CharField(max_length=40),
        default=list,
        blank=True,
        verbose_name=_("events"),
        help_text=_("None chosen: every event this endpoint may receive."),
    )
    enabled = models.BooleanField(_("enabled"), default=True)
    secret_sealed = models.TextField(editable=False)
    """The signing secret, encrypted with WEBHOOK_SECRETS_KEY (webhooks.signing)."""
    previous_secret_sealed = models.TextField(blank=True, editable=False)
    previous_secret_until = models.DateTimeField(null=True, blank=True, editable=False)
    """After a rotation, the old secret also signs until then (both signatures are sent)."""
    failing_since = models.DateTimeField(null=True, blank=True, editable=False)
    """The first failed attempt since the last success; cleared by a success."""
    disabled_reason = models.CharField(max_length=200, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "pk"]
        verbose_name = _("webhook endpoint")
        verbose_name_plural = _("webhook endpoints")

    def __str__(self) -> str:
        return self.url

    def wants(self, event_type: str) -> bool:
        return not self.event_types or event_type in self.event_types


class Message(models.Model):
    """One event, as every endpoint receives it: its ``webhook-id`` and its payload."""

    public_id = models.CharField(max_length=40, unique=True, default=message_id, editable=False)
    event_type = models.CharField(max_length=40)
    key = models.CharField(max_length=120, unique=True)
    """What happened, once (type and primary keys): a receiver retried adds no second message."""
    order = models.ForeignKey(
        "reservations.Order", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    payload = models.JSONField()
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"{self.event_type} {self.public_id}"


class Delivery(models.Model):
    """A message to one endpoint: tried at once, then retried with back-off until it is
    answered with a 2xx or the schedule is spent (webhooks.services.RETRY_SCHEDULE)."""

    class Status(models.TextChoices):
        PENDING = "pending", _("pending")
        DELIVERED = "delivered", _("delivered")
        FAILED = "failed", _("failed")

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="deliveries")
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="deliveries")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    """When a task was last enqueued for it (beat enqueues again only well after)."""
    leased_until = models.DateTimeField(null=True, blank=True)
    """A worker is posting it until then; past it, the worker is presumed dead."""
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name_plural = _("deliveries")
        constraints = [
            models.UniqueConstraint(fields=["message", "endpoint"], name="one_delivery_each")
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                name="webhook_delivery_due",
                condition=models.Q(status="pending"),
            )
        ]

    def __str__(self) -> str:
        return f"{self.message.event_type} → {self.endpoint.url}"


class Attempt(models.Model):
    """One POST of a delivery: what the endpoint answered, or why there was no answer."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response = models.TextField(blank=True, help_text="The answer's first bytes.")
    error = models.CharField(max_length=300, blank=True)
    by_hand = models.BooleanField(default=False, help_text="A redelivery asked for by hand.")

    class Meta:
        ordering = ["-started_at", "-pk"]

    def __str__(self) -> str:
        return f"attempt {self.number}: {self.status_code or self.error}"

    @property
    def succeeded(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300
