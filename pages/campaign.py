"""The order page's campaign forms: record a checkpoint's outcome, ask to end early.

Thin: parse, call one service of reservations.campaign, and come back to the order page.
A refusal is kept in the session for the campaign part to show next to its form (the
order page's message slot belongs to the payment panel)."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from reservations import campaign, services
from reservations.links import order_by_link, order_url
from reservations.models import Checkpoint, Order, Window

REFUSAL = "campaign_refusal"
"""The session key of the last refusal: ``{"form": "outcome-<n>" | "early-end", "message"}``."""


def _back(request: HttpRequest, order: Order, form: str, refused: Exception | None) -> HttpResponse:
    if refused is not None:
        request.session[REFUSAL] = {"form": form, "message": str(refused)}
    return redirect(f"{order_url(order)}#{form}")


@require_POST
def record_outcome(
    request: HttpRequest, reference: str, secret: str, position: int
) -> HttpResponse:
    order = order_by_link(reference, secret)
    checkpoint = get_object_or_404(
        Checkpoint.objects.select_related("order"), order=order, position=position
    )
    try:
        campaign.record_outcome(
            checkpoint,
            outcome=request.POST.get("outcome", ""),
            note=request.POST.get("note", ""),
            actor=services.actor_on_link(request.user, order),
        )
    except campaign.CampaignRefused as exc:
        return _back(request, order, f"checkpoint-{position}", exc)
    return _back(request, order, f"checkpoint-{position}", None)


@require_POST
def request_early_end(request: HttpRequest, reference: str, secret: str) -> HttpResponse:
    order = order_by_link(reference, secret)
    if order.window_days != Window.THIRTY_DAYS:
        raise Http404
    try:
        campaign.request_early_end(
            order,
            reason=request.POST.get("reason", ""),
            actor=services.actor_on_link(request.user, order),
        )
    except campaign.CampaignRefused as exc:
        return _back(request, order, "early-end", exc)
    return _back(request, order, "early-end", None)
