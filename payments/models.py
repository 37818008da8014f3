"""Chains and assets (operator configuration), deposit addresses, invoices and transfers.

Modelled on BTCPay Server: every invoice has its own watch-only deposit address, clear
states (new → processing → settled, or expired / invalid) with exceptions (paid_partial,
paid_over, paid_late), and transfers are separate records keyed by (chain, tx hash, log
index), so one transfer can never be credited twice.

Just over 600 lines: the models reference each other (invoice, address, transfer, refund).
"""

from __future__ import annotations

from decimal import Context, Decimal, Inexact, InvalidOperation, Rounded
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from reservations.models import Order


def amount_field(**options: Any) -> models.DecimalField[Decimal, Decimal]:
    """Token amounts in base units (wei, 10⁻⁶ USDC): up to 2²⁵⁶, never rounded."""
    return models.DecimalField(max_digits=78, decimal_places=0, **options)


EXACT = Context(prec=200, traps=[Inexact, Rounded, InvalidOperation])
"""Decimal arithmetic on amounts that can never round: 200 digits hold any uint256 scaled by
any decimals, and an operation that would round raises instead. Sums of base units are
done with Python ints (or in SQL); never with the default context's 28 digits."""


def units(value: int | Decimal) -> int:
    """A stored amount (NUMERIC(78,0)) as the exact integer of base units it is."""
    number = int(value)
    if number != value:
        raise ValueError(f"{value!r} is not a whole number of base units")
    return number


class Chain(models.Model):
    """An EVM chain the operator accepts payments on."""

    chain_id = models.PositiveBigIntegerField(unique=True)
    name = models.CharField(max_length=60)
    rpc_url = models.CharField(max_length=500)
    confirmations = models.PositiveSmallIntegerField(
        default=12, help_text=_("Blocks, counting the transfer's own, before it counts")
    )
    use_finalized_tag = models.BooleanField(
        default=False, help_text=_("Count only blocks the node reports as finalized")
    )
    scanned_block = models.BigIntegerField(
        null=True,
        blank=True,
        help_text=_(
            "The scanner's cursor: every block up to this one has been read for every open "
            "invoice; the next cycle reads on from here (and the re-check window again)"
        ),
    )
    block_range_limit = models.PositiveIntegerField(
        default=2000,
        help_text=_(
            "Most blocks per eth_getLogs request (providers refuse larger ranges); a range "
            "the node still refuses is split further"
        ),
    )
    reorg_window = models.PositiveIntegerField(
        default=64,
        help_text=_(
            "Re-check window: the last blocks read again every cycle for reorganisations "
            "(at least the confirmations); a deeper one is reported"
        ),
    )
    checkpoint_block = models.BigIntegerField(
        null=True,
        blank=True,
        help_text=_("The block just below the re-check window at the last scan"),
    )
    checkpoint_hash = models.CharField(
        max_length=66, blank=True, help_text=_("Its hash then: a change is a deep reorganisation")
    )
    deep_reorg_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=_("When a reorganisation deeper than the re-check window was last seen"),
    )
    deep_reorg_note = models.CharField(max_length=300, blank=True)
    quorum = models.PositiveSmallIntegerField(
        default=1,
        help_text=_(
            "Independent RPC endpoints that must return the same transfer (same log, same "
            "block hash) before it counts as confirmed"
        ),
    )
    read_through = models.DateTimeField(
        null=True,
        blank=True,
        help_text=_(
            "Every block up to this moment has been read for every open invoice (the last "
            "full scan); an order's hold is decided only once this reaches its deadline"
        ),
    )
    last_scan_at = models.DateTimeField(
        null=True, blank=True, help_text=_("When the scanner last read every open invoice")
    )
    last_scan_error = models.CharField(
        max_length=300, blank=True, help_text=_("What the last failed scan said")
    )
    last_scan_error_at = models.DateTimeField(null=True, blank=True)
    is_active = models.BooleanField(default=True)
    refund_from_address = models.CharField(
        max_length=42,
        blank=True,
        validators=[
            RegexValidator(r"^0x[0-9a-fA-F]{40}$", _("An address is 0x and 40 hexadecimal digits."))
        ],
        help_text=_(
            "The operator's wallet refunds are sent from: a refund counts only if it comes "
            "from it. Empty: the sender is not checked"
        ),
    )

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return f"{self.name} ({self.chain_id})"

    def clean(self) -> None:

        errors: dict[str, Any] = {}
        if self.reorg_window < self.confirmations:
            errors["reorg_window"] = _("At least the confirmations (%(n)s).") % {
                "n": self.confirmations
            }
        if self.block_range_limit < 1:
            errors["block_range_limit"] = _("At least one block.")
        if self.quorum < 1:
            errors["quorum"] = _("At least one endpoint.")
        if errors:
            raise ValidationError(errors)


