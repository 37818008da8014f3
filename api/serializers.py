"""What the API reads and writes. Rules stay in the services: these only parse and shape.

One module over 600 lines, on purpose: one serializer per answer of the schema, each short;
the schema generator and the views read them from one place."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from payments.claims import CLAIM_RESULTS
from payments.models import BILLING_LIMITS, VAT_ID, Invoice, Refund
from payments.panel import asks_for_payment, confirmations, delayed_since, payment_uri
from provisioning import access
from provisioning.models import ProvisioningJob, SplitTest
from provisioning.report import split_test_summary
from provisioning.services import accounts_for
from reservations.models import (
    CHECK_LIMIT,
    MAX_CHECKPOINTS,
    MAX_MICRO_BATCH,
    MAX_SEQ_LEN,
    MODEL_MICRO_BATCH,
    MODEL_SEQ_LEN,
    Checkpoint,
    Credit,
    EarlyEndRequest,
    Environment,
    HardwareKind,
    Hypothesis,
    Incident,
    Lot,
    Order,
    Precision,
    UsageMode,
    Window,
    Workload,
)
from reservations.notifications import order_link
from reservations.validation import (
    MAX_LOT_COUNT,
    TEXT_LIMITS,
    refuse_bidi_controls,
    start_refusal,
)


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know, instead of ignoring them."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {
                        name: [serializers.ErrorDetail("Unknown field.", code="unknown_field")]
                        for name in unknown
                    }
                )
        return super().to_internal_value(data)


class PriceSerializer(serializers.Serializer):
    window_days = serializers.IntegerField()
    amount_usd = serializers.DecimalField(max_digits=10, decimal_places=2)


class KindSerializer(serializers.ModelSerializer):
    prices = PriceSerializer(many=True, read_only=True)

    class Meta:
        model = HardwareKind
        fields = (
            "slug",
            "name",
            "vendor",
            "generation",
            "stack",
            "memory_per_card_gb",
            "cards_per_lot",
            "interconnect",
            "architecture",
            "prices",
        )


class EnvironmentSerializer(serializers.ModelSerializer):
    compatible_kinds: serializers.SlugRelatedField[HardwareKind] = serializers.SlugRelatedField(
        slug_field="slug", many=True, read_only=True
    )

    class Meta:
        model = Environment
        fields = ("slug", "name", "description", "stack", "compatible_kinds")


class AvailabilityQuery(StrictSerializer):
    kind = serializers.SlugField()
    window_days = serializers.ChoiceField(choices=Window.values)
    starts_at = serializers.DateTimeField()
    lot_count = serializers.IntegerField(min_value=1, max_value=MAX_LOT_COUNT, default=1)

    def validate_starts_at(self, value: datetime) -> datetime:
        """Within the booking horizon and not past, as for an order: a start in 2001 is
        not "available", and a start in 9999 is not looked up at all."""
        refused = start_refusal(value, timezone.now())
        if refused is not None:
            raise refused
        return value


class AvailabilitySerializer(serializers.Serializer):
    kind = serializers.CharField()
    window_days = serializers.IntegerField()
    starts_at = serializers.DateTimeField()
    lot_count = serializers.IntegerField()
    free_lots = serializers.IntegerField()
    bookable_lots = serializers.IntegerField()
    available = serializers.BooleanField()
    next_start = serializers.DateTimeField(allow_null=True)


class AdvisorQuery(StrictSerializer):
    params_billion = serializers.DecimalField(
        max_digits=10, decimal_places=3, min_value=0, max_value=100000
    )
    precision = serializers.ChoiceField(choices=Precision.values)
    workload = serializers.ChoiceField(choices=Workload.values)
    seq_len = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_SEQ_LEN, help_text="Tokens per sample (2048)"
    )
    micro_batch = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_MICRO_BATCH,
        help_text="Samples (sequences) per card and step (1)",
    )


class KindFitSerializer(serializers.Serializer):
    kind_slug = serializers.CharField()
    kind_name = serializers.CharField()
    memory_per_card_gb = serializers.IntegerField(help_text="Nameplate, as marketed")
    usable_per_card_gb = serializers.FloatField(help_text="What the job may use, GB (10⁹ B)")
    fits_one_card = serializers.BooleanField()
    fits_sharded = serializers.BooleanField()
    tight = serializers.BooleanField(help_text="Fits with less than a tenth to spare")
    verdict = serializers.CharField()


class SuggestionSerializer(serializers.Serializer):
    code = serializers.ChoiceField(
        choices=["lora", "qlora", "fp8", "int8", "int4", "inference", "more_lots"]
    )
    per_card_gb = serializers.FloatField()
    kind_slug = serializers.CharField(allow_null=True)
    verdict = serializers.CharField()
    lots = serializers.IntegerField()


class AdviceSerializer(serializers.Serializer):
    params_billion = serializers.FloatField()
    precision = serializers.CharField()
    workload = serializers.CharField()
    bytes_per_param = serializers.FloatField()
    model_state_gb = serializers.FloatField()
    replicated_per_card_gb = serializers.FloatField()
    sharded_per_card_gb = serializers.FloatField()
    seq_len = serializers.IntegerField()
    micro_batch = serializers.IntegerField()
    activations_gb = serializers.FloatField(
        help_text="Training activations, or the inference KV cache, per card"
    )
    fits = KindFitSerializer(many=True)
    reasons = serializers.ListField(child=serializers.CharField())
    suggestions = SuggestionSerializer(many=True)
    recommended_kind = serializers.CharField(allow_null=True)
    assumptions = serializers.ListField(child=serializers.CharField())


class CheckpointPlanSerializer(StrictSerializer):
    date = serializers.DateField(help_text="A day within the window (UTC)")
    check = serializers.CharField(
        max_length=CHECK_LIMIT, validators=[refuse_bidi_controls], help_text="What is checked"
    )


class OrderCreateSerializer(StrictSerializer):
    """The same fields as the booking pages; every rule is checked by place_order."""

    kind = serializers.CharField(max_length=50)
    lot_count = serializers.IntegerField()
    window_days = serializers.IntegerField()
    starts_at = serializers.DateTimeField()
    environment = serializers.CharField(max_length=100)
    usage_mode = serializers.ChoiceField(choices=UsageMode.values)
    hypothesis = serializers.ChoiceField(choices=Hypothesis.values)
    hypothesis_text = serializers.CharField(
        required=False, allow_blank=True, max_length=TEXT_LIMITS["hypothesis_text"]
    )
    contact_name = serializers.CharField(max_length=TEXT_LIMITS["contact_name"])
    contact_email = serializers.EmailField(max_length=TEXT_LIMITS["contact_email"])
    organisation = serializers.CharField(
        required=False, allow_blank=True, max_length=TEXT_LIMITS["organisation"]
    )
    contact_phone = serializers.CharField(
        required=False, allow_blank=True, max_length=TEXT_LIMITS["contact_phone"]
    )
    ssh_public_keys = serializers.ListField(
        child=serializers.CharField(max_length=16384), min_length=1, max_length=10
    )
    model_params_billion = serializers.DecimalField(
        max_digits=10, decimal_places=3, required=False, allow_null=True
    )
    model_precision = serializers.ChoiceField(
        choices=Precision.values, required=False, allow_blank=True
    )
    model_workload = serializers.ChoiceField(
        choices=Workload.values, required=False, allow_blank=True
    )
    model_seq_len = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_SEQ_LEN,
        help_text=f"Tokens per sample for the benchmark model (default {MODEL_SEQ_LEN})",
    )
    model_micro_batch = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_MICRO_BATCH,
        help_text=f"Samples per card and step (default {MODEL_MICRO_BATCH})",
    )
    checkpoints = serializers.ListField(
        child=CheckpointPlanSerializer(),
        required=False,
        max_length=MAX_CHECKPOINTS,
        help_text=f"For a 30-day window: 1 to {MAX_CHECKPOINTS} checkpoints, each a day within "
        "the window",
    )
    abort_criteria = serializers.CharField(
        required=False, allow_blank=True, max_length=TEXT_LIMITS["abort_criteria"]
    )
    language = serializers.ChoiceField(choices=["en", "de", "fr"], required=False, default="en")


class CheckpointSerializer(serializers.ModelSerializer):
    date = serializers.DateField(source="due_on", help_text="The checkpoint's day (UTC)")
    check = serializers.CharField(source="what", help_text="What is checked that day")

    class Meta:
        model = Checkpoint
        fields = (
            "position",
            "date",
            "check",
            "reminder_sent_at",
            "outcome",
            "outcome_note",
            "outcome_recorded_at",
        )


class EarlyEndRequestSerializer(serializers.ModelSerializer):
    class Meta:
        model = EarlyEndRequest
        fields = ("requested_at", "reason", "handled_at", "handling_note")


class OutcomeSerializer(StrictSerializer):
    outcome = serializers.ChoiceField(choices=Checkpoint.Outcome.values)
    note = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=2000,
        validators=[refuse_bidi_controls],
        help_text="Needed to adjust or stop",
    )


class EarlyEndAskSerializer(StrictSerializer):
    reason = serializers.CharField(
        max_length=2000,
        validators=[refuse_bidi_controls],
        help_text="Why the campaign should end early (the operator reads it on Today)",
    )


class ExtensionSerializer(serializers.ModelSerializer):
    """An extension of an order, as its order lists it: an order of its own (pay it as any
    order, at ``/api/v1/orders/<reference>/invoice/``)."""

    days = serializers.IntegerField(source="window_days", help_text="3, 7 or 30 more days")
    pay_by = serializers.DateTimeField(
        source="hold_expires_at",
        help_text="Unpaid by then, it is released and access closes at the order's end",
    )
    joined_at = serializers.DateTimeField(
        allow_null=True, help_text="When its days were added to the order's window"
    )

    class Meta:
        model = Order
        fields = (
            "reference",
            "status",
            "days",
            "starts_at",
            "ends_at",
            "total_usd",
            "pay_by",
            "joined_at",
        )


class ExtensionCreateSerializer(StrictSerializer):
    days = serializers.ChoiceField(choices=[3, 7, 30], help_text="How many more days")
    checkpoints = serializers.ListField(
        child=CheckpointPlanSerializer(),
        required=False,
        max_length=MAX_CHECKPOINTS,
        help_text="For 30 more days: 1 to "
        f"{MAX_CHECKPOINTS} checkpoints, each a day within the extension's window",
    )
    abort_criteria = serializers.CharField(
        required=False, allow_blank=True, max_length=TEXT_LIMITS["abort_criteria"]
    )


class ExtensionOfferSerializer(serializers.Serializer):
    days = serializers.IntegerField()
    starts_at = serializers.DateTimeField()
    ends_at = serializers.DateTimeField()
    unit_price_usd = serializers.DecimalField(max_digits=10, decimal_places=2)
    total_usd = serializers.DecimalField(max_digits=12, decimal_places=2)
    fits = serializers.BooleanField(help_text="The order's lots are free for all of it")
    elsewhere_from = serializers.DateTimeField(
        allow_null=True,
        help_text="When it does not fit: the earliest start of a new order as long on lots of "
        "the kind (POST /api/v1/orders/ with this start; data does not move between hosts); "
        "null when it fits or nothing is free within the horizon",
    )


class ExtensionOffersSerializer(serializers.Serializer):
    refused = serializers.CharField(
        help_text="Why the order cannot be extended now (a code: not_extendable, "
        "too_late_to_extend, extension_pending); empty when it can"
    )
    pay_by = serializers.DateTimeField(allow_null=True)
    free_until = serializers.DateTimeField(
        allow_null=True,
        help_text="Until when the order's lots are free after its window (null: none booked "
        "after it)",
    )
    offers = ExtensionOfferSerializer(many=True)
    extensions = ExtensionSerializer(many=True)


class IncidentSerializer(serializers.ModelSerializer):
    """A lot of the order that was not usable, and what was done about it."""

    lot: serializers.StringRelatedField[Lot] = serializers.StringRelatedField(
        help_text="The lot that failed: host and cards"
    )
    replacement: serializers.StringRelatedField[Lot] = serializers.StringRelatedField(
        allow_null=True, help_text="The lot the booking moved to (null: none was free)"
    )
    replacement_ssh = serializers.ListField(
        child=serializers.CharField(), help_text="How to connect on the replacement lot"
    )

    class Meta:
        model = Incident
        fields = (
            "id",
            "kind",
            "summary",
            "started_at",
            "ended_at",
            "lot",
            "replacement",
            "replacement_ssh",
        )


class CreditSerializer(serializers.ModelSerializer):
    """Time an incident took from the window, credited without a claim: take it as time or
    money at ``/api/v1/orders/<reference>/credits/<id>/``."""

    incident: serializers.PrimaryKeyRelatedField[Incident] = serializers.PrimaryKeyRelatedField(
        read_only=True
    )
    hours = serializers.DecimalField(max_digits=8, decimal_places=1, read_only=True)
    amount_units = serializers.CharField(
        allow_null=True,
        read_only=True,
        help_text="Taken as money: what goes back, in the paid coin's base units (a string)",
    )

    class Meta:
        model = Credit
        fields = (
            "id",
            "incident",
            "status",
            "seconds",
            "hours",
            "share",
            "value_usd",
            "amount_units",
            "reason",
            "created_at",
            "decided_at",
        )


class CreditTakeSerializer(StrictSerializer):
    take = serializers.ChoiceField(
        choices=(("time", "time"), ("money", "money")),
        help_text="time: the hours added to the end of the window on the same lots, nothing "
        "to pay; money: refunded in the order's coin (the refund flow asks for the address)",
    )


ORDER_PREFETCH = (
    "campaign_checkpoints",
    "early_end_requests",
    "extensions",
    "incidents__lot__host",
    "incidents__replacement__host",
    "credits",
)
"""What OrderSerializer reads beside the order's row: prefetch it for a list (one query each)."""


