"""Provisioning jobs: one per booked lot, resumable step by step."""

from __future__ import annotations

from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import DateTimeRangeField, RangeOperators
from django.db import models
from django.db.models import Q
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
        PREPARED = "prepared", _("prepared, opens at the window's start")
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
    run_token = models.CharField(
        max_length=32, blank=True, editable=False, help_text=_("The run that holds the job")
    )
    created_at = models.DateTimeField(auto_now_add=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text=_("Last step recorded"))
    ready_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    replaced_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=_("The booking moved to a spare lot: this lot's access is closed, not opened"),
    )

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
    def access_grant(self) -> AccessGrant | None:
        """This job's access grant, open or closed; None before its preparation began."""
        try:
            grant: AccessGrant = self.grant
        except AccessGrant.DoesNotExist:
            return None
        return grant

    @property
    def open_grant(self) -> AccessGrant | None:
        """The grant under which this job may touch the lot now (None: not yet, or closed)."""
        grant = self.access_grant
        return grant if grant is not None and grant.closed_at is None else None

    @property
    def next_step(self) -> str | None:
        return self.STEPS[self.steps_done] if self.steps_done < len(self.STEPS) else None


class AccessGrant(models.Model):
    """One order's use of one lot's cards: from the start of its preparation (account,
    environment, the acceptance benchmark on the cards) to the confirmed removal of its
    access, and the booking's turnaround after its window.

    ``period`` is [opened_at, ∞) while the grant is open, and [opened_at, the later of
    closed_at and window_end + turnaround) once the revocation is confirmed. An exclusion
    constraint over (lot, period) covers every grant ever made, so at no instant can two
    orders have access to one lot, whatever code path, worker or clock tries: a revocation
    that failed keeps the period open and the next tenant's grant cannot be inserted until
    it is confirmed.

    The window's bounds are copied from the order and checked in the database too: a grant
    never opens before ``prepare_from`` (the window's start less the preparation lead) and
    keys go in only inside the paid window.
    """

    job = models.OneToOneField(ProvisioningJob, on_delete=models.PROTECT, related_name="grant")
    lot = models.ForeignKey(Lot, on_delete=models.PROTECT, related_name="access_grants")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="access_grants")
    period = DateTimeRangeField()
    prepare_from = models.DateTimeField(help_text=_("The earliest the lot may be prepared"))
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    opened_at = models.DateTimeField(help_text=_("Preparation started: the cards are this order's"))
    keys_at = models.DateTimeField(
        null=True, blank=True, help_text=_("The researcher's keys went in: access opened")
    )
    closed_at = models.DateTimeField(
        null=True, blank=True, help_text=_("Access removed on the host, confirmed")
    )
    revoke_error = models.TextField(
        blank=True, help_text=_("Why the last revocation failed (the lot stays closed)")
    )
    alerted_at = models.DateTimeField(
        null=True, blank=True, help_text=_("When the operator was told the revocation failed")
    )

    class Meta:
        ordering = ("lot", "opened_at")
        constraints = [
            ExclusionConstraint(
                name="access_no_overlap_per_lot",
                expressions=[("lot", RangeOperators.EQUAL), ("period", RangeOperators.OVERLAPS)],
            ),
            models.CheckConstraint(
                condition=Q(opened_at__gte=models.F("prepare_from")),
                name="access_not_before_the_lead",
            ),
            models.CheckConstraint(
                condition=Q(keys_at__isnull=True)
                | Q(keys_at__gte=models.F("window_start"), keys_at__lt=models.F("window_end")),
                name="access_keys_inside_the_window",
            ),
            models.CheckConstraint(
                condition=Q(closed_at__isnull=True) | Q(closed_at__gte=models.F("opened_at")),
                name="access_closed_after_opened",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.order.reference} on {self.lot}"

    @property
    def is_open(self) -> bool:
        return self.closed_at is None


class SplitTest(models.Model):
    """The researcher's own training command measured on one card, then two, by
    ``gpulots split-test`` in their account, and uploaded with their API token: the report
    as uploaded (provisioning.split_tests checks its shape, never trusts its content), and
    what the lists show of it. Written only by provisioning.split_tests.attach_split_test."""

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="split_tests")
    job = models.ForeignKey(
        ProvisioningJob,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="split_tests",
        help_text=_("The lot it ran on, when the report names one of the order's jobs"),
    )
    report = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    answer = models.CharField(
        max_length=12, blank=True, help_text=_("The verdict's answer: yes, no, not_answered")
    )
    code = models.CharField(max_length=40, blank=True, help_text=_("The verdict's code"))
    speedup = models.FloatField(
        null=True,
        blank=True,
        help_text=_("Two cards against one: step time, or samples per second for a bigger batch"),
    )
    stand_in = models.BooleanField(
        default=False, help_text=_("Measured on a CPU stand-in, not on the cards")
    )

    class Meta:
        ordering = ("-created_at", "-id")
        indexes = [models.Index(fields=["order", "-created_at"], name="split_test_order_newest")]

    def __str__(self) -> str:
        return f"{self.order.reference} · split test {self.pk}"


class HealthReading(models.Model):
    """One health reading of a lot's cards while its access is open (provisioning.health):
    what the probe read on the host (``cards``, per card: UUID, temperature, throttle mask,
    ECC counters, remapped rows), the XID lines since the previous reading, and what was
    judged outside the kind's limits (``findings``; empty: healthy). A short time series per
    lot: readings older than PROVISIONING_HEALTH_KEEP_HOURS are dropped."""

    job = models.ForeignKey(ProvisioningJob, on_delete=models.CASCADE, related_name="readings")
    lot = models.ForeignKey(Lot, on_delete=models.CASCADE, related_name="health_readings")
    taken_at = models.DateTimeField()
    healthy = models.BooleanField()
    tool = models.CharField(
        max_length=12, blank=True, help_text=_("nvidia-smi, amd-smi or stand-in (no GPU tool)")
    )
    cards = models.JSONField(default=list, blank=True)
    xid = models.JSONField(default=list, blank=True)
    findings = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True, help_text=_("Why no reading came (host not reached)"))
    seconds = models.FloatField(null=True, blank=True, help_text=_("The probe's own time"))

    class Meta:
        ordering = ("-taken_at", "-id")
        indexes = [
            models.Index(fields=["job", "-taken_at"], name="reading_job_newest"),
            models.Index(fields=["lot", "-taken_at"], name="reading_lot_newest"),
        ]

    def __str__(self) -> str:
        return (
            f"{self.lot} at {self.taken_at:%Y-%m-%d %H:%M} ({'healthy' if self.healthy else 'not'})"
        )

    @property
    def stand_in(self) -> bool:
        return self.tool == "stand-in"
