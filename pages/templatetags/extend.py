"""The order page's "keep going" part (templates/pages/_order_extend.html): the lengths an
order can be extended by on its lots, its extensions, and for an extension, its order."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils import timezone

from pages.extend import FORM, ExtendForm
from reservations import extensions
from reservations.errors import MESSAGES
from reservations.links import order_url
from reservations.models import Order

register = template.Library()

AGAIN = (Order.STATUS_COMPLETED, Order.STATUS_EXPIRED, Order.STATUS_CANCELLED)
"""Past orders offer "book again"."""


@register.simple_tag(takes_context=True)
def keep_going(context: template.Context, order: Order) -> dict[str, Any]:
    request = context.get("request")
    now = timezone.now()
    if order.extends_id is not None:
        parent = Order.objects.get(pk=order.extends_id)
        return {
            "parent": parent,
            "parent_url": order_url(parent),
            "joined": order.joined_at is not None,
            "book_again": order.status in AGAIN,
        }
    offered = extensions.offers(order, now=now)
    bound = getattr(request, FORM, None) if request is not None else None
    return {
        "offers": offered,
        "form": bound or ExtendForm(offers=offered),
        "refused": MESSAGES[offered.refused] if offered.refused else "",
        "show_form": not offered.refused and offered.any_fits,
        "offered": bool(offered.offers) or offered.refused != "not_extendable",
        "extensions": [(extension, order_url(extension)) for extension in offered.extensions],
        "book_again": order.status in AGAIN,
    }
