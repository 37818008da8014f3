"""Provisioning jobs: one per booked lot, resumable step by step."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from reservations.models import Lot, Order


class ProvisioningJob(models.Model):
    STEPS = (
        "prepare_access",
        "install_keys",
        "prepare_environment",
        "assign_cards",
        "run_validation",
        "fetch_report",
        "mark_ready",
    )

    class Status(models.TextChoices):
        PENDING = "pending", _("pending")
        RUNNING = "running", _("running")
        READY = "ready", _("ready")
        FAILED = "failed", _("failed")
        HELD = "held", _("held by the operator")
        REVOKED = "revoked", _("revoked")

    DELIVERED = (Status.READY, Status.REVOKED)
    """Done with provisioning: access was handed over (and maybe taken back since)."""

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="provisioning_jobs")
    lot = models.ForeignKey(Lot, on_delete=models.PROTECT, related_name="provisioning_jobs")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    steps_done = models.PositiveSmallIntegerField(default=0)
    accounts = models.JSONField(default=list)
    report = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    access_held = models.BooleanField(
        default=False,
        help_text=_("The operator holds access: the lot is prepared but not delivered"),
    )
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text=_("Last step recorded"))
    ready_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("order", "lot")
        constraints = [models.UniqueConstraint(fields=("order", "lot"), name="one_job_per_lot")]

    def __str__(self) -> str:
        return f"{self.order.reference} · {self.lot}"

    def ssh_command(self, account: str) -> str:
        """How the researcher connects to ``account`` on this lot's host."""
        host = self.lot.host
        return f"ssh -p {host.ssh_port} {account}@{host.address}"

    @property
    def ssh_commands(self) -> list[str]:
        return [self.ssh_command(account) for account in self.accounts]

    @property
    def next_step(self) -> str | None:
        return self.STEPS[self.steps_done] if self.steps_done < len(self.STEPS) else None
