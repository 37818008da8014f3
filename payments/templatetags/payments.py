"""``{% payment_panel order %}`` on the order page: reads the database only."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils import timezone

from payments import refunds, services
from payments.models import Invoice
from payments.panel import panel_for
from reservations.models import Order

register = template.Library()


def panel_context(order: Order) -> dict[str, Any]:
    # Most page views of an unpaid order have no invoice yet: look for its id first.
    current = Invoice.objects.filter(order=order, is_current=True).values_list("pk", flat=True)
    invoice_id = current.first()
    invoice = (
        Invoice.objects.select_related("asset__chain", "deposit_address").get(pk=invoice_id)
        if invoice_id
        else None
    )
    now = timezone.now()
    return {
        "order": order,
        "panel": panel_for(invoice, now) if invoice else None,
        "assets": services.offered_assets(),
        "refunds": refunds.lines_for(order),
        "now": now,
    }


@register.inclusion_tag("payments/_panel.html", takes_context=True)
def payment_panel(context: template.Context, order: Order) -> dict[str, Any]:
    return {
        **panel_context(order),
        "request": context.get("request"),
        "csrf_token": context.get("csrf_token"),
    }