class OrderSerializer(serializers.ModelSerializer):
    kind: serializers.SlugRelatedField[HardwareKind] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    environment: serializers.SlugRelatedField[Environment] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    page_url = serializers.SerializerMethodField()
    checkpoints = CheckpointSerializer(
        source="campaign_checkpoints",
        many=True,
        read_only=True,
        help_text="A 30-day campaign's checkpoints with their outcomes (else empty)",
    )
    early_end_requests = EarlyEndRequestSerializer(many=True, read_only=True)
    receipt_url = serializers.SerializerMethodField()
    extends: serializers.SlugRelatedField[Order] = serializers.SlugRelatedField(
        slug_field="reference",
        read_only=True,
        allow_null=True,
        help_text="For an extension: the order whose window it continues (else null)",
    )
    extensions = ExtensionSerializer(many=True, read_only=True)
    incidents = IncidentSerializer(many=True, read_only=True)
    credits = CreditSerializer(many=True, read_only=True)

    class Meta:
        model = Order
        fields = (
            "reference",
            "status",
            "kind",
            "environment",
            "lot_count",
            "window_days",
            "starts_at",
            "ends_at",
            "usage_mode",
            "hypothesis",
            "hypothesis_text",
            "model_params_billion",
            "model_precision",
            "model_workload",
            "model_seq_len",
            "model_micro_batch",
            "checkpoints",
            "abort_criteria",
            "early_end_requests",
            "unit_price_usd",
            "total_usd",
            "hold_expires_at",
            "contact_confirmed_at",
            "created_at",
            "page_url",
            "receipt_url",
            "extends",
            "extensions",
            "incidents",
            "credits",
        )

    def get_page_url(self, order: Order) -> str:
        return order_link(order)

    @extend_schema_field(
        serializers.URLField(
            allow_null=True,
            help_text="Once the order is paid: its receipt as a PDF (GET with your token); "
            "null before",
        )
    )
    def get_receipt_url(self, order: Order) -> str | None:
        from django.conf import settings
        from django.urls import reverse

        if order.status not in Order.PAID_STATUSES:  # no query: the list stays one
            return None
        return f"{settings.SITE_URL}{reverse('api:receipt', args=[order.reference])}"


