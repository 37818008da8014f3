"""``{% access_panel order %}``: how to connect, and each lot's validation report."""

from __future__ import annotations

from typing import Any

from django import template

from provisioning.models import ProvisioningJob
from reservations.models import Order

register = template.Library()


@register.inclusion_tag("provisioning/_access.html")
def access_panel(order: Order) -> dict[str, Any]:
    jobs = []
    if order.status in (Order.STATUS_APPROVED, Order.STATUS_ACTIVE, Order.STATUS_COMPLETED):
        jobs = list(ProvisioningJob.objects.filter(order=order).select_related("lot__host"))
    return {"order": order, "jobs": jobs}
