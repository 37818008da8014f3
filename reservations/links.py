"""An order's link: its reference and its secret, the key to the order for whoever holds it.

The order page itself is the pages app's (it composes payment, access and report); the
lower apps' own order fragments (the payment panel, the live status, the report) open the
order the same way."""

from __future__ import annotations

from django.http import Http404
from django.shortcuts import get_object_or_404
from django.urls import reverse

from reservations.models import Order


def order_url(order: Order) -> str:
    """The order page's path in the active language."""
    return reverse("pages:order", args=[order.reference, order.secret])


def order_by_link(reference: str, secret: str) -> Order:
    """The order this link opens, or 404: the reference alone opens nothing."""
    order = get_object_or_404(Order, reference=reference)
    if not order.opened_by(secret):
        raise Http404
    return order
