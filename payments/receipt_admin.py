"""Receipts and billing details in the operator's desk (issue 14): on the order's page, and
the receipts as a list for the accounts (number, order, date, the page and the PDF)."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy

from infra.records import ReadOnlyInline, RecordAdmin
from payments.models import BillingDetails, Receipt
from payments.receipts import receipt_path


def _links(receipt: Receipt) -> SafeString:
    return format_html(
        '<a href="{}">{}</a> · <a href="{}">PDF</a>',
        receipt_path(receipt.order),
        receipt.label,
        receipt_path(receipt.order, pdf=True),
    )


class BillingInline(ReadOnlyInline):
    """Whom the receipt is made out to, as the researcher gave it."""

    model = BillingDetails
    fields = ("organisation", "address", "vat_id", "updated_at")
    readonly_fields = fields
    verbose_name_plural = gettext_lazy("billing details")


class ReceiptInline(ReadOnlyInline):
    model = Receipt
    fields = ("receipt", "issued_at", "invoice")
    readonly_fields = fields

    @admin.display(description=gettext_lazy("receipt"))
    def receipt(self, receipt: Receipt) -> SafeString:
        return _links(receipt)


@admin.register(Receipt)
class ReceiptAdmin(RecordAdmin):
    list_display = ("number_label", "order", "issued_at", "documents")
    search_fields = ("order__reference", "=number")
    date_hierarchy = "issued_at"
    list_select_related = ("order",)
    ordering = ("-number",)

    @admin.display(description=gettext_lazy("number"), ordering="number")
    def number_label(self, receipt: Receipt) -> str:
        return receipt.label

    @admin.display(description=gettext_lazy("receipt"))
    def documents(self, receipt: Receipt) -> SafeString:
        return _links(receipt)
