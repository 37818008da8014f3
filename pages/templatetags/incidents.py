"""The order page's incidents part (templates/pages/_order_incidents.html): a lot that failed
its checks, what moved where, and the credit for the time lost, to take as time or money."""

from __future__ import annotations

from typing import Any

from django import template

from provisioning import replacement
from provisioning.models import ProvisioningJob
from reservations.models import Credit, Order

register = template.Library()

AFTER_APPROVAL = (Order.STATUS_APPROVED, Order.STATUS_ACTIVE, Order.STATUS_COMPLETED)


@register.simple_tag
def order_incidents(order: Order) -> dict[str, Any]:
    """The order's incidents, newest first, each with its credit (one query; none for an
    order not approved yet: a lot is only checked once the order is approved)."""
    if order.status not in AFTER_APPROVAL:
        return {"incidents": [], "offered": False}
    incidents = list(
        order.incidents.select_related("lot__host", "replacement__host", "credit").order_by(
            "-started_at", "-id"
        )
    )
    credits = [getattr(incident, "credit", None) for incident in incidents]
    return {
        "incidents": [
            {"incident": incident, "credit": credit, "reachable_until": _reachable(incident)}
            for incident, credit in zip(incidents, credits, strict=True)
        ],
        "offered": any(c is not None and c.status == Credit.Status.OFFERED for c in credits),
    }


def _reachable(incident: Any) -> Any:
    """Until when a lot replaced while its access was open stays reachable (to copy files
    off it), while it still is; None otherwise."""
    if incident.at_acceptance or incident.replacement_id is None:
        return None
    job = (
        ProvisioningJob.objects.select_related("order", "grant")
        .filter(order_id=incident.order_id, lot_id=incident.lot_id, replaced_at__isnull=False)
        .exclude(status=ProvisioningJob.Status.REVOKED)
        .first()
    )
    if job is None or job.access_grant is None or job.access_grant.keys_at is None:
        return None
    return replacement.open_until(job)
