"""Payments in the operator's desk: chains and assets (configuration), invoices with their
transfers, searchable by reference, e-mail, address and transaction hash."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Q, QuerySet
from django.forms.models import construct_instance
from django.http import HttpRequest, HttpResponse
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.timezone import localtime
from django.utils.translation import gettext_lazy as _

from infra.records import ReadOnlyInline, RecordAdmin, ask_reason
from payments import integrity, refund_due, refunds, settlement
from payments.models import Asset, Chain, Invoice, Refund, RpcEndpoint, Transfer
from payments.rpc import RpcError, RpcUnavailable
from reservations.errors import BookingRefused, InvalidTransition, LotUnavailable
from reservations.services import Actor


class AssetForm(forms.ModelForm):
    """An active coin on an active chain is saved only if the chain agrees with it (chain id,
    contract code, decimals, symbol: integrity.verify_asset); an inactive one saves freely —
    it cannot be invoiced, and is checked when it is activated."""

    class Meta:
        model = Asset
        fields = (
            "chain",
            "symbol",
            "contract_address",
            "decimals",
            "price_feed_address",
            "feed_max_age_seconds",
            "invoice_minutes",
            "is_active",
            "display_order",
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors or not data.get("chain"):
            return data
        candidate = construct_instance(self, Asset(pk=self.instance.pk))
        if not (candidate.is_active and candidate.chain.is_active):
            return data
        try:
            integrity.verify_asset(candidate)
        except integrity.AssetMismatch as exc:
            raise ValidationError(
                [f"The chain contradicts this configuration: {p}." for p in exc.problems]
                + ["Nothing was saved."]
            ) from None
        except (RpcUnavailable, RpcError) as exc:
            raise ValidationError(
                f"The node {candidate.chain.rpc_url} cannot be asked ({exc}), so this coin "
                "cannot be checked against its contract and was not saved. Save it inactive, "
                "and activate it once the node answers."
            ) from None
        return data


class AssetInline(admin.TabularInline):
    model = Asset
    form = AssetForm
    extra = 0


class RpcEndpointInline(admin.TabularInline):
    """The chain's extra nodes (besides its RPC URL); their health is the scanner's to say."""

    model = RpcEndpoint
    extra = 0
    fields = (
        "url",
        "label",
        "priority",
        "is_active",
        "last_ok_at",
        "failures",
        "last_error",
        "last_error_at",
    )
    readonly_fields = ("last_ok_at", "failures", "last_error", "last_error_at")


def healthy(prefix: str = "") -> Q:
    """An extra endpoint that is in use, has answered, and has not failed since."""
    return Q(
        **{f"{prefix}is_active": True, f"{prefix}failures": 0, f"{prefix}last_ok_at__isnull": False}
    )


@admin.register(Chain)
class ChainAdmin(admin.ModelAdmin):
    """Chains: what is configured (Chain.clean()'s errors show on the fields) and how the
    scanner fares: its cursor, the last scan and its error, a reorganisation deeper than the
    re-check window (in red), and the extra endpoints with how many are healthy."""

    list_display = (
        "name",
        "chain_id",
        "is_active",
        "scanned_block",
        "last_scan_at",
        "scan_error",
        "deep_reorg",
        "endpoint_count",
        "healthy_endpoint_count",
    )
    list_filter = ("is_active",)
    fieldsets = (
        (None, {"fields": ("name", "chain_id", "rpc_url", "is_active")}),
        (_("Refunds"), {"fields": ("refund_from_address",)}),
        (
            _("Confirmation and scanning"),
            {
                "fields": (
                    "confirmations",
                    "use_finalized_tag",
                    "block_range_limit",
                    "reorg_window",
                    "quorum",
                )
            },
        ),
        (
            _("Scan health"),
            {
                "fields": (
                    "deep_reorg",
                    "scanned_block",
                    "read_through",
                    "last_scan_at",
                    "last_scan_error",
                    "last_scan_error_at",
                    "checkpoint_block",
                    "checkpoint_hash",
                )
            },
        ),
    )
    readonly_fields = (
        "deep_reorg",
        "scanned_block",
        "read_through",
        "last_scan_at",
        "last_scan_error",
        "last_scan_error_at",
        "checkpoint_block",
        "checkpoint_hash",
    )
    inlines = (RpcEndpointInline, AssetInline)
    actions = ("clear_deep_reorg",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Chain]:
        return (
            super()
            .get_queryset(request)
            .annotate(
                endpoints_total=Count("endpoints"),
                endpoints_healthy=Count("endpoints", filter=healthy("endpoints__")),
            )
        )

    @admin.display(description=_("last scan error"))
    def scan_error(self, chain: Chain) -> str:
        if not chain.last_scan_error:
            return "—"
        when = (
            date_format(localtime(chain.last_scan_error_at), "SHORT_DATETIME_FORMAT")
            if chain.last_scan_error_at
            else ""
        )
        return format_html(
            '<span title="{}">{}{}</span>',
            chain.last_scan_error,
            f"{when}: " if when else "",
            Truncator(chain.last_scan_error).chars(80),
        )

    @admin.display(description=_("deep reorganisation"), ordering="deep_reorg_at")
    def deep_reorg(self, chain: Chain) -> str:
        if chain.deep_reorg_at is None:
            return "—"
        return format_html(
            '<strong class="deep-reorg" style="color:#ba2121">{}</strong> {}{}',
            _("deep reorg"),
            date_format(localtime(chain.deep_reorg_at), "SHORT_DATETIME_FORMAT"),
            f" — {chain.deep_reorg_note}" if chain.deep_reorg_note else "",
        )

    @admin.action(description=_("Clear the deep-reorganisation marker (payments checked)"))
    def clear_deep_reorg(self, request: HttpRequest, queryset: QuerySet[Chain]) -> None:
        """Once the operator has checked the payments around it (the scanner sets it again on
        the next reorganisation deeper than the window)."""
        chosen = list(queryset.values_list("pk", flat=True))
        marked = Chain.objects.filter(pk__in=chosen).exclude(deep_reorg_at=None)
        cleared = marked.update(deep_reorg_at=None, deep_reorg_note="")
        self.message_user(request, _("Cleared on %(n)d chain(s).") % {"n": cleared})

    @admin.display(description=_("extra endpoints"), ordering="endpoints_total")
    def endpoint_count(self, chain: Chain) -> int:
        total = getattr(chain, "endpoints_total", None)
        return chain.endpoints.count() if total is None else int(total)

    @admin.display(description=_("healthy"), ordering="endpoints_healthy")
    def healthy_endpoint_count(self, chain: Chain) -> int:
        count = getattr(chain, "endpoints_healthy", None)
        return chain.endpoints.filter(healthy()).count() if count is None else int(count)


@admin.register(Asset)
class AssetAdmin(admin.ModelAdmin):
    form = AssetForm
    list_display = ("symbol", "chain", "contract_address", "decimals", "is_active")
    list_filter = ("chain", "is_active")
    list_select_related = ("chain",)


class TransferInline(ReadOnlyInline):
    model = Transfer
    fields = ("tx_hash", "log_index", "amount", "from_address", "block_number", "status")
    readonly_fields = fields


class RefundInline(ReadOnlyInline):
    model = Refund
    fields = (
        "tx_hash",
        "status",
        "rejection_reason",
        "amount",
        "amount_sent",
        "to_address",
        "from_address",
        "note",
        "last_check",
        "created_by",
        "created_at",
        "verified_at",
    )
    readonly_fields = fields


class TxHashForm(forms.Form):
    tx_hash = forms.CharField(
        max_length=100, help_text="The outgoing transaction's hash, 0x and 64 hex digits"
    )


def send_summary(invoice: Invoice) -> SafeString:
    """What the operator is to send for an invoice, exactly, or what it waits for."""
    owed = refund_due.owed_units(invoice)
    if owed == 0:
        return format_html("{}", "—")
    asset, chain = invoice.asset, invoice.asset.chain
    coin = (
        format_html("the native coin ({})", asset.symbol)
        if asset.is_native
        else format_html(
            "the token contract <code>{}</code> ({})", asset.contract_address, asset.symbol
        )
    )
    amount = format_html(
        "<strong>{} {}</strong> = <code>{}</code> base units of {}, on {} (chain id {})",
        asset.from_units(owed),
        asset.symbol,
        owed,
        coin,
        chain.name,
        chain.chain_id,
    )
    wallet = (
        format_html("from the refund wallet <code>{}</code>", chain.refund_from_address)
        if chain.refund_from_address
        else format_html(
            "<strong>{}</strong>",
            "⚠ no refund wallet is set on this chain: the sender is not checked",
        )
    )
    if not invoice.refund_address:
        return format_html("{}; waiting for the researcher's refund address; {}", amount, wallet)
    return format_html("{} to <code>{}</code>, {}", amount, invoice.refund_address, wallet)


class RefundOwedFilter(admin.SimpleListFilter):
    title = "refund owed"
    parameter_name = "refund_owed"

    def lookups(
        self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]
    ) -> list[tuple[str, str]]:
        return [("yes", "Money to send back"), ("no", "Nothing to send back")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Invoice]) -> QuerySet[Invoice]:
        """The same invoices as the desk's "Refunds due" (payments.refund_due.owing)."""
        owing = refund_due.owing().values("pk")
        if self.value() == "yes":
            return queryset.filter(pk__in=owing)
        if self.value() == "no":
            return queryset.exclude(pk__in=owing)
        return queryset


def short_address(address: str) -> SafeString:
    """0x1234…abcd in a list (the whole address is its title, and the search finds it)."""
    return format_html('<span title="{}">{}…{}</span>', address, address[:6], address[-4:])


@admin.register(Invoice)
class InvoiceAdmin(admin.ModelAdmin):
    list_display = (
        "order",
        "asset",
        "state",
        "due",
        "confirmed",
        "to_send_back",
        "refund_state",
        "deposit",
        "expires",
    )
    list_filter = (
        RefundOwedFilter,
        "status",
        "exception",
        "asset",
        "check_delayed",
        "unverified_at_expiry",
        "is_current",
    )
    search_fields = (
        "order__reference",
        "order__contact_email",
        "deposit_address__address",
        "transfers__tx_hash",
        "claim_tx_hash",
        "refund_address",
        "refunds__tx_hash",
    )
    list_select_related = ("order", "asset__chain", "deposit_address")
    inlines = (TransferInline, RefundInline)
    actions = ("accept_late_payments", "record_refund", "mark_refunded")

    @admin.display(description="to send back")
    def what_to_send(self, invoice: Invoice) -> SafeString:
        return send_summary(invoice)

    @admin.display(description="state", ordering="status")
    def state(self, invoice: Invoice) -> str:
        """Status, exception and the flags asking for a look, in one cell."""
        words = [invoice.get_status_display()]
        if invoice.exception:
            words.append(invoice.get_exception_display())
        if invoice.check_delayed:
            words.append("check delayed")
        if invoice.unverified_at_expiry:
            words.append("unverified at expiry")
        return " · ".join(str(word) for word in words)

    @admin.display(description="due", ordering="amount_due")
    def due(self, invoice: Invoice) -> str:
        return f"{invoice.asset.from_units(invoice.amount_due)} {invoice.asset.symbol}"

    @admin.display(description="confirmed", ordering="amount_confirmed")
    def confirmed(self, invoice: Invoice) -> str:
        return f"{invoice.asset.from_units(invoice.amount_confirmed)}"

    @admin.display(description="to send back", ordering="amount_to_refund")
    def to_send_back(self, invoice: Invoice) -> str:
        owed = refund_due.owed_units(invoice)
        return f"{invoice.asset.from_units(owed)}" if owed else "—"

    @admin.display(description="deposit address", ordering="deposit_address__address")
    def deposit(self, invoice: Invoice) -> str:
        return short_address(invoice.deposit_address.address)

    @admin.display(description="expires", ordering="expires_at")
    def expires(self, invoice: Invoice) -> str:
        return date_format(localtime(invoice.expires_at), "SHORT_DATETIME_FORMAT")

    @admin.display(description="refund")
    def refund_state(self, invoice: Invoice) -> str:
        made = sorted(invoice.refunds.all(), key=lambda r: (r.created_at, r.pk))
        latest = made[-1] if made else None
        if latest is None:
            if invoice.refund_address:
                return format_html("to {}", short_address(invoice.refund_address))
            return "—"
        return latest.get_status_display()

    @admin.action(description="Record the refund's transaction (asks for its hash)")
    def record_refund(
        self, request: HttpRequest, queryset: QuerySet[Invoice]
    ) -> HttpResponse | None:
        """One invoice at a time: the page asking for the hash says exactly what to send."""
        invoices = list(queryset.select_related("asset__chain")[:2])
        if len(invoices) != 1:
            self.message_user(
                request, "Select one invoice: a transaction refunds one.", messages.ERROR
            )
            return None
        (invoice,) = invoices
        tx_hash, page = ask_reason(
            self,
            request,
            queryset,
            action="record_refund",
            title="Record the refund's transaction",
            explanation=format_html(
                "Send {}. Then paste the transaction's hash: the refund counts once the scanner "
                "has verified it on-chain.",
                send_summary(invoice),
            ),
            form_class=TxHashForm,
        )
        if tx_hash is None:
            return page
        try:
            refunds.record_refund(invoice, tx_hash, actor=Actor.of(request.user))  # type: ignore[arg-type]
        except BookingRefused as exc:
            self.message_user(request, f"{invoice}: {' '.join(exc.messages)}", messages.ERROR)
        else:
            self.message_user(
                request, f"{invoice}: refund recorded; it is being verified on-chain."
            )
        return None

    @admin.action(description="Accept late payments (books the window again if lots are free)")
    def accept_late_payments(self, request: HttpRequest, queryset: QuerySet[Invoice]) -> None:
        """One answer per invoice: accepted, or why not (nothing changed for that one)."""
        actor = Actor.of(request.user)  # type: ignore[arg-type]
        for invoice in queryset:
            try:
                settlement.accept_late_payment(invoice, actor=actor)
            except BookingRefused as exc:
                self.message_user(request, f"{invoice}: {' '.join(exc.messages)}", messages.ERROR)
            except LotUnavailable:
                self.message_user(
                    request, f"{invoice}: the lots are taken now — refund instead.", messages.ERROR
                )
            except InvalidTransition as exc:
                self.message_user(request, f"{invoice}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{invoice}: accepted; the order is paid.")

    @admin.action(
        description="Mark refunded without on-chain verification (override, asks for a note)"
    )
    def mark_refunded(
        self, request: HttpRequest, queryset: QuerySet[Invoice]
    ) -> HttpResponse | None:
        reason, page = ask_reason(
            self,
            request,
            queryset,
            action="mark_refunded",
            title="Mark refunded",
            explanation="An override: records refunds made outside the verified flow (prefer "
            "“Record the refund's transaction”, which checks it on-chain). Refund these "
            "payments from the operator wallet first, then record it.",
        )
        if reason is None:
            return page
        actor = Actor.of(request.user)  # type: ignore[arg-type]
        for invoice in queryset:
            try:
                refunds.mark_refunded(invoice, actor=actor, reason=reason)
            except BookingRefused as exc:
                self.message_user(request, f"{invoice}: {' '.join(exc.messages)}", messages.ERROR)
            else:
                self.message_user(request, f"{invoice}: marked refunded.")
        return None

    def get_queryset(self, request: HttpRequest) -> QuerySet[Invoice]:
        return super().get_queryset(request).prefetch_related("refunds")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Invoices change only through the payment services.
        fields = [field.name for field in Invoice._meta.fields]
        return ["what_to_send", *fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Transfer)
class TransferAdmin(admin.ModelAdmin):
    list_display = ("tx_hash", "log_index", "invoice", "amount", "block_number", "status")
    list_filter = ("status", "chain")
    search_fields = ("tx_hash", "invoice__order__reference", "from_address")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Refund)
class RefundAdmin(RecordAdmin):
    list_display = (
        "tx_hash",
        "invoice",
        "status",
        "amount",
        "amount_sent",
        "to_address",
        "rejection_reason",
        "created_at",
        "verified_at",
    )
    list_filter = ("status", "chain")
    search_fields = ("tx_hash", "to_address", "invoice__order__reference")
    list_select_related = ("invoice__order", "invoice__asset")