class InvoiceCreateSerializer(StrictSerializer):
    asset = serializers.CharField(max_length=12, help_text="Symbol, e.g. USDC or ETH")
    chain_id = serializers.IntegerField(required=False)


class InvoiceSerializer(serializers.ModelSerializer):
    asset = serializers.CharField(source="asset.symbol")
    chain_id = serializers.IntegerField(source="asset.chain.chain_id")
    network = serializers.CharField(source="asset.chain.name")
    contract_address = serializers.CharField(source="asset.contract_address")
    decimals = serializers.IntegerField(source="asset.decimals")
    address = serializers.CharField(source="deposit_address.address")
    amount_due = serializers.CharField(help_text="In base units (wei, 10⁻⁶ USDC)")
    amount_seen = serializers.CharField()
    amount_confirmed = serializers.CharField()
    amount_to_refund = serializers.CharField(
        help_text="Confirmed money beyond what the invoice keeps, to be sent back (base units): "
        "beyond the amount due once settled; all of it when the invoice expired or the order "
        "is paid by another invoice"
    )
    claim_result = serializers.ChoiceField(
        choices=[("", "no transaction named, or not checked yet"), *CLAIM_RESULTS.items()],
        read_only=True,
        help_text="What the transaction named in the claim did for this invoice: "
        + "; ".join(f"`{code}`: {meaning}" for code, meaning in CLAIM_RESULTS.items()),
    )
    claim_amount = serializers.CharField(
        allow_null=True,
        read_only=True,
        help_text="With `pays_invoice`: the base units that transaction pays this invoice",
    )
    confirmations = serializers.SerializerMethodField()
    confirmations_needed = serializers.IntegerField(source="asset.chain.confirmations")
    check_delayed = serializers.SerializerMethodField(
        help_text="Checking is delayed: the chain has not been scanned successfully for a "
        "while (a node that does not answer, scanning stopped). Nothing is lost."
    )
    delayed_since = serializers.SerializerMethodField(
        help_text="The last successful check when checking is delayed, else null"
    )
    amount_outstanding = serializers.CharField(
        help_text="What is still to pay, in base units (after a partial payment: the rest)"
    )
    payment_uri = serializers.SerializerMethodField(
        help_text="EIP-681 URI of what is still to pay (what the page's QR code and "
        "'Open in wallet' carry); null once nothing is"
    )

    class Meta:
        model = Invoice
        fields = (
            "asset",
            "chain_id",
            "network",
            "contract_address",
            "decimals",
            "address",
            "amount_due",
            "amount_seen",
            "amount_confirmed",
            "amount_outstanding",
            "payment_uri",
            "amount_to_refund",
            "usd_due",
            "usd_per_unit",
            "status",
            "exception",
            "expires_at",
            "confirmations",
            "confirmations_needed",
            "check_delayed",
            "delayed_since",
            "claimed_at",
            "claim_tx_hash",
            "claim_result",
            "claim_amount",
        )

    def get_confirmations(self, invoice: Invoice) -> int:
        return confirmations(invoice)

    def get_payment_uri(self, invoice: Invoice) -> str | None:
        return payment_uri(invoice) if asks_for_payment(invoice) else None

    def get_check_delayed(self, invoice: Invoice) -> bool:
        return self.get_delayed_since(invoice) is not None

    def get_delayed_since(self, invoice: Invoice) -> datetime | None:
        return delayed_since(invoice)


