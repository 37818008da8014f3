"""The catalogue (kinds, prices, environments, hosts, lots) and orders with their holds.

The guarantee against double booking lives in the database: ``Hold`` carries a PostgreSQL
exclusion constraint over (lot, blocked period) for every hold that still counts, so no
code path, admin edit or concurrent worker can give one lot to two overlapping windows.

One module over 600 lines, on purpose: the models share constraints and foreign keys
across each other (a hold's constraint names its lot and order), and Django finds them here.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import DateTimeRangeField, IntegerRangeField, RangeOperators
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import F, Func, Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

WINDOW_DAYS = (3, 7, 30)


class Window(models.IntegerChoices):
    """The three research windows the seed describes, and what each is for."""

    THREE_DAYS = 3, _("3 days — a distribution validation prepared in advance")
    SEVEN_DAYS = 7, _("7 days — several variants and their evaluation")
    THIRTY_DAYS = 30, _("30 days — an accompanied campaign with checkpoints and abort criteria")


class Stack(models.TextChoices):
    CUDA = "cuda", "CUDA"
    ROCM = "rocm", "ROCm"


def _share(value: float) -> None:
    if not 0 <= value <= 1:
        raise ValidationError(_("A share between 0 and 1."))


SHARE = _share


class HardwareKind(models.Model):
    """A kind of two-card lot, e.g. 2× NVIDIA H200 141 GB."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=80)
    vendor = models.CharField(max_length=40)
    generation = models.CharField(max_length=40, help_text=_("e.g. Blackwell, Hopper, CDNA 3"))
    stack = models.CharField(max_length=8, choices=Stack.choices)
    memory_per_card_gb = models.PositiveIntegerField(help_text=_("GB (10⁹ bytes) per card"))
    cards_per_lot = models.PositiveSmallIntegerField(default=2, editable=False)
    interconnect = models.CharField(max_length=80, blank=True)
    architecture = models.CharField(
        max_length=20,
        help_text=_("What the software stack must target, e.g. sm_100, sm_90, gfx942"),
    )
    description = models.TextField(blank=True)
    display_order = models.PositiveSmallIntegerField(default=0)
    is_offered = models.BooleanField(default=True)

    # The acceptance benchmark's references for this kind (passed as --thresholds; empty:
    # not checked). Datasheet figures are dense (not sparse) peaks per card.
    accept_sku = models.CharField(
        _("expected device name"),
        max_length=40,
        blank=True,
        help_text=_("A part of the name NVML or the driver reports, e.g. H200"),
    )
    accept_memory_gib = models.FloatField(
        _("nameplate memory (GiB)"),
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text=_("Per card, GiB (2³⁰ bytes)"),
    )
    accept_memory_share_min = models.FloatField(
        _("usable memory, least share of nameplate"), default=0.9, validators=[SHARE]
    )
    accept_bf16_tflops = models.FloatField(
        _("BF16 dense peak (TFLOP/s)"), null=True, blank=True, validators=[MinValueValidator(0)]
    )
    accept_fp8_tflops = models.FloatField(
        _("FP8 dense peak (TFLOP/s)"),
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text=_("Empty: FP8 not supported or not checked"),
    )
    accept_hbm_tbps = models.FloatField(
        _("HBM bandwidth (TB/s)"), null=True, blank=True, validators=[MinValueValidator(0)]
    )
    accept_matmul_share_min = models.FloatField(
        _("matrix product, least share of peak"), default=0.6, validators=[SHARE]
    )
    accept_hbm_share_min = models.FloatField(
        _("HBM bandwidth, least share of the datasheet"), default=0.7, validators=[SHARE]
    )
    accept_busbw_gbps_min = models.FloatField(
        _("all-reduce bus bandwidth, least (GB/s)"),
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text=_("At the largest message size, as nccl-tests reports busbw (10⁹ bytes/s)"),
    )
    accept_card_tolerance = models.FloatField(
        _("tolerance between the two cards"),
        default=0.1,
        validators=[SHARE],
        help_text=_("0.1: the two cards' matrix product and HBM figures within 10 %"),
    )
    accept_min_torch = models.CharField(_("least PyTorch"), max_length=16, blank=True)
    accept_min_cuda = models.CharField(_("least CUDA"), max_length=16, blank=True)
    accept_min_rocm = models.CharField(_("least ROCm"), max_length=16, blank=True)
    accept_min_driver = models.CharField(_("least driver"), max_length=16, blank=True)
    accept_ecc_required = models.BooleanField(_("ECC required"), default=True)
    accept_mig_allowed = models.BooleanField(_("MIG allowed"), default=False)
    health_max_temperature_c = models.PositiveSmallIntegerField(
        _("hottest a card may run (°C)"),
        default=90,
        validators=[MinValueValidator(40)],
        help_text=_(
            "During the window, a card reading hotter (GPU temperature; AMD: hotspot) is an "
            "incident"
        ),
    )

    class Meta:
        ordering = ("display_order", "name")
        constraints = [
            models.CheckConstraint(condition=Q(cards_per_lot=2), name="kind_two_cards_per_lot"),
            models.CheckConstraint(condition=Q(memory_per_card_gb__gt=0), name="kind_memory_pos"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def memory_per_lot_gb(self) -> int:
        return self.memory_per_card_gb * self.cards_per_lot

    def acceptance_thresholds(self) -> dict[str, Any]:
        """The references the acceptance benchmark checks this kind's cards against (its
        --thresholds, provisioning/validation/benchmark.py); what is empty is left out."""
        figures: dict[str, Any] = {
            "sku": self.accept_sku,
            "memory_gib": self.accept_memory_gib,
            "memory_share_min": self.accept_memory_share_min,
            "bf16_tflops": self.accept_bf16_tflops,
            "fp8_tflops": self.accept_fp8_tflops,
            "hbm_tbps": self.accept_hbm_tbps,
            "matmul_share_min": self.accept_matmul_share_min,
            "hbm_share_min": self.accept_hbm_share_min,
            "busbw_gbps_min": self.accept_busbw_gbps_min,
            "card_tolerance": self.accept_card_tolerance,
            "min_torch": self.accept_min_torch,
            "min_cuda": self.accept_min_cuda if self.stack != Stack.ROCM else "",
            "min_rocm": self.accept_min_rocm if self.stack == Stack.ROCM else "",
            "min_driver": self.accept_min_driver,
            "arch": self.architecture,
            "ecc_required": self.accept_ecc_required,
            "mig_allowed": self.accept_mig_allowed,
        }
        return {key: value for key, value in figures.items() if value not in (None, "")}


class Price(models.Model):
    """What one lot of a kind costs for one window, in USD. Orders copy it when placed."""

    kind = models.ForeignKey(HardwareKind, on_delete=models.CASCADE, related_name="prices")
    window_days = models.PositiveSmallIntegerField(choices=Window.choices)
    amount_usd = models.DecimalField(
        max_digits=10, decimal_places=2, validators=[MinValueValidator(Decimal("0.01"))]
    )

    class Meta:
        ordering = ("kind", "window_days")
        constraints = [
            models.UniqueConstraint(fields=("kind", "window_days"), name="price_unique_window"),
            models.CheckConstraint(condition=Q(window_days__in=WINDOW_DAYS), name="price_window"),
            models.CheckConstraint(condition=Q(amount_usd__gt=0), name="price_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} · {self.window_days} d · {self.amount_usd} USD"


ENVIRONMENT_SLUG = RegexValidator(
    r"^[a-z0-9][-a-z0-9_.]*$", _("Lowercase letters, digits, dots, hyphens and underscores.")
)


class Environment(models.Model):
    """What is prepared on the host for the researcher, and which kinds it runs on."""

    slug = models.CharField(
        max_length=50,
        unique=True,
        validators=[ENVIRONMENT_SLUG],
        help_text=_("e.g. pytorch-2.9-cuda-12.8: versions keep their dots"),
    )
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    stack = models.CharField(
        max_length=8, choices=Stack.choices, blank=True, help_text=_("Empty: stack-neutral")
    )
    compatible_kinds = models.ManyToManyField(HardwareKind, related_name="environments")
    display_order = models.PositiveSmallIntegerField(default=0)
    is_offered = models.BooleanField(default=True)

    class Meta:
        ordering = ("display_order", "name")

    def __str__(self) -> str:
        return self.name


HOST_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
"""A host name: DNS labels of lowercase letters, digits and inner hyphens, joined by single
dots. Written so that Python and PostgreSQL read it alike (the field's validator and the
table's check constraint): no slash, no "..", nothing a path could climb out with."""

HOST_NAME = RegexValidator(
    HOST_NAME_PATTERN,
    _(
        "Lowercase letters, digits and hyphens, in labels joined by single dots "
        "(e.g. gpu-h200-1 or gpu1.lab); a label starts and ends with a letter or digit."
    ),
)


class Host(models.Model):
    """A machine the operator owns, reached over SSH, carrying cards of one kind.

    Its kind cannot change while any of its lots carries a live booking (a counting hold
    whose period has not ended or whose order still holds): a trigger refuses it in the
    database (migration 0009), ``clean`` says so in a form first.
    """

    name = models.CharField(
        max_length=80,
        unique=True,
        validators=[HOST_NAME],
        help_text=_("Also its folder in the local sandbox: DNS labels, e.g. gpu-h200-1"),
    )
    kind = models.ForeignKey(HardwareKind, on_delete=models.PROTECT, related_name="hosts")
    address = models.CharField(max_length=255, help_text=_("DNS name or IP address"))
    ssh_port = models.PositiveIntegerField(default=22)
    ssh_user = models.CharField(max_length=64, default="gpulots")
    ssh_host_key = models.TextField(
        blank=True,
        help_text=_("Pinned host public key (OpenSSH format); provisioning refuses any other"),
    )
    ssh_host_key_presented = models.TextField(
        blank=True,
        help_text=_(
            "The key the host presented when provisioning last refused it (not trusted: "
            "check its fingerprint on the host before pinning it)"
        ),
    )
    ssh_host_key_refused_at = models.DateTimeField(null=True, blank=True)
    notes = models.TextField(blank=True)

    class Meta:
        ordering = ("name",)
        constraints = [
            models.CheckConstraint(
                condition=Q(name__regex=HOST_NAME_PATTERN),
                name="host_name_is_dns_labels",
                violation_error_message=_("This is not a valid host name."),
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.pk is None or self.kind_id is None:
            return
        was = Host.objects.filter(pk=self.pk).values_list("kind_id", flat=True).first()
        if was is not None and was != self.kind_id and live_holds(lot__host_id=self.pk).exists():
            raise ValidationError(
                {
                    "kind": _(
                        "The kind of a host cannot change while its lots carry current or "
                        "future bookings: move or settle them first."
                    )
                }
            )


CARDS_CONSTRAINT = "lot_cards_not_shared"


def cards() -> Func:
    """A lot's two cards as one value: the multirange {[a, a+1), [b, b+1)}."""

    def card(index: str) -> Func:
        return Func(F(index), F(index) + 1, function="int4range", output_field=IntegerRangeField())

    return Func(
        card("gpu_a"), card("gpu_b"), function="int4multirange", output_field=IntegerRangeField()
    )


CARDS_NOT_SHARED = ExclusionConstraint(
    name=CARDS_CONSTRAINT,
    expressions=[("host", RangeOperators.EQUAL), (cards(), RangeOperators.OVERLAPS)],
    condition=~Q(status="retired"),
    violation_error_message=_(
        "One of these GPUs already belongs to another lot on this host that is not retired."
    ),
)
"""No two lots that are not retired share a card on a host: their cards ({a} and {b} in one
multirange) overlap for the same host. A lot in maintenance still owns its cards; a retired
one gives them up (``Lot.clean`` and a trigger keep a retired lot's bookings in mind)."""


class Lot(models.Model):
    """Two cards on one host, rented together.

    The database keeps the inventory straight whatever writes it (the admin's forms and
    inlines, a shell, a script): no two lots that are not retired share a card on a host
    (an exclusion constraint), and a lot carrying live bookings keeps its host (a trigger,
    migration 0009).
    """

    class Status(models.TextChoices):
        ACTIVE = "active", _("active")
        MAINTENANCE = "maintenance", _("maintenance")
        RETIRED = "retired", _("retired")
        SPARE = "spare", _("spare: out of sale, replaces a failed lot")

    IN_SERVICE = (Status.ACTIVE, Status.SPARE)
    """Lots whose bookings are prepared and opened: active ones (sold), and spares (kept out
    of sale, taken only by a replacement: reservations.incidents)."""

    host = models.ForeignKey(Host, on_delete=models.PROTECT, related_name="lots")
    gpu_a = models.PositiveSmallIntegerField(help_text=_("First GPU index on the host"))
    gpu_b = models.PositiveSmallIntegerField(help_text=_("Second GPU index on the host"))
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.ACTIVE)

    class Meta:
        ordering = ("host__name", "gpu_a")
        constraints = [
            models.CheckConstraint(condition=Q(gpu_a__lt=models.F("gpu_b")), name="lot_gpu_order"),
            CARDS_NOT_SHARED,
        ]

    def __str__(self) -> str:
        return f"{self.host.name} GPU {self.gpu_a},{self.gpu_b}"

    @property
    def gpu_indices(self) -> tuple[int, int]:
        return (self.gpu_a, self.gpu_b)

    def clean(self) -> None:
        if self.gpu_a is not None and self.gpu_b is not None and self.gpu_a >= self.gpu_b:
            raise ValidationError(_("The first GPU index must be lower than the second."))
        if self.host_id is None:
            return
        if self.status != Lot.Status.RETIRED and self.gpu_a is not None and self.gpu_b is not None:
            mine = (self.gpu_a, self.gpu_b)
            for retired in Lot.objects.filter(
                Q(gpu_a__in=mine) | Q(gpu_b__in=mine), host_id=self.host_id, status="retired"
            ).exclude(pk=self.pk):
                if live_holds(lot=retired).exists():
                    raise ValidationError(
                        _(
                            "Lot %(lot)s is retired but still carries bookings on these GPUs: "
                            "move or settle them before the cards go to another lot."
                        )
                        % {"lot": retired}
                    )
        if self.pk is None:
            return
        was = Lot.objects.filter(pk=self.pk).values_list("host_id", flat=True).first()
        if was is not None and was != self.host_id and live_holds(lot_id=self.pk).exists():
            raise ValidationError(
                {
                    "host": _(
                        "A lot cannot move to another host while it carries current or future "
                        "bookings: move or settle them first (Bookings on this lot)."
                    )
                }
            )

    def validate_constraints(self, exclude: Collection[str] | None = None) -> None:
        """The cards' constraint is checked whatever a form leaves out: the host's inline
        leaves out the host, the Lots list everything but the status."""
        super().validate_constraints(exclude)
        skipped = bool(exclude and set(exclude) & {"host", "gpu_a", "gpu_b", "status"})
        if skipped and None not in (self.host_id, self.gpu_a, self.gpu_b):
            CARDS_NOT_SHARED.validate(Lot, self)


class UsageMode(models.TextChoices):
    DISTRIBUTED = "distributed", _("One job across both cards (data parallel or sharded)")
    INDEPENDENT = "independent", _("Two independent experiments, one card each")


class Hypothesis(models.TextChoices):
    BIGGER_BATCH = "bigger_batch", _("Increase the global batch")
    SHORTER_STEP = "shorter_step", _("Reduce the time of one step")
    MAKE_POSSIBLE = "make_possible", _("Make a run possible at all")


class Precision(models.TextChoices):
    FP32 = "fp32", "FP32"
    BF16 = "bf16", "BF16"
    FP16 = "fp16", "FP16"
    FP8 = "fp8", "FP8"
    INT8 = "int8", "INT8"
    INT4 = "int4", "INT4"


class Workload(models.TextChoices):
    TRAINING = "training", _("training")
    INFERENCE = "inference", _("inference")


MODEL_SEQ_LEN = 2048
MODEL_MICRO_BATCH = 1
MAX_SEQ_LEN = 1_048_576
MAX_MICRO_BATCH = 4096


class Order(models.Model):
    """A researcher's booking of N lots of one kind for one window.

    Status values are named constants; every change goes through a function in
    ``reservations.services`` that checks the current status and writes an ``OrderEvent``.
    """

    STATUS_AWAITING_PAYMENT = "awaiting_payment"
    STATUS_PAID = "paid"
    STATUS_APPROVED = "approved"
    STATUS_ACTIVE = "active"
    STATUS_COMPLETED = "completed"
    STATUS_EXPIRED = "expired"
    STATUS_CANCELLED = "cancelled"
    STATUS_CHOICES = (
        (STATUS_AWAITING_PAYMENT, _("awaiting payment")),
        (STATUS_PAID, _("paid, awaiting approval")),
        (STATUS_APPROVED, _("approved, access being prepared")),
        (STATUS_ACTIVE, _("active")),
        (STATUS_COMPLETED, _("completed")),
        (STATUS_EXPIRED, _("expired unpaid")),
        (STATUS_CANCELLED, _("cancelled")),
    )
    HOLDING_STATUSES = (STATUS_AWAITING_PAYMENT, STATUS_PAID, STATUS_APPROVED, STATUS_ACTIVE)
    PAID_STATUSES = (STATUS_PAID, STATUS_APPROVED, STATUS_ACTIVE, STATUS_COMPLETED)
    """An order in these was paid and keeps its money (a receipt is issued for it)."""
    """Statuses in which the order's holds count against capacity."""

    reference = models.CharField(max_length=32, unique=True, editable=False)
    secret = models.CharField(
        max_length=32,
        editable=False,
        help_text=_("The key in the order page's link; the reference alone opens nothing"),
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="orders",
    )
    status = models.CharField(
        max_length=20, choices=STATUS_CHOICES, default=STATUS_AWAITING_PAYMENT, db_index=True
    )
    language = models.CharField(max_length=8, default="en")

    # Contact
    contact_name = models.CharField(max_length=120)
    contact_email = models.EmailField(max_length=254)
    organisation = models.CharField(max_length=160, blank=True)
    contact_phone = models.CharField(max_length=64, blank=True)

    # What was booked
    kind = models.ForeignKey(HardwareKind, on_delete=models.PROTECT, related_name="orders")
    environment = models.ForeignKey(Environment, on_delete=models.PROTECT, related_name="orders")
    lot_count = models.PositiveSmallIntegerField()
    window_days = models.PositiveSmallIntegerField(choices=Window.choices)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    usage_mode = models.CharField(max_length=12, choices=UsageMode.choices)

    # The research question, written down before renting
    hypothesis = models.CharField(max_length=16, choices=Hypothesis.choices)
    hypothesis_text = models.TextField(max_length=4000, blank=True)
    model_params_billion = models.DecimalField(
        max_digits=8, decimal_places=3, null=True, blank=True
    )
    model_precision = models.CharField(max_length=8, choices=Precision.choices, blank=True)
    model_workload = models.CharField(max_length=10, choices=Workload.choices, blank=True)
    model_seq_len = models.PositiveIntegerField(
        default=MODEL_SEQ_LEN,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_SEQ_LEN)],
        help_text=_("Tokens per sample the acceptance benchmark's model is shaped with"),
    )
    model_micro_batch = models.PositiveIntegerField(
        default=MODEL_MICRO_BATCH,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_MICRO_BATCH)],
        help_text=_("Samples per card and step"),
    )
    checkpoints = models.TextField(max_length=4000, blank=True)
    abort_criteria = models.TextField(max_length=4000, blank=True)

    # Frozen at order time: a later price change never touches this order.
    unit_price_usd = models.DecimalField(max_digits=10, decimal_places=2)
    total_usd = models.DecimalField(max_digits=12, decimal_places=2)
    hold_expires_at = models.DateTimeField()
    ending_mail_sent_at = models.DateTimeField(
        null=True, blank=True, help_text=_("When the reminder before the window's end was mailed")
    )
    placed_mail_sent_at = models.DateTimeField(
        null=True, blank=True, help_text=_("When the order's link was mailed; empty: not yet")
    )

    # Who placed it, for the limits on what one party may hold unpaid (reservations.fairness)
    client_key = models.CharField(
        max_length=64,
        blank=True,
        editable=False,
        help_text=_("A keyed hash of the client's network address; empty: placed by the operator"),
    )
    mailbox_key = models.CharField(
        max_length=254,
        blank=True,
        editable=False,
        help_text=_("The contact address's mailbox (without +tags), for the per-mailbox limits"),
    )
    contact_confirmed_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=_(
            "When the contact address proved itself (its link used, or the signed-in account's "
            "own address); until then the hold is short and mails carry no text of the sender"
        ),
    )

    # An extension is an order of its own (its invoice, "I've paid", approval, receipt) for
    # the days directly after another order's window, on that order's lots
    # (reservations.extensions); once approved its days are added to that order's window.
    extends = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="extensions",
        help_text=_("The order whose window this extension continues on the same lots"),
    )
    joined_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=_("When this extension's days were added to the window of the order it extends"),
    )

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-created_at",)
        indexes = [
            models.Index(fields=("status", "hold_expires_at"), name="order_expiry_idx"),
            # The desk's lists by state in window order (Today's approvals, windows opening
            # and closing in the next 24 h): a year of orders is not sorted per request.
            models.Index(fields=("status", "starts_at"), name="order_status_start_idx"),
            models.Index(fields=("status", "ends_at"), name="order_status_end_idx"),
            # What one party holds unpaid: only awaiting-payment orders are ever looked up.
            models.Index(
                fields=("client_key",),
                name="order_unpaid_client_idx",
                condition=Q(status="awaiting_payment"),
            ),
            models.Index(
                fields=("mailbox_key",),
                name="order_unpaid_mailbox_idx",
                condition=Q(status="awaiting_payment"),
            ),
            models.Index(
                fields=("user",),
                name="order_unpaid_user_idx",
                condition=Q(status="awaiting_payment"),
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(lot_count__gte=1), name="order_lots_positive"),
            models.CheckConstraint(condition=Q(window_days__in=WINDOW_DAYS), name="order_window"),
            models.CheckConstraint(
                condition=Q(ends_at__gt=models.F("starts_at")), name="order_ends"
            ),
            models.CheckConstraint(
                condition=Q(total_usd=models.F("unit_price_usd") * models.F("lot_count")),
                name="order_total_matches",
            ),
            # At most one extension of an order waits for payment or approval at a time: two
            # raced placements cannot both hold the days after the window.
            models.UniqueConstraint(
                fields=("extends",),
                condition=Q(status__in=("awaiting_payment", "paid"), joined_at__isnull=True),
                name="one_pending_extension",
            ),
        ]

    def __str__(self) -> str:
        return self.reference

    def opened_by(self, secret: str) -> bool:
        """Whether ``secret`` is this order's link key (compared in constant time)."""
        return secrets.compare_digest(self.secret.encode(), secret.encode())

    @property
    def is_holding(self) -> bool:
        return self.status in self.HOLDING_STATUSES


