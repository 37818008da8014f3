"""The order page, for whoever holds its link, and the forms on it that need the page
again when they are refused: the contact address's confirmation and the billing details.

The page composes what the domain apps show of an order (its summary and campaign, the
payment panel, access and the report, self-service): pages.order_page renders and keeps it.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from pages.order_page import for_link, order_page
from payments import receipts
from payments.forms import BillingForm
from reservations import services
from reservations.errors import BookingRefused
from reservations.links import order_by_link, order_url


def order_detail(request: HttpRequest, reference: str, secret: str) -> HttpResponse:
    """The order page, for whoever holds its link."""
    return for_link(request, reference, secret)


@require_http_methods(["GET", "POST"])
def confirm_contact(request: HttpRequest, reference: str, secret: str, token: str) -> HttpResponse:
    """The link mailed to the contact address. Opening it changes nothing (mail scanners
    open links); its button confirms the address."""
    order = order_by_link(reference, secret)
    if request.method == "POST":
        try:
            services.confirm_contact(order, token)
        except BookingRefused as exc:
            return render(
                request,
                "pages/confirm_contact.html",
                {"order": order, "refusals": exc.messages},
                status=400,
            )
        messages.success(request, _("Thank you: your e-mail address is confirmed."))
        return redirect(order_url(order))
    return render(request, "pages/confirm_contact.html", {"order": order})


@require_POST
def billing(request: HttpRequest, reference: str, secret: str) -> HttpResponse:
    """Whom the receipt is made out to (the order page's form): saved, or the order page
    again with the form's errors."""
    order = order_by_link(reference, secret)
    form = BillingForm(request.POST)
    if not form.is_valid():  # the order page again, the errors at their fields
        return order_page(request, order, status=400, billing_form=form)
    receipts.save_billing(order, **form.cleaned_data)
    messages.success(request, _("Your billing details are saved."))
    return redirect(order_url(order) + "#receipt")
