"""The desk's webhooks: an operator's endpoints (every order, and the operators' events),
their secrets shown once, the delivery log with "redeliver", "send a test event". Every
change goes through webhooks.services, the same functions as the account page and the API."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from accounts.models import User
from infra.records import ReadOnlyInline, RecordAdmin
from webhooks import catalogue, services
from webhooks.models import Attempt, Delivery, Endpoint


class EndpointAdminForm(forms.ModelForm):
    url = forms.URLField(label=_("URL"), max_length=500, assume_scheme="https")
    event_types = forms.MultipleChoiceField(
        label=_("Events"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        choices=[(e.name, f"{e.name} — {e.meaning}") for e in catalogue.EVENT_TYPES],
        help_text=_("None ticked: every event."),
    )
    owner: User

    class Meta:
        model = Endpoint
        fields = ("url", "description", "event_types", "enabled", "all_orders")

    def clean(self) -> dict[str, Any]:
        """The service's own checks (address, events, limits), shown on the fields."""
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            services.check_endpoint(
                self.owner,
                url=data["url"],
                event_types=data.get("event_types") or [],
                all_orders=bool(data.get("all_orders")),
                endpoint=self.instance if self.instance.pk else None,
            )
        except ValidationError as exc:
            for field, errors in exc.error_dict.items():
                for error in errors:
                    self.add_error(field if field in self.fields else None, error)
        return data


class AttemptInline(ReadOnlyInline):
    model = Attempt
    fields = ("number", "started_at", "status_code", "duration_ms", "error", "response", "by_hand")
    readonly_fields = fields


class DeliveryInline(ReadOnlyInline):
    model = Delivery
    fields = ("created_at", "event", "status", "attempts", "next_attempt_at", "log")
    readonly_fields = fields
    ordering = ("-created_at",)
    max_num = 0

    @admin.display(description=_("event"))
    def event(self, delivery: Delivery) -> str:
        return delivery.message.event_type

    @admin.display(description=_("log"))
    def log(self, delivery: Delivery) -> str:
        url = reverse("admin:webhooks_delivery_change", args=[delivery.pk])
        return format_html('<a href="{}">{}</a>', url, _("attempts"))

    def get_queryset(self, request: HttpRequest) -> QuerySet[Delivery]:
        return super().get_queryset(request).select_related("message")


@admin.register(Endpoint)
class EndpointAdmin(admin.ModelAdmin):
    form = EndpointAdminForm
    list_display = ("url", "owner", "all_orders", "enabled", "failing_since", "created_at")
    list_filter = ("enabled", "all_orders", ("failing_since", admin.EmptyFieldListFilter))
    search_fields = ("url", "description", "owner__email")
    readonly_fields = ("public_id", "owner", "failing_since", "disabled_reason", "created_at")
    actions = ["send_test_event", "rotate_secret"]

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        owner = obj.owner if obj is not None else request.user
        return type("BoundEndpointForm", (form,), {"owner": owner})

    def get_inlines(self, request: HttpRequest, obj: Any) -> list[Any]:
        return [DeliveryInline] if obj is not None else []  # a new one has no deliveries

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        return {"all_orders": True, "enabled": True}  # an operator's endpoint hears of all

    def save_model(self, request: HttpRequest, obj: Endpoint, form: Any, change: bool) -> None:
        fields = {name: form.cleaned_data.get(name) for name in EndpointAdminForm.Meta.fields}
        fields["event_types"] = fields["event_types"] or []
        if change:  # from the row as stored: ``obj`` already holds the form's values
            services.update_endpoint(Endpoint.objects.get(pk=obj.pk), **fields)
            return
        assert isinstance(request.user, User)
        endpoint, secret = services.create_endpoint(request.user, **fields)
        obj.pk, obj.public_id = endpoint.pk, endpoint.public_id
        request._webhook_secret = secret  # type: ignore[attr-defined]

    def response_add(
        self, request: HttpRequest, obj: Endpoint, post_url_continue: Any = None
    ) -> HttpResponse:
        return _secret_page(request, obj, request._webhook_secret)  # type: ignore[attr-defined]

    @admin.action(description=_("Send a test event"))
    def send_test_event(self, request: HttpRequest, queryset: QuerySet[Endpoint]) -> None:
        for endpoint in queryset:
            services.send_test(endpoint)
        count = queryset.count()
        messages.success(
            request,
            ngettext(
                "A test event is on its way to %(count)d endpoint.",
                "A test event is on its way to %(count)d endpoints.",
                count,
            )
            % {"count": count},
        )

    @admin.action(description=_("Rotate the secret (one endpoint)"))
    def rotate_secret(
        self, request: HttpRequest, queryset: QuerySet[Endpoint]
    ) -> HttpResponse | None:
        if queryset.count() != 1:
            messages.error(request, _("Choose one endpoint: its new secret is shown once."))
            return None
        endpoint = queryset.get()
        return _secret_page(request, endpoint, services.rotate_secret(endpoint))


def _secret_page(request: HttpRequest, endpoint: Endpoint, secret: str) -> HttpResponse:
    """The new secret, this once, on a page of its own (never in a message or the session)."""
    response = TemplateResponse(
        request,
        "admin/webhooks/secret.html",
        {
            **admin.site.each_context(request),
            "title": _("The endpoint's signing secret"),
            "endpoint": endpoint,
            "secret": secret,
            "change_url": reverse("admin:webhooks_endpoint_change", args=[endpoint.pk]),
        },
    )
    response["Cache-Control"] = "no-store"
    return response


@admin.register(Delivery)
class DeliveryAdmin(RecordAdmin):
    """The delivery log: read-only; "redeliver" is the action."""

    list_display = (
        "created_at",
        "event",
        "endpoint",
        "order",
        "status",
        "attempts",
        "next_attempt_at",
    )
    list_filter = ("status", "message__event_type")
    search_fields = ("message__public_id", "endpoint__url", "message__order__reference")
    list_select_related = ("message__order", "endpoint")
    readonly_fields = (
        "message",
        "endpoint",
        "status",
        "attempts",
        "next_attempt_at",
        "created_at",
        "payload",
    )
    fields = readonly_fields
    inlines = [AttemptInline]
    actions = ["redeliver"]

    @admin.display(description=_("event"))
    def event(self, delivery: Delivery) -> str:
        return delivery.message.event_type

    @admin.display(description=_("order"))
    def order(self, delivery: Delivery) -> str:
        return delivery.message.order.reference if delivery.message.order else "—"

    @admin.display(description=_("payload"))
    def payload(self, delivery: Delivery) -> str:
        return json.dumps(delivery.message.payload, indent=2)[:5000]

    @admin.action(description=_("Redeliver"))
    def redeliver(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        count = sum(services.redeliver(delivery) for delivery in queryset)
        messages.success(
            request,
            ngettext(
                "%(count)d delivery will be attempted again now.",
                "%(count)d deliveries will be attempted again now.",
                count,
            )
            % {"count": count},
        )
