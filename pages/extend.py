"""The order page's "keep going" part: extend on the same lots, and book again.

Extending posts to the order's link and calls the same service as the API
(``reservations.extensions.place_extension``); the extension is an order of its own, and the
researcher lands on its page to pay it. "Book again" opens the booking form with the order's
plan filled in (the researcher picks a date)."""

from __future__ import annotations

import contextlib
from datetime import date
from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from infra.forms import AccessibleForm
from pages.booking import DRAFT
from pages.forms import CheckpointsField, PlanForm
from pages.order_page import order_page
from reservations import extensions, services
from reservations.errors import MESSAGES
from reservations.links import order_by_link, order_url
from reservations.models import WINDOW_DAYS, Order
from reservations.validation import TEXT_LIMITS

FORM = "extend_form"
"""The request attribute that carries a refused extension form back to the order page."""
CAMPAIGN_CODES = {
    "checkpoints_required": "checkpoints",
    "checkpoint_invalid": "checkpoints",
    "checkpoint_outside_window": "checkpoints",
    "checkpoint_too_long": "checkpoints",
    "too_many_checkpoints": "checkpoints",
    "bidi_control": "checkpoints",
    "abort_criteria_required": "abort_criteria",
}
"""The refusals that belong to a field of the form (the others are said above it)."""


class ExtendForm(AccessibleForm):
    days = forms.TypedChoiceField(
        label=gettext_lazy("More days on the same cards"),
        coerce=int,
        widget=forms.RadioSelect,
        choices=(),
    )
    checkpoints = CheckpointsField(
        label=gettext_lazy("Checkpoints"),
        required=False,
        help_text=gettext_lazy(
            "For 30 more days, a campaign: a day within the extension and what you will have "
            "measured by then."
        ),
    )
    abort_criteria = forms.CharField(
        label=gettext_lazy("Abort criteria"),
        required=False,
        max_length=TEXT_LIMITS["abort_criteria"],
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=gettext_lazy("For 30 more days: what result ends the campaign early."),
    )

    def __init__(self, *args: Any, offers: extensions.Offers, **kwargs: Any) -> None:
        super().__init__(*args, auto_id="extend_%s", **kwargs)
        field = self.fields["days"]
        assert isinstance(field, forms.TypedChoiceField)
        field.choices = [(offer.days, str(offer.days)) for offer in offers.offers if offer.fits]


def plan_of(order: Order) -> dict[str, Any]:
    """An order's plan as the booking form's first step keeps it (no date: a new one)."""
    return {
        "kind": order.kind.slug,
        "lot_count": order.lot_count,
        "window_days": order.window_days,
        "start_date": PlanForm.default_start().isoformat(),
        "environment": order.environment.slug,
        "usage_mode": order.usage_mode,
        "hypothesis": order.hypothesis,
        "hypothesis_text": order.hypothesis_text,
        **(
            {"model_params_billion": str(order.model_params_billion)}
            if order.model_params_billion is not None
            else {}
        ),
        "model_precision": order.model_precision,
        "model_workload": order.model_workload,
    }


@require_POST
def extend(request: HttpRequest, reference: str, secret: str) -> HttpResponse:
    """Place an extension of the order; its page follows, to pay it."""
    order = order_by_link(reference, secret)
    offered = extensions.offers(order)
    form = ExtendForm(request.POST, offers=offered)
    if offered.refused:
        form.is_valid()
        form.add_error(None, MESSAGES[offered.refused])
    elif form.is_valid():
        try:
            extension = extensions.place_extension(
                order,
                form.cleaned_data["days"],
                actor=services.actor_on_link(request.user, order),
                checkpoints=form.cleaned_data["checkpoints"],
                abort_criteria=form.cleaned_data["abort_criteria"],
            )
        except extensions.ExtensionRefused as exc:
            form.add_error(CAMPAIGN_CODES.get(exc.code), str(exc))
        else:
            return redirect(order_url(extension))
    setattr(request, FORM, form)
    return order_page(request, order, status=400, fresh=True)


def book_again(request: HttpRequest, reference: str, secret: str) -> HttpResponse:
    """The booking form with this order's plan and contact filled in; a date to choose.

    ``?days=`` and ``?start=`` (a length and a day, as the extension part offers them when
    the order's own lots are not free: other lots of the kind from that day) replace the
    order's length and the default start; anything else in them is ignored (the form checks
    the day as any other)."""
    order = order_by_link(reference, secret)
    plan = plan_of(order)
    days = request.GET.get("days", "")
    if days.isdigit() and int(days) in WINDOW_DAYS:
        plan["window_days"] = int(days)
    with contextlib.suppress(ValueError):  # not a day: the default start stays
        plan["start_date"] = date.fromisoformat(request.GET.get("start", "")).isoformat()
    request.session[DRAFT] = {
        "plan": plan,
        # The contact step starts from the order's contact and keys (shown, to be checked).
        "again_contact": {
            "contact_name": order.contact_name,
            "contact_email": order.contact_email,
            "organisation": order.organisation,
            "contact_phone": order.contact_phone,
            "ssh_public_keys": "\n".join(order.ssh_keys.values_list("public_key", flat=True)),
        },
    }
    return redirect("pages:book_plan")