class RpcEndpoint(models.Model):
    """One more node of a chain, besides its ``rpc_url`` (the first): the scanner fails over
    to the healthiest, and a quorum above one asks several to agree."""

    chain = models.ForeignKey(Chain, on_delete=models.CASCADE, related_name="endpoints")
    url = models.CharField(max_length=500)
    label = models.CharField(
        max_length=60, blank=True, help_text=_("The provider, to tell them apart")
    )
    priority = models.PositiveSmallIntegerField(default=10, help_text=_("Lower is tried first"))
    is_active = models.BooleanField(default=True)
    last_ok_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    failures = models.PositiveIntegerField(
        default=0, help_text=_("Failures in a row since it last answered")
    )

    class Meta:
        ordering = ("chain", "priority", "id")
        constraints = [
            models.UniqueConstraint(fields=("chain", "url"), name="endpoint_url_per_chain")
        ]

    def __str__(self) -> str:
        return self.label or self.url


class Asset(models.Model):
    """What can be paid on a chain: native ETH (priced by a feed) or an ERC-20 stablecoin."""

    chain = models.ForeignKey(Chain, on_delete=models.PROTECT, related_name="assets")
    symbol = models.CharField(max_length=12)
    contract_address = models.CharField(
        max_length=42, blank=True, help_text=_("ERC-20 contract; empty for the native coin")
    )
    decimals = models.PositiveSmallIntegerField(default=18)
    price_feed_address = models.CharField(
        max_length=42, blank=True, help_text=_("Chainlink-style USD feed (native coin only)")
    )
    feed_max_age_seconds = models.PositiveIntegerField(default=3600)
    invoice_minutes = models.PositiveIntegerField(
        default=0,
        help_text=_(
            "How long an invoice in this coin stays payable; 0: as long as the order's hold"
        ),
    )
    is_active = models.BooleanField(default=True)
    display_order = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ("chain", "display_order", "symbol")
        constraints = [
            models.UniqueConstraint(fields=("chain", "symbol"), name="asset_symbol_per_chain"),
            models.UniqueConstraint(
                fields=("chain", "contract_address"),
                condition=~Q(contract_address=""),
                name="asset_contract_per_chain",
            ),
            models.CheckConstraint(
                condition=Q(contract_address="") | Q(price_feed_address=""),
                name="asset_feed_only_for_native",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.symbol} on {self.chain.name}"

    @property
    def is_native(self) -> bool:
        return not self.contract_address

    def to_units(self, amount: Decimal) -> int:
        """Whole base units of ``amount`` (exact; a fraction of a unit is dropped)."""
        return int(EXACT.multiply(Decimal(amount), EXACT.power(10, self.decimals)))

    def from_units(self, units: int | Decimal) -> Decimal:
        """Exact: 2²⁰⁰ base units keep all their 61 digits."""
        return EXACT.divide(Decimal(units), EXACT.power(10, self.decimals))


class DepositAddress(models.Model):
    """An address derived from the operator's extended public key; one invoice, ever.

    One index space for all EVM chains: an EVM address is the same on every chain, so index
    i of one key is used on one chain only (a payment sent on the wrong network can never
    reach another order's invoice). Rows made before that rule (``xpub_fingerprint`` empty)
    may share an index across chains; the allocator never hands out their indexes again.
    """

    chain = models.ForeignKey(Chain, on_delete=models.PROTECT, related_name="addresses")
    index = models.PositiveIntegerField(help_text=_("BIP44 address index under m/…/0"))
    address = models.CharField(max_length=42)
    xpub_fingerprint = models.CharField(
        max_length=32,
        blank=True,
        default="",
        help_text=_(
            "The extended public key it was derived from (a hash); empty: made before "
            "one index space for all chains"
        ),
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("chain", "index"), name="deposit_index_unique"),
            models.UniqueConstraint(fields=("chain", "address"), name="deposit_address_unique"),
            models.UniqueConstraint(
                fields=("xpub_fingerprint", "index"),
                condition=~Q(xpub_fingerprint=""),
                name="deposit_index_one_space",
            ),
            models.UniqueConstraint(
                fields=("address",),
                condition=~Q(xpub_fingerprint=""),
                name="deposit_address_one_chain",
            ),
        ]
        indexes = [
            models.Index(
                fields=("index",), condition=Q(xpub_fingerprint=""), name="deposit_legacy_index_idx"
            )
        ]

    def __str__(self) -> str:
        return self.address


