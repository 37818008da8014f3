"""Payments in the operator's desk: chains and assets (configuration), invoices with their
transfers, searchable by reference, e-mail, address and transaction hash."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from payments.models import Asset, Chain, Invoice, Transfer
from reservations.admin import ReadOnlyInline


class AssetInline(admin.TabularInline):
    model = Asset
    extra = 0


@admin.register(Chain)
class ChainAdmin(admin.ModelAdmin):
    list_display = ("name", "chain_id", "rpc_url", "confirmations", "scanned_block", "is_active")
    readonly_fields = ("scanned_block",)
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
