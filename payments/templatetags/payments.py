"""``{% payment_panel order %}`` on the order page: reads the database only."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timeuntil
from django.utils.translation import gettext

from payments import invoicing, receipts, refund_due
from payments.forms import BillingForm
from payments.models import Invoice
from payments.panel import panel_for
from reservations.models import Order

register = template.Library()


def invoices_of(order: Order) -> list[Invoice]:
    """The order's invoices with their assets, chains and addresses, read once per page view
    for the panel, the refunds and the receipt (kept on the order object it was given)."""
    cached: list[Invoice] | None = getattr(order, "_page_invoices", None)
    if cached is None:
        cached = list(
            Invoice.objects.filter(order=order)
            .select_related("asset__chain", "deposit_address")
            .order_by("created_at", "pk")
        )
        order._page_invoices = cached  # type: ignore[attr-defined]
    return cached


def panel_context(order: Order) -> dict[str, Any]:
    invoices = invoices_of(order)
    invoice = next((i for i in reversed(invoices) if i.is_current), None)
    now = timezone.now()
    return {
        "order": order,
        "panel": panel_for(invoice, now) if invoice else None,
        "assets": invoicing.offered_assets(),
        "refunds": refund_due.lines_for(order, invoices),
        "now": now,
        "hold_left": _hold_left(order, now) if invoice is None else "",
    }


def _hold_left(order: Order, now: datetime) -> str:
    """How long the lots stay held, ticking in the page like the invoice's countdown
    (payment.js counts from the seconds left at rendering)."""
    if order.hold_expires_at is None:
        return ""
    expired = gettext("expired")
    return format_html(
        '<time datetime="{}" data-countdown data-seconds-left="{}" data-expired="{}"'
        ' data-testid="hold-left">{}</time>',
        order.hold_expires_at.isoformat(),
        max(0, int((order.hold_expires_at - now).total_seconds())),
        expired,
        timeuntil(order.hold_expires_at, now) if order.hold_expires_at > now else expired,
    )


@register.inclusion_tag("payments/_panel.html", takes_context=True)
def payment_panel(context: template.Context, order: Order) -> dict[str, Any]:
    return {
        **panel_context(order),
        "request": context.get("request"),
        "csrf_token": context.get("csrf_token"),
    }


@register.simple_tag(takes_context=True)
def order_receipt(context: template.Context, order: Order) -> dict[str, Any]:
    """The order page's receipt part: its links once paid, and the billing details form (the
    one just refused, with its errors, when the page is shown again for it)."""
    form = context.get("billing_form")
    if form is None:
        billing = receipts.billing_of(order)
        form = BillingForm(
            initial={
                "organisation": billing.organisation or order.organisation,
                "address": billing.address,
                "vat_id": billing.vat_id,
            }
        )
    paid = receipts.has_receipt(order, invoices_of(order))
    return {
        "form": form,
        "page_url": receipts.receipt_path(order) if paid else "",
        "pdf_url": receipts.receipt_path(order, pdf=True) if paid else "",
    }


@register.simple_tag
def receipt_link(order: Order) -> str:
    """The absolute link to the order's receipt (for mails), or "" while it has none."""
    return receipts.receipt_link(order) if receipts.has_receipt(order) else ""