class ClaimSerializer(StrictSerializer):
    tx_hash = serializers.CharField(required=False, allow_blank=True, max_length=100)


class RefundAddressSerializer(StrictSerializer):
    address = serializers.CharField(
        max_length=100,
        help_text="Where to send the money back: 0x and 40 hex digits, in lower case or with "
        "its EIP-55 checksum (mixed case that does not match it is refused as a typo)",
    )
    invoice = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=2**63 - 1,
        help_text="One invoice (its `invoice` in the refunds list); without it, every invoice "
        "of the order that owes money and has no refund on its way",
    )


class RefundSentSerializer(serializers.ModelSerializer):
    amount = serializers.CharField(help_text="What was to be sent (base units)")
    amount_sent = serializers.CharField(
        allow_null=True, help_text="What the transaction sent, once verified (base units)"
    )

    class Meta:
        model = Refund
        fields = (
            "tx_hash",
            "to_address",
            "amount",
            "amount_sent",
            "status",
            "created_at",
            "verified_at",
        )


class RefundLineSerializer(serializers.Serializer):
    invoice = serializers.IntegerField(source="invoice.pk")
    asset = serializers.CharField(source="invoice.asset.symbol")
    chain_id = serializers.IntegerField(source="invoice.asset.chain.chain_id")
    network = serializers.CharField(source="invoice.asset.chain.name")
    contract_address = serializers.CharField(source="invoice.asset.contract_address")
    decimals = serializers.IntegerField(source="invoice.asset.decimals")
    amount_owed = serializers.CharField(
        source="owed", help_text="Still to be sent back (base units)"
    )
    amount_refunded = serializers.CharField(source="invoice.amount_refunded")
    reason = serializers.ChoiceField(
        source="why",
        choices=[
            ("overpaid", "paid beyond the amount due"),
            ("after_refund", "arrived after the invoice was refunded"),
            ("paid_elsewhere", "the order is paid by another invoice"),
            ("cancelled", "the order was cancelled"),
            ("partial", "less than due arrived before the invoice expired"),
            ("late", "arrived after the invoice expired: refunded unless the operator accepts it"),
        ],
    )
    refund_address = serializers.CharField(source="invoice.refund_address")
    address_can_change = serializers.BooleanField(
        source="can_change",
        help_text="The address may be given or changed: money is owed and no refund is on its way",
    )
    refunds = serializers.SerializerMethodField()

    @extend_schema_field(RefundSentSerializer(many=True))
    def get_refunds(self, line: Any) -> Any:
        shown = [refund for refund, _amount in line.shown]
        return RefundSentSerializer(shown, many=True).data


