"""Payments in the operator's desk: chains and assets (configuration), invoices with their
transfers, searchable by reference, e-mail, address and transaction hash."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from payments import services
from payments.models import Asset, Chain, Invoice, Transfer
from reservations.admin import ReadOnlyInline, ask_reason
from reservations.errors import BookingRefused, LotUnavailable
from reservations.services import Actor


class AssetInline(admin.TabularInline):
    model = Asset
    extra = 0


@admin.register(Chain)
class ChainAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "chain_id",
        "rpc_url",
        "confirmations",
        "scanned_block",
        "last_scan_at",
        "is_active",
    )
    readonly_fields = ("scanned_block", "last_scan_at", "last_scan_error", "last_scan_error_at")
    inlines = (AssetInline,)


class TransferInline(ReadOnlyInline):
    model = Transfer
    fields = ("tx_hash", "log_index", "amount", "from_address", "block_number", "status")
    readonly_fields = fields


@admin.register(Invoice)
class InvoiceAdmin(admin.ModelAdmin):
    list_display = (
        "order",
        "asset",
        "status",
        "exception",
        "amount_due",
        "amount_confirmed",
        "deposit_address",
        "expires_at",
        "check_delayed",
    )
    list_filter = ("status", "exception", "asset", "check_delayed", "is_current")
    search_fields = (
        "order__reference",
        "order__contact_email",
        "deposit_address__address",
        "transfers__tx_hash",
        "claim_tx_hash",
    )
    list_select_related = ("order", "asset__chain", "deposit_address")
    inlines = (TransferInline,)
    actions = ("accept_late_payments", "mark_refunded")

    @admin.action(description="Accept late payments (books the window again if lots are free)")
    def accept_late_payments(self, request: HttpRequest, queryset: QuerySet[Invoice]) -> None:
        actor = Actor.of(request.user)  # type: ignore[arg-type]
        for invoice in queryset:
            try:
                services.accept_late_payment(invoice, actor=actor)
            except BookingRefused as exc:
                self.message_user(request, f"{invoice}: {' '.join(exc.messages)}", messages.ERROR)
            except LotUnavailable:
                self.message_user(
                    request, f"{invoice}: the lots are taken now — refund instead.", messages.ERROR
                )
            else:
                self.message_user(request, f"{invoice}: accepted; the order is paid.")

    @admin.action(description="Mark refunded (asks for a note)")
    def mark_refunded(
        self, request: HttpRequest, queryset: QuerySet[Invoice]
    ) -> HttpResponse | None:
        reason, page = ask_reason(
            self,
            request,
            queryset,
            action="mark_refunded",
            title="Mark refunded",
            explanation="Refund these payments from the operator wallet first, then record it.",
        )
        if reason is None:
            return page
        actor = Actor.of(request.user)  # type: ignore[arg-type]
        for invoice in queryset:
            try:
                services.mark_refunded(invoice, actor=actor, reason=reason)
            except BookingRefused as exc:
                self.message_user(request, f"{invoice}: {' '.join(exc.messages)}", messages.ERROR)
            else:
                self.message_user(request, f"{invoice}: marked refunded.")
        return None

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Invoices change only through the payment services.
        return [field.name for field in Invoice._meta.fields]

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
