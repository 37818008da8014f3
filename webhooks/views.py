"""The account's webhook pages (/<language>/account/webhooks/): register an endpoint (its
secret shown once), change it, rotate its secret, send a test event, read the delivery log
and redeliver. One account's endpoints only: another's is a 404."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from infra.security import no_store
from webhooks import services
from webhooks.api import deliveries_of
from webhooks.forms import EndpointForm
from webhooks.models import Delivery, Endpoint


def _mine(request: HttpRequest, endpoint_id: str) -> Endpoint:
    return get_object_or_404(Endpoint, public_id=endpoint_id, owner=request.user)


def add_errors(form: EndpointForm, exc: ValidationError) -> None:
    """A service's refusal shown on the form's fields (``all_orders`` on the form's top)."""
    for field, errors in exc.error_dict.items():
        for error in errors:
            form.add_error(field if field in form.fields else None, error)


@login_required
@no_store  # it shows a new secret once: never kept by the browser or a proxy
@require_http_methods(["GET", "POST"])
def endpoints(request: HttpRequest) -> HttpResponse:
    form = EndpointForm(request.POST or None, initial={"enabled": True})
    shown = None
    if request.method == "POST" and form.is_valid():
        try:
            endpoint, shown = services.create_endpoint(request.user, **form.cleaned_data)  # type: ignore[arg-type]
        except ValidationError as exc:
            add_errors(form, exc)
        else:
            return _with_secret(request, endpoint, shown)
    mine = Endpoint.objects.filter(owner=request.user)  # type: ignore[misc]
    return render(request, "webhooks/endpoints.html", {"form": form, "endpoints": mine})


def _with_secret(request: HttpRequest, endpoint: Endpoint, secret: str) -> HttpResponse:
    """The endpoint's page with its new secret, this once (not in a redirect's session)."""
    return _page(request, endpoint, EndpointForm(initial=_initial(endpoint)), secret=secret)


def _initial(endpoint: Endpoint) -> dict[str, object]:
    return {
        "url": endpoint.url,
        "description": endpoint.description,
        "event_types": endpoint.event_types,
        "enabled": endpoint.enabled,
    }


def _page(
    request: HttpRequest, endpoint: Endpoint, form: EndpointForm, secret: str | None = None
) -> HttpResponse:
    context = {
        "endpoint": endpoint,
        "form": form,
        "secret": secret,
        "deliveries": deliveries_of(endpoint),
    }
    return render(request, "webhooks/endpoint.html", context)


@login_required
@no_store
@require_http_methods(["GET", "POST"])
def endpoint(request: HttpRequest, endpoint_id: str) -> HttpResponse:
    found = _mine(request, endpoint_id)
    form = EndpointForm(request.POST or None, initial=_initial(found), operator=found.all_orders)
    if request.method == "POST" and form.is_valid():
        try:
            services.update_endpoint(found, **form.cleaned_data)
        except ValidationError as exc:
            add_errors(form, exc)
        else:
            messages.success(request, _("The endpoint is saved."))
            return redirect("webhooks:endpoint", found.public_id)
    return _page(request, found, form)


@login_required
@no_store
@require_POST
def rotate(request: HttpRequest, endpoint_id: str) -> HttpResponse:
    found = _mine(request, endpoint_id)
    secret = services.rotate_secret(found)
    return _with_secret(request, found, secret)


@login_required
@require_POST
def send_test(request: HttpRequest, endpoint_id: str) -> HttpResponse:
    services.send_test(_mine(request, endpoint_id))
    messages.success(request, _("A test event is on its way: see the log below."))
    return redirect("webhooks:endpoint", endpoint_id)


@login_required
@require_POST
def redeliver(request: HttpRequest, endpoint_id: str, delivery_id: int) -> HttpResponse:
    found = _mine(request, endpoint_id)
    delivery = get_object_or_404(Delivery, pk=delivery_id, endpoint=found)
    if services.redeliver(delivery):
        messages.success(request, _("Redelivery asked for: see the log below."))
    else:
        messages.error(request, _("Turn the endpoint on first."))
    return redirect("webhooks:endpoint", endpoint_id)


@login_required
@require_POST
def delete(request: HttpRequest, endpoint_id: str) -> HttpResponse:
    services.delete_endpoint(_mine(request, endpoint_id))
    messages.success(request, _("The endpoint is deleted."))
    return redirect("webhooks:endpoints")