class SshKeysChangeSerializer(StrictSerializer):
    ssh_public_keys = serializers.ListField(
        child=serializers.CharField(max_length=16384),
        min_length=1,
        max_length=10,
        help_text="OpenSSH lines, or RFC 4716 / PuTTY blocks (converted); replaces every key",
    )


class SshKeySerializer(serializers.Serializer):
    algorithm = serializers.CharField()
    fingerprint = serializers.CharField(help_text="SHA256, as ssh-keygen -l")
    public_key = serializers.CharField(help_text="One OpenSSH line")


class SshKeysSerializer(serializers.Serializer):
    ssh_keys = SshKeySerializer(many=True)
    changeable = serializers.BooleanField(help_text="Whether they may still change")


def _billing_part(limit: str, help_text: str, *validators: Any) -> serializers.CharField:
    return serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=BILLING_LIMITS[limit],
        validators=[*validators, refuse_bidi_controls],
        help_text=help_text,
    )


class BillingSerializer(StrictSerializer):
    """Whom the order's receipt is made out to; each part optional, all empty removes them."""

    organisation = _billing_part(
        "organisation", "Empty: the order's organisation, else its contact name"
    )
    address = _billing_part("address", "Printed on the receipt (lines separated by newlines)")
    vat_id = _billing_part(
        "vat_id", "Starts with its country's two letters, e.g. DE123456789", VAT_ID
    )


class CancelSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=2000, validators=[refuse_bidi_controls])


class ProvisioningAccountSerializer(serializers.Serializer):
    account = serializers.CharField()
    cards = serializers.CharField(help_text="The visible cards, e.g. `0,1` or `1`")
    ssh = serializers.CharField(help_text="The command line, as on the order page")


class ProvisioningLotSerializer(serializers.Serializer):
    lot = serializers.CharField(help_text="Host and cards, e.g. `h200-01 GPU 0,1`")
    host = serializers.CharField()
    status = serializers.ChoiceField(choices=ProvisioningJob.Status.choices)
    steps_done = serializers.IntegerField()
    steps_total = serializers.IntegerField()
    current_step = serializers.ChoiceField(
        choices=ProvisioningJob.STEPS,
        allow_null=True,
        help_text="The step running or next (the failed one for a failed lot); null when done",
    )
    error = serializers.CharField(
        allow_null=True, help_text="Which step failed, for a failed lot; null otherwise"
    )
    access_opens_at = serializers.DateTimeField(
        help_text="When the SSH keys went in, or are due to: the window's start (an order "
        "approved after its start opens as soon as the lot is ready; the window is not "
        "extended)"
    )
    access_closes_at = serializers.DateTimeField(
        help_text="When the access was removed, or is due to be: the window's end"
    )
    ready_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    accounts = ProvisioningAccountSerializer(
        many=True, help_text="Only while the lot is ready; empty before and after"
    )