class Invoice(models.Model):
    STATUS_NEW = "new"
    STATUS_PROCESSING = "processing"
    STATUS_SETTLED = "settled"
    STATUS_EXPIRED = "expired"
    STATUS_INVALID = "invalid"
    STATUS_CHOICES = (
        (STATUS_NEW, _("waiting for payment")),
        (STATUS_PROCESSING, _("payment seen, waiting for confirmations")),
        (STATUS_SETTLED, _("settled")),
        (STATUS_EXPIRED, _("expired")),
        (STATUS_INVALID, _("invalid")),
    )
    OPEN_STATUSES = (STATUS_NEW, STATUS_PROCESSING)
    CLOSED_STATUSES = (STATUS_SETTLED, STATUS_INVALID)
    """Decided: its amounts still follow what arrives, its state no longer changes by itself."""

    EXCEPTION_NONE = ""
    EXCEPTION_PAID_PARTIAL = "paid_partial"
    EXCEPTION_PAID_OVER = "paid_over"
    EXCEPTION_PAID_LATE = "paid_late"
    EXCEPTION_CHOICES = (
        (EXCEPTION_NONE, "—"),
        (EXCEPTION_PAID_PARTIAL, _("paid partially")),
        (EXCEPTION_PAID_OVER, _("paid too much")),
        (EXCEPTION_PAID_LATE, _("paid after expiry")),
    )

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="invoices")
    asset = models.ForeignKey(Asset, on_delete=models.PROTECT, related_name="invoices")
    deposit_address = models.OneToOneField(
        DepositAddress, on_delete=models.PROTECT, related_name="invoice"
    )
    amount_due = amount_field()
    usd_due = models.DecimalField(max_digits=12, decimal_places=2)
    usd_per_unit = models.DecimalField(
        max_digits=20,
        decimal_places=8,
        help_text=_("Rate locked for the invoice (1 for stablecoins)"),
    )
    status = models.CharField(max_length=12, choices=STATUS_CHOICES, default=STATUS_NEW)
    exception = models.CharField(
        max_length=14, choices=EXCEPTION_CHOICES, default=EXCEPTION_NONE, blank=True
    )
    amount_seen = amount_field(default=0)
    amount_confirmed = amount_field(default=0)
    created_block = models.BigIntegerField(help_text=_("Chain head when the invoice was made"))
    starting_balance = amount_field(
        default=0, help_text=_("Native coin already at the address then (not credited)")
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    monitor_until = models.DateTimeField(help_text=_("Payments are still watched for until then"))
    claimed_at = models.DateTimeField(null=True, blank=True)
    claim_tx_hash = models.CharField(max_length=66, blank=True)
    claim_result = models.CharField(
        max_length=300, blank=True, help_text=_("What the claimed transaction did (a code)")
    )
    claim_amount = amount_field(
        null=True,
        blank=True,
        help_text=_("What the claimed transaction pays this invoice (base units)"),
    )
    claim_checked_at = models.DateTimeField(
        null=True, blank=True, help_text=_("When the claim was last verified on-chain")
    )
    verification_due_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=_("When the claim is to be verified next; empty: no verification pending"),
    )
    verification_queued_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=_("Since when the one verification of this invoice is queued or running"),
    )
    last_checked_at = models.DateTimeField(null=True, blank=True)
    check_delayed = models.BooleanField(
        default=False, help_text=_("The last check could not reach the chain")
    )
    settled_at = models.DateTimeField(null=True, blank=True)
    amount_on_time = amount_field(
        default=0, help_text=_("Received in blocks up to the invoice's deadline (block time)")
    )
    deadline_block = models.BigIntegerField(
        null=True,
        blank=True,
        help_text=_("Native coin: the last block at or before the deadline, once past it"),
    )
    unverified_at_expiry = models.BooleanField(
        default=False,
        help_text=_(
            "The order's hold ended before this invoice's payment could be verified (chain "
            "unreadable, or still confirming): check it by hand"
        ),
    )
    amount_to_refund = amount_field(
        default=0,
        help_text=_(
            "Confirmed money beyond what this invoice keeps, still to send back (base units): "
            "beyond the amount due on a settled invoice; all of it on an expired one, or on a "
            "second invoice of an order already paid"
        ),
    )
    amount_refunded = amount_field(
        default=0, help_text=_("What the operator recorded as sent back (base units)")
    )
    is_current = models.BooleanField(default=True, help_text=_("The order's invoice in use"))
    refund_address = models.CharField(
        max_length=42,
        blank=True,
        help_text=_("Where the researcher asked for the money to be sent back (EIP-55)"),
    )
    refund_address_set_at = models.DateTimeField(null=True, blank=True)
    refund_requested_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=_(
            "When the researcher was mailed that money is to be sent back (cleared by a "
            "refund, so that money arriving later is announced again)"
        ),
    )

    class Meta:
        ordering = ("-created_at",)
        indexes = [
            models.Index(fields=("status", "monitor_until"), name="invoice_open_idx"),
            models.Index(
                fields=("verification_due_at",),
                condition=Q(verification_due_at__isnull=False),
                name="invoice_verification_due_idx",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=("order",), condition=Q(is_current=True), name="one_current_invoice"
            ),
            models.UniqueConstraint(
                fields=("order",), condition=Q(status="settled"), name="one_settled_invoice"
            ),
            models.CheckConstraint(condition=Q(amount_due__gt=0), name="invoice_due_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.order.reference} · {self.asset.symbol}"

    @property
    def amount_outstanding(self) -> Decimal:
        return Decimal(max(0, units(self.amount_due) - units(self.amount_seen)))


class CoinChoice(models.Model):
    """A coin chosen for an order: the audit trail of its invoice switches, counted for the
    limit on switches per order (PAYMENT_COIN_SWITCHES_PER_HOUR)."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="coin_choices")
    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="choices")
    reused = models.BooleanField(
        default=False, help_text=_("An earlier invoice of the order (and its address) again")
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("created_at", "id")
        indexes = [models.Index(fields=("order", "created_at"), name="coin_choice_order_idx")]

    def __str__(self) -> str:
        return f"{self.order.reference} → {self.invoice.asset.symbol}"


class Transfer(models.Model):
    """A token transfer into a deposit address, as a Transfer log showed it."""

    STATUS_SEEN = "seen"
    STATUS_CONFIRMED = "confirmed"
    STATUS_ORPHANED = "orphaned"
    STATUS_CHOICES = (
        (STATUS_SEEN, _("seen")),
        (STATUS_CONFIRMED, _("confirmed")),
        (STATUS_ORPHANED, _("orphaned by a reorganisation")),
    )

    chain = models.ForeignKey(Chain, on_delete=models.PROTECT, related_name="transfers")
    tx_hash = models.CharField(max_length=66)
    log_index = models.PositiveIntegerField()
    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="transfers")
    from_address = models.CharField(max_length=42)
    amount = amount_field()
    block_number = models.BigIntegerField()
    block_hash = models.CharField(max_length=66)
    block_time = models.DateTimeField()
    status = models.CharField(max_length=10, choices=STATUS_CHOICES, default=STATUS_SEEN)
    attested_by = models.PositiveSmallIntegerField(
        default=1, help_text=_("RPC endpoints that returned this log in this block")
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("block_number", "log_index")
        indexes = [models.Index(fields=("chain", "block_number"), name="transfer_block_idx")]
        constraints = [
            models.UniqueConstraint(
                fields=("chain", "tx_hash", "log_index"), name="transfer_credited_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.tx_hash}#{self.log_index}"


class Refund(models.Model):
    """Money sent back for an invoice: the operator's outgoing transaction, counted only once
    the scanner has read it on the chain (payments.refunds)."""

    STATUS_SENT = "sent"
    STATUS_CONFIRMED = "confirmed"
    STATUS_REJECTED = "rejected"
    STATUS_CHOICES = (
        (STATUS_SENT, _("sent, being verified")),
        (STATUS_CONFIRMED, _("confirmed on-chain")),
        (STATUS_REJECTED, _("rejected")),
    )

    invoice = models.ForeignKey(Invoice, on_delete=models.PROTECT, related_name="refunds")
    chain = models.ForeignKey(Chain, on_delete=models.PROTECT, related_name="refunds")
    amount = amount_field(help_text=_("What is owed and was to be sent (base units)"))
    amount_sent = amount_field(
        null=True,
        blank=True,
        help_text=_("What the transaction sent to the refund address (base units), once read"),
    )
    to_address = models.CharField(max_length=42)
    from_address = models.CharField(
        max_length=42, blank=True, help_text=_("The wallet it had to come from; empty: any")
    )
    tx_hash = models.CharField(max_length=66)
    status = models.CharField(max_length=10, choices=STATUS_CHOICES, default=STATUS_SENT)
    rejection_reason = models.CharField(max_length=300, blank=True)
    note = models.CharField(
        max_length=300, blank=True, help_text=_("What the verification noticed (more than owed)")
    )
    last_checked_at = models.DateTimeField(null=True, blank=True)
    last_check = models.CharField(
        max_length=300, blank=True, help_text=_("What the last verification saw")
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    verified_at = models.DateTimeField(null=True, blank=True)
    sent_mailed_at = models.DateTimeField(null=True, blank=True)
    confirmed_mailed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)
        indexes = [
            models.Index(
                fields=("created_at",), condition=Q(status="sent"), name="refund_pending_idx"
            )
        ]
        constraints = [
            models.UniqueConstraint(fields=("chain", "tx_hash"), name="refund_tx_once"),
            models.UniqueConstraint(
                fields=("invoice",), condition=Q(status="sent"), name="one_refund_in_flight"
            ),
            models.CheckConstraint(condition=Q(amount__gt=0), name="refund_amount_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.tx_hash} → {self.to_address}"


BILLING_LIMITS = {"organisation": 160, "address": 400, "vat_id": 32}

VAT_ID = RegexValidator(
    r"^[A-Za-z]{2}[A-Za-z0-9 .\-]{2,30}$",
    _("A VAT id starts with its country's two letters, e.g. DE123456789."),
    code="invalid_vat_id",
)
"""Two letters of the country, then letters, digits, spaces, dots or hyphens (EU ids, the
Swiss CHE-123.456.789 MWST, the UK's GB…): checked for shape only, never against VIES."""


class BillingDetails(models.Model):
    """Whom an order's receipt is made out to, for a university's accounting: all optional,
    given at the contact step or later on the order page (payments.receipts)."""

    order = models.OneToOneField(Order, on_delete=models.CASCADE, related_name="billing")
    organisation = models.CharField(
        max_length=BILLING_LIMITS["organisation"],
        blank=True,
        help_text=_("Empty: the order's organisation, else its contact name"),
    )
    address = models.TextField(max_length=BILLING_LIMITS["address"], blank=True)
    vat_id = models.CharField(max_length=BILLING_LIMITS["vat_id"], blank=True, validators=[VAT_ID])
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = _("billing details")

    def __str__(self) -> str:
        return f"{self.order.reference} · {self.organisation or self.order.organisation}"


class Receipt(models.Model):
    """The receipt of a paid order: numbered once, at its first issue, one number a receipt
    with none skipped (payments.receipts.issue_receipt); its content is read from the
    order and its settled invoice."""

    order = models.OneToOneField(Order, on_delete=models.PROTECT, related_name="receipt")
    invoice = models.OneToOneField(Invoice, on_delete=models.PROTECT, related_name="receipt")
    number = models.PositiveIntegerField()
    issued_at = models.DateTimeField()

    class Meta:
        ordering = ("number",)
        constraints = [
            models.UniqueConstraint(fields=("number",), name="receipt_number_unique"),
            models.CheckConstraint(condition=Q(number__gte=1), name="receipt_number_positive"),
        ]

    def __str__(self) -> str:
        return self.label

    @property
    def label(self) -> str:
        """The number as printed: R-000042."""
        return f"R-{self.number:06d}"
