"""``{% campaign_part %}``: a 30-day order's checkpoints with their outcomes, the abort
criteria, and the early-end request, with the forms the researcher acts through."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils import timezone

from pages.campaign import REFUSAL
from reservations import campaign
from reservations.models import Checkpoint, Order, Window

register = template.Library()


@register.inclusion_tag("pages/_campaign.html", takes_context=True)
def campaign_part(context: template.Context, order: Order) -> dict[str, Any]:
    if order.window_days != Window.THIRTY_DAYS:
        return {"campaign": False}
    now = timezone.now()
    request = context.get("request")
    refusal = request.session.pop(REFUSAL, None) if request is not None else None
    checkpoints = list(order.campaign_checkpoints.all())
    for checkpoint in checkpoints:
        checkpoint.order = order  # one order row for all of them
        checkpoint.may_record = campaign.may_record(checkpoint, now)  # type: ignore[attr-defined]
        checkpoint.form_id = f"checkpoint-{checkpoint.position}"  # type: ignore[attr-defined]
    requests = list(order.early_end_requests.all())
    open_request = next((r for r in requests if r.handled_at is None), None)
    return {
        "campaign": True,
        "order": order,
        "checkpoints": checkpoints,
        "outcomes": Checkpoint.Outcome.choices,
        "early_end_requests": requests,
        "may_ask_early_end": order.status == Order.STATUS_ACTIVE and open_request is None,
        "refusal": refusal or {},
        "csrf_token": context.get("csrf_token"),
        "note_limit": campaign.NOTE_LIMIT,
    }