class OrderSshKey(models.Model):
    """An SSH public key the researcher will log in with, stored in normalised form."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="ssh_keys")
    algorithm = models.CharField(max_length=64)
    public_key = models.TextField(help_text=_("One line: algorithm, base64 blob, comment"))
    fingerprint = models.CharField(
        max_length=80, help_text=_("SHA256 fingerprint, as ssh-keygen -l")
    )

    class Meta:
        ordering = ("id",)
        constraints = [
            models.UniqueConstraint(
                fields=("order", "fingerprint"), name="ssh_key_unique_per_order"
            )
        ]

    def __str__(self) -> str:
        return f"{self.algorithm} {self.fingerprint}"


class Hold(models.Model):
    """One lot held (then booked) for one order's window, plus the turnaround buffer.

    ``period`` is [start, end + turnaround): the buffer is frozen into the row so a later
    change of the setting never makes existing holds overlap.
    """

    class Status(models.TextChoices):
        HELD = "held", _("held, awaiting payment")
        BOOKED = "booked", _("booked")
        RELEASED = "released", _("released")

    COUNTING = (Status.HELD, Status.BOOKED)

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="holds")
    lot = models.ForeignKey(Lot, on_delete=models.PROTECT, related_name="holds")
    period = DateTimeRangeField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.HELD)
    created_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("lot", "period")
        constraints = [
            ExclusionConstraint(
                name="hold_no_overlap_per_lot",
                expressions=[("lot", RangeOperators.EQUAL), ("period", RangeOperators.OVERLAPS)],
                condition=Q(status__in=("held", "booked")),
            ),
            models.CheckConstraint(
                condition=Q(status="released", released_at__isnull=False)
                | (~Q(status="released") & Q(released_at__isnull=True)),
                name="hold_released_at_iff_released",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.lot} · {self.order.reference}"


class OrderEvent(models.Model):
    """The audit trail: every order state change, who made it, when, from, to and why."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="events")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(
        max_length=120, help_text=_("Who acted: a user's e-mail, 'researcher', or 'system: <task>'")
    )
    from_status = models.CharField(max_length=20, blank=True)
    to_status = models.CharField(max_length=20)
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ("created_at", "id")

    def __str__(self) -> str:
        return f"{self.order.reference}: {self.from_status or '∅'} → {self.to_status}"


