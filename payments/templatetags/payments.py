"""``{% payment_panel order %}`` on the order page: reads the database only."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils import timezone

from payments.models import Asset, Invoice
from payments.panel import panel_for
from reservations.models import Order

register = template.Library()


def panel_context(order: Order) -> dict[str, Any]:
    invoice = (
        Invoice.objects.filter(order=order, is_current=True)
        .select_related("asset__chain", "deposit_address")
        .first()
    )
    return {
        "order": order,
        "panel": panel_for(invoice) if invoice else None,
        "assets": Asset.objects.filter(is_active=True, chain__is_active=True).select_related(
            "chain"
        ),
        "now": timezone.now(),
    }


@register.inclusion_tag("payments/_panel.html", takes_context=True)
def payment_panel(context: template.Context, order: Order) -> dict[str, Any]:
    return {
        **panel_context(order),
        "request": context.get("request"),
        "csrf_token": context.get("csrf_token"),
    }
