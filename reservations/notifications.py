"""Mail to researchers about their orders, in the language they booked in."""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse
from django.utils import translation

from config.mail import send_templated
from reservations.models import Order


def order_link(order: Order) -> str:
    with translation.override(order.language):
        path = reverse("reservations:order", args=[order.reference, order.secret])
    return f"{settings.SITE_URL}{path}"


def send_order_placed(order: Order) -> None:
    """The order's link and what was booked; the link is how a guest comes back."""
    context = {"order": order, "link": order_link(order)}
    send_templated("order_placed", context, order.contact_email, order.language)
