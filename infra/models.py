"""What infrastructure keeps in the database: the reactions to domain events that failed."""

from __future__ import annotations

from django.db import models
from django.utils.formats import date_format
from django.utils.timezone import localtime
from django.utils.translation import gettext as _


class FailedReaction(models.Model):
    """A receiver of a domain event (infra.events) that raised: retried by beat with the same
    payload until it succeeds, then marked resolved; after ``events.MAX_ATTEMPTS`` it waits
    for the operator (the desk's Today lists it)."""

    event = models.CharField(max_length=80)
    receiver = models.CharField(max_length=200, help_text="The receiver's dotted path.")
    payload = models.JSONField()
    error = models.TextField(help_text="The last failure: its exception and message.")
    attempts = models.PositiveIntegerField(default=1)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolution = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                name="reaction_due",
                condition=models.Q(resolved_at__isnull=True),
            )
        ]

    def __str__(self) -> str:
        return f"{self.event} → {self.receiver}"

    @property
    def state(self) -> str:
        """Where it stands, in a few words: resolved, waiting for the operator, or when beat
        tries it again."""
        if self.resolved_at is not None:
            return self.resolution or _("resolved")
        if self.next_attempt_at is None:
            return _("waits for the operator")
        when = date_format(localtime(self.next_attempt_at), "SHORT_DATETIME_FORMAT")
        return _("attempt %(attempts)d failed; retried at %(when)s") % {
            "attempts": self.attempts,
            "when": when,
        }


class BeatClaim(models.Model):
    """One run of a periodic task in one of its slots (infra.beat): a second beat started
    by mistake sends the same slot, and finds it taken."""

    task = models.CharField(max_length=120)
    slot = models.BigIntegerField(help_text="The schedule's period number since the epoch.")
    claimed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "slot"], name="one_run_a_slot")]

    def __str__(self) -> str:
        return f"{self.task} #{self.slot}"