def live_holds(**where: Any) -> QuerySet[Hold]:
    """Holds that still bind their lot's cards: counting (held or booked) and either not
    over yet or of an order that still holds (an active grant past its end, not yet closed).
    The triggers of migration 0009 apply the same rule in SQL."""
    return Hold.objects.filter(**where, status__in=Hold.COUNTING).filter(
        Q(period__endswith__gt=timezone.now()) | Q(order__status__in=Order.HOLDING_STATUSES)
    )


# --------------------------------------------------------------------------- incidents, credits


class Incident(models.Model):
    """A lot of an order that was not usable: its acceptance failed (or a reading of its
    cards went outside the kind's limits) from ``started_at`` until ``ended_at`` (access on a
    replacement, the lot passing again, or the end of the window). At most one open per
    order and lot (a partial unique key). Written by reservations.incidents."""

    class Kind(models.TextChoices):
        ACCEPTANCE = "acceptance", _("acceptance benchmark not passed")
        CARDS = "cards", _("cards missing or not the ones accepted")
        XID = "xid", _("GPU error (XID)")
        ECC = "ecc", _("memory errors (ECC)")
        THERMAL = "thermal", _("overheating or throttled")
        UNREACHABLE = "unreachable", _("host not reachable")

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="incidents")
    lot = models.ForeignKey(Lot, on_delete=models.PROTECT, related_name="incidents")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    summary = models.CharField(max_length=2000, help_text=_("What was seen, in a few words"))
    evidence = models.JSONField(default=dict, blank=True, help_text=_("The raw readings"))
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    at_acceptance = models.BooleanField(
        default=False,
        help_text=_(
            "Found by the acceptance benchmark: the lot never served the order, so the time "
            "lost counts from the window's start"
        ),
    )
    replacement = models.ForeignKey(
        Lot,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="replacing",
        help_text=_("The lot the booking moved to"),
    )
    replacement_ssh = models.JSONField(
        default=list, blank=True, help_text=_("How the researcher connects on the replacement")
    )

    class Meta:
        ordering = ("-started_at", "-id")
        constraints = [
            models.UniqueConstraint(
                fields=("order", "lot"),
                condition=Q(ended_at__isnull=True),
                name="one_open_incident_per_lot",
            ),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=models.F("started_at")),
                name="incident_ends_after_it_starts",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.order.reference} · {self.lot} · {self.get_kind_display()}"