def lot_access(job: ProvisioningJob) -> dict[str, object]:
    """A lot as ProvisioningLotSerializer shows it (the API's provisioning answer and the
    webhooks' ``data.lot``)."""
    cards = dict(accounts_for(job))
    ready = job.status == ProvisioningJob.Status.READY
    return {
        "lot": str(job.lot),
        "host": job.lot.host.name,
        "status": job.status,
        "steps_done": job.steps_done,
        "steps_total": len(ProvisioningJob.STEPS),
        "current_step": job.next_step,
        # The operator's error text (host stderr, key fingerprints, settings) stays in the
        # desk, as on the order page: the researcher learns which step failed.
        "error": (
            f"Preparing this lot failed at {job.next_step}; the operator sees it in the desk "
            "and will retry."
            if job.status == ProvisioningJob.Status.FAILED
            else None
        ),
        "access_opens_at": access.access_opens_at(job),
        "access_closes_at": access.access_closes_at(job),
        "ready_at": job.ready_at,
        "revoked_at": job.revoked_at,
        "accounts": [
            {
                "account": account,
                "cards": cards.get(account, ""),
                "ssh": job.ssh_command(account),  # the order page's line
            }
            for account in (job.accounts if ready else [])
        ],
    }


class ProvisioningSerializer(serializers.Serializer):
    order = OrderSerializer(help_text="The order; its `status` is `active` once every lot is ready")
    lots = ProvisioningLotSerializer(many=True, help_text="Empty until the order is approved")


class LotReportSerializer(serializers.Serializer):
    lot = serializers.CharField()
    host = serializers.CharField()
    version = serializers.SerializerMethodField(
        help_text="The report's format: 2 with the acceptance checks (REPORT_V2), 1 before; "
        "null until the lot is ready"
    )
    report = serializers.DictField(
        allow_null=True,
        help_text="The validation benchmark's JSON report as stored; null until the lot is ready",
    )

    def get_version(self, lot: dict[str, Any]) -> int | None:
        report = lot.get("report")
        if not isinstance(report, dict):
            return None
        version = report.get("version", 1)
        return version if isinstance(version, int) else 1


class ReportsSerializer(serializers.Serializer):
    order = OrderSerializer()
    lots = LotReportSerializer(many=True)


class SplitTestReportSerializer(serializers.Serializer):
    """Documents what ``gpulots split-test --upload`` posts; provisioning.split_tests checks
    it (any other field is kept as sent)."""

    kind = serializers.ChoiceField(choices=["split_test"])
    version = serializers.IntegerField(min_value=2, max_value=2)
    order = serializers.DictField(
        required=False,
        help_text="`reference` (this order, or null), `job` (one of this order's provisioning "
        "jobs, or null), `hypothesis`",
    )
    split = serializers.DictField(
        required=False, help_text="`one_card` and `two_cards`: the runs and their figures"
    )
    verdict = serializers.DictField(required=False, help_text="`answer`, `code`, `speedup`")
    stand_in = serializers.BooleanField(
        required=False, help_text="Measured on a CPU with gloo processes, not on the cards"
    )


class SplitTestSerializer(serializers.ModelSerializer):
    order: serializers.SlugRelatedField[Order] = serializers.SlugRelatedField(
        slug_field="reference", read_only=True
    )
    job = serializers.IntegerField(
        source="job_id",
        allow_null=True,
        read_only=True,
        help_text="The provisioning job (lot) it ran on; null when the report named none",
    )
    speedup = serializers.FloatField(
        allow_null=True,
        read_only=True,
        help_text="Two cards against one: one card's step time over two cards' (samples per "
        "second, two cards over one, for bigger_batch); null when not measured",
    )
    summary = serializers.SerializerMethodField(
        help_text="What it found, in one sentence made from its figures"
    )
    report_url = serializers.SerializerMethodField(
        help_text="The report as uploaded (JSON), behind the order page's secret link"
    )

    class Meta:
        model = SplitTest
        fields = (
            "id",
            "order",
            "job",
            "created_at",
            "answer",
            "code",
            "speedup",
            "stand_in",
            "summary",
            "report_url",
        )

    def get_summary(self, split_test: SplitTest) -> str:
        # A list reads only the parts the summary needs (provisioning.split_tests.summarised).
        report = getattr(split_test, "summary_parts", None)
        if report is None:
            report = split_test.report
        return split_test_summary(
            report if isinstance(report, dict) else {},
            split_test.order,
            stand_in=split_test.stand_in,
        )

    def get_report_url(self, split_test: SplitTest) -> str:
        from django.conf import settings
        from django.urls import reverse
        from django.utils import translation

        order = split_test.order
        with translation.override(order.language):
            path = reverse(
                "provisioning:split_test_json", args=[order.reference, order.secret, split_test.pk]
            )
        return f"{settings.SITE_URL}{path}"
