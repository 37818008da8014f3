"""The order page's self-service part (templates/reservations/_order_self_service.html) and
the help contact every page and mail shows."""

from __future__ import annotations

from typing import Any

from django import template
from django.conf import settings
from django.utils import timezone

from pages.self_service import DONE, FORMS, CancelForm, KeysForm
from reservations import services
from reservations.models import Order

register = template.Library()


@register.simple_tag(takes_context=True)
def self_service(context: template.Context, order: Order) -> dict[str, Any]:
    """What the order's researcher may do now, with the forms (bound, with their errors,
    when a POST was refused: reservations.self_service puts them on the request)."""
    request = context.get("request")
    bound: dict[str, Any] = getattr(request, FORMS, {}) if request is not None else {}
    now = timezone.now()
    can_change = services.can_change_keys(order, now=now)
    keys_form = bound.get("keys_form")
    if keys_form is None and can_change:
        current = "\n".join(order.ssh_keys.values_list("public_key", flat=True))
        keys_form = KeysForm(initial={"ssh_public_keys": current})
    access_open = order.status == Order.STATUS_ACTIVE or (
        order.status == Order.STATUS_APPROVED
        and order.access_grants.filter(keys_at__isnull=False, closed_at__isnull=True).exists()
    )
    can_cancel = services.can_cancel(order)
    # A refusal because the action is no longer possible: said, without its form.
    refused = [
        str(error)
        for name, allowed in (("keys_form", can_change), ("cancel_form", can_cancel))
        if not allowed and bound.get(name) is not None
        for error in bound[name].non_field_errors()
    ]
    done = request.GET.get("done", "") if request is not None and not bound else ""
    return {
        "done": DONE.get(done, ""),
        "refused": refused,
        "can_cancel": can_cancel,
        "cancel_form": bound.get("cancel_form") or CancelForm(),
        "can_change_keys": can_change,
        "keys_form": keys_form,
        "access_open": access_open,
    }


@register.inclusion_tag("_help_contact.html")
def help_contact() -> dict[str, str]:
    """Where researchers get help: the operator's address (HELP_EMAIL) and page (HELP_URL)."""
    return {"help_email": settings.HELP_EMAIL, "help_url": settings.HELP_URL}