class Credit(models.Model):
    """The hours an incident took from an order, given back without a claim: pro rata to
    what the order paid for that lot. One per incident (the unique key). The researcher
    takes it as time (the hours added to the window on the same lots, nothing to pay) or as
    money (refunded in the order's coin, payments.refund_due); an operator may refuse it
    with a reason, which is mailed."""

    class Status(models.TextChoices):
        OFFERED = "offered", _("offered: time or money, the researcher chooses")
        TIME = "time", _("taken as time")
        MONEY = "money", _("taken as money")
        REFUSED = "refused", _("refused by the operator")

    incident = models.OneToOneField(Incident, on_delete=models.PROTECT, related_name="credit")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="credits")
    seconds = models.PositiveIntegerField(help_text=_("The time the lot was not usable"))
    share = models.DecimalField(
        max_digits=9, decimal_places=8, help_text=_("The part of the order's price it gives back")
    )
    value_usd = models.DecimalField(max_digits=12, decimal_places=2)
    amount_units = models.DecimalField(
        max_digits=78,
        decimal_places=0,
        null=True,
        blank=True,
        help_text=_("Taken as money: what goes back, in the coin's base units"),
    )
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.OFFERED)
    reason = models.CharField(max_length=500, blank=True, help_text=_("Why it was refused"))
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("created_at", "id")

    def __str__(self) -> str:
        return f"{self.order.reference} · {self.hours} h · {self.get_status_display()}"

    @property
    def hours(self) -> Decimal:
        """The time given back, in hours to one decimal (what the pages say)."""
        return (Decimal(self.seconds) / 3600).quantize(Decimal("0.1"))


