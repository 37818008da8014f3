"""The order page's credit choice: the time an incident took, as hours added to the window
or as money back (reservations.incidents, the same services as the API's)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.utils.formats import date_format
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from reservations import incidents, services
from reservations.links import order_by_link, order_url
from reservations.models import Credit


@require_POST
def take(request: HttpRequest, reference: str, secret: str, credit: int) -> HttpResponse:
    """Take the credit as ``time`` or ``money``; back to the order page, saying what happened."""
    order = order_by_link(reference, secret)
    found = get_object_or_404(Credit, pk=credit, order=order)
    choice = request.POST.get("take")
    if choice not in ("time", "money"):  # only the page's two buttons post here
        messages.error(request, _("Choose time or money for this credit."))
        return redirect(order_url(order) + "#incidents")
    actor = services.actor_on_link(request.user, order)
    try:
        if choice == "time":
            extended = incidents.take_as_time(found, actor=actor)
            messages.success(
                request,
                _("Added: your window now ends %(end)s (UTC).")
                % {"end": date_format(extended.ends_at, "DATETIME_FORMAT")},
            )
        else:
            incidents.take_as_money(found, actor=actor)
            messages.success(
                request,
                _("It is sent back in the coin you paid with: we mail you for the address."),
            )
    except incidents.CreditRefused as refused:
        messages.error(request, refused.message)
    return redirect(order_url(order) + "#incidents")