# --------------------------------------------------------------------------- 30-day campaigns

MAX_CHECKPOINTS = 8
"""The most checkpoints one campaign plans (the form, the API and placing the order agree)."""
CHECK_LIMIT = 300
"""Characters for what one checkpoint checks."""


class Checkpoint(models.Model):
    """One dated checkpoint of a 30-day campaign: what is checked that day, the reminder
    mailed before it (stamped once: ``reminder_sent_at``) and the outcome the researcher
    records (continue, adjust or stop, with a note). Changed only by reservations.campaign."""

    class Outcome(models.TextChoices):
        CONTINUE = "continue", _("Continue as planned")
        ADJUST = "adjust", _("Continue, adjusted")
        STOP = "stop", _("Stop the campaign")

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="campaign_checkpoints")
    position = models.PositiveSmallIntegerField()
    due_on = models.DateField(help_text=_("The day of the checkpoint (UTC), within the window"))
    what = models.CharField(max_length=CHECK_LIMIT, help_text=_("What is checked that day"))
    reminder_sent_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=10, choices=Outcome.choices, blank=True)
    outcome_note = models.TextField(max_length=2000, blank=True)
    outcome_recorded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("order", "position")
        constraints = [
            models.UniqueConstraint(fields=("order", "position"), name="checkpoint_position_once"),
            models.CheckConstraint(
                condition=Q(outcome="", outcome_recorded_at__isnull=True)
                | (~Q(outcome="") & Q(outcome_recorded_at__isnull=False)),
                name="checkpoint_outcome_with_its_time",
            ),
        ]
        indexes = [
            models.Index(
                fields=("due_on",),
                condition=Q(reminder_sent_at__isnull=True),
                name="checkpoint_reminder_due",
            )
        ]

    def __str__(self) -> str:
        return f"{self.order.reference} · {self.due_on}"


class EarlyEndRequest(models.Model):
    """A researcher's request to end a campaign early: the operator decides (nothing is
    refunded or revoked by itself). One open request per order at a time."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="early_end_requests")
    requested_at = models.DateTimeField()
    reason = models.TextField(max_length=2000)
    handled_at = models.DateTimeField(null=True, blank=True)
    handled_by = models.CharField(max_length=120, blank=True)
    handling_note = models.TextField(max_length=2000, blank=True)

    class Meta:
        ordering = ("requested_at", "id")
        constraints = [
            models.UniqueConstraint(
                fields=("order",),
                condition=Q(handled_at__isnull=True),
                name="one_open_early_end_request",
            )
        ]

    def __str__(self) -> str:
        return f"{self.order.reference} · {self.requested_at:%Y-%m-%d}"
