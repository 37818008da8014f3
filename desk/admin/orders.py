"""The order's page in the desk: its payment, access, report and history in one place."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import URLPattern, path, reverse
from django.utils.decorators import method_decorator
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import gettext, gettext_lazy
from django.views.decorators.http import require_POST

from desk import today as desk
from infra.records import ReadOnlyInline, ask_reason
from payments.models import Invoice
from payments.receipt_admin import BillingInline, ReceiptInline
from provisioning.admin import SplitTestInline, report_summary
from provisioning.models import ProvisioningJob
from provisioning.services import approve_order
from reservations import services
from reservations.admin import (
    EventInline,
    HoldInline,
    SshKeyInline,
    window_html,
)
from reservations.campaign_admin import CheckpointInline, EarlyEndRequestInline
from reservations.errors import InvalidTransition
from reservations.incident_admin import CreditInline, OrderIncidentInline
from reservations.models import (
    Order,
)


class ProvisioningInline(ReadOnlyInline):
    """Each lot's provisioning job: where it is, why it failed, what its benchmark found."""

    model = ProvisioningJob
    fields = ("lot", "status", "access_held", "steps_done", "error", "validation_report")
    readonly_fields = fields

    @admin.display(description="validation report")
    def validation_report(self, job: ProvisioningJob) -> str:
        return report_summary(job)


class NeedsActionFilter(admin.SimpleListFilter):
    """The orders waiting on a person (the same conditions as the desk's Today)."""

    title = gettext_lazy("next action")
    parameter_name = "action"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("any", gettext_lazy("waiting on the operator")), *desk.NEXT_ACTIONS.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Order]) -> QuerySet[Order]:
        value = self.value()
        if value == "any":
            waiting = desk.needing_action(Order.objects.all())
        elif value == "approve":
            waiting = Order.objects.filter(status=Order.STATUS_PAID)
        elif value in desk.NEXT_ACTIONS:
            waiting = desk.with_next_action(Order.objects.all()).filter(**{f"needs_{value}": True})
        else:
            return queryset
        return queryset.filter(pk__in=waiting.values("pk"))


class OrderChangeList(ChangeList):
    """The order list's rows carry their payment state and next action (annotated once)."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Order]:
        return desk.with_next_action(super().get_queryset(request, exclude_parameters))


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = (
        "reference",
        "status",
        "booked",
        "window_column",
        "payment",
        "next_action",
        "total_usd",
        "contact_email",
    )
    list_filter = (NeedsActionFilter, "status", "kind", "window_days", "usage_mode", "starts_at")
    date_hierarchy = "created_at"
    search_fields = (
        "reference",
        "contact_email",
        "contact_name",
        "organisation",
        "=invoices__deposit_address__address",
        "=invoices__transfers__tx_hash",
        "=invoices__claim_tx_hash",
    )
    search_help_text = gettext_lazy(
        "Reference, e-mail, name, organisation; or a deposit address or transaction hash (whole)."
    )
    list_select_related = ("kind",)
    inlines = (
        HoldInline,
        SshKeyInline,
        BillingInline,
        ReceiptInline,
        ProvisioningInline,
        OrderIncidentInline,
        CreditInline,
        SplitTestInline,
        CheckpointInline,
        EarlyEndRequestInline,
        EventInline,
    )
    actions = ("approve_orders", "cancel_orders")
    change_form_template = "admin/reservations/order/change_form.html"
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "reference",
                    "status",
                    "user",
                    "language",
                    "created_at",
                    "placed_mail_sent_at",
                )
            },
        ),
        (
            "Contact",
            {
                "fields": (
                    "contact_name",
                    "contact_email",
                    "contact_confirmed_at",
                    "organisation",
                    "contact_phone",
                    "client_key",
                    "mailbox_key",
                )
            },
        ),
        (
            "Booking",
            {
                "fields": (
                    "kind",
                    "environment",
                    "lot_count",
                    "window_days",
                    "starts_at",
                    "ends_at",
                    "usage_mode",
                    "unit_price_usd",
                    "total_usd",
                    "hold_expires_at",
                    "extends",
                    "joined_at",
                    "extension_list",
                )
            },
        ),
        (
            "Research plan",
            {
                "fields": (
                    "hypothesis",
                    "hypothesis_text",
                    "model_params_billion",
                    "model_precision",
                    "model_workload",
                    "model_seq_len",
                    "model_micro_batch",
                    "checkpoints",
                    "abort_criteria",
                )
            },
        ),
    )

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return OrderChangeList

    @admin.display(description=gettext_lazy("booked"), ordering="kind__name")
    def booked(self, order: Order) -> str:
        booked = f"{order.lot_count} × {order.kind.name} · {order.window_days} d"
        if order.extends_id is not None:
            extension = gettext("extension")
            return f"{booked} · {extension}"
        return booked

    @admin.display(description=gettext_lazy("extensions"))
    def extension_list(self, order: Order) -> str:
        """Each extension of the order, linked: its days, state, and whether it was joined."""
        rows = [
            (
                reverse("admin:reservations_order_change", args=[extension.pk]),
                extension.reference,
                extension.window_days,
                gettext("added to the window")
                if extension.joined_at
                else extension.get_status_display(),
            )
            for extension in order.extensions.order_by("created_at")
        ]
        if not rows:
            return "—"
        return format_html_join(mark_safe("<br>"), '<a href="{}">{}</a>: +{} d, {}', rows)

    @admin.display(description=gettext_lazy("window"), ordering="starts_at")
    def window_column(self, order: Order) -> str:
        return window_html(order)

    @admin.display(description=gettext_lazy("payment"))
    def payment(self, order: Order) -> str:
        status = getattr(order, "payment_status", None)
        if status is None:
            return "—"
        words = str(dict(Invoice.STATUS_CHOICES).get(status, status))
        exception = getattr(order, "payment_exception", "")
        if exception:
            words += f" · {dict(Invoice.EXCEPTION_CHOICES).get(exception, exception)}"
        return words

    @admin.display(description=gettext_lazy("next action"))
    def next_action(self, order: Order) -> str:
        if not hasattr(order, "needs_refund"):
            return ""
        key = desk.next_action(order)
        if not key:
            return "—"
        return format_html('<strong data-testid="next-action">{}</strong>', desk.NEXT_ACTIONS[key])

    def get_readonly_fields(self, request: HttpRequest, obj: Order | None = None) -> list[str]:
        # Orders change only through services: every field is read-only here.
        return [str(f) for _name, options in self.fieldsets for f in options["fields"]]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Order | None = None) -> bool:
        return False

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # Nothing here is edited by hand, so no save buttons.
        context = {"show_save": False, "show_save_and_continue": False, **(extra_context or {})}
        return super().changeform_view(request, object_id, form_url, context)

    def get_urls(self) -> list[URLPattern]:
        approve = path(
            "<int:order_id>/approve/",
            self.admin_site.admin_view(self.approve_view),
            name="reservations_order_approve",
        )
        return [approve, *super().get_urls()]

    @method_decorator(require_POST)
    def approve_view(self, request: HttpRequest, order_id: int) -> HttpResponse:
        """The "Approve" button on a paid order's page: the same service as the action."""
        if not self.has_change_permission(request):
            raise PermissionDenied
        self._approve(request, Order.objects.filter(pk=order_id))
        return redirect("admin:reservations_order_change", order_id)

    @admin.action(description="Approve selected paid orders (starts provisioning)")
    def approve_orders(self, request: HttpRequest, queryset: QuerySet[Order]) -> None:
        self._approve(request, queryset)

    def _approve(self, request: HttpRequest, queryset: QuerySet[Order]) -> None:
        actor = services.Actor.of(request.user)  # type: ignore[arg-type]
        for order in queryset:
            try:
                approve_order(order, actor=actor)
            except InvalidTransition as exc:
                self.message_user(request, f"{order.reference}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{order.reference} approved; provisioning started.")

    @admin.action(description="Cancel selected orders (asks for a reason)")
    def cancel_orders(self, request: HttpRequest, queryset: QuerySet[Order]) -> HttpResponse | None:
        reason, page = ask_reason(
            self,
            request,
            queryset,
            action="cancel_orders",
            title="Cancel orders",
            explanation="Cancel these orders? Their lots are released at once; "
            "a paid order's refund is yours to make.",
        )
        if reason is None:
            return page
        actor = services.Actor.of(request.user)  # type: ignore[arg-type]
        for order in queryset:
            try:
                services.cancel_order(order, actor=actor, reason=reason)
            except InvalidTransition as exc:
                self.message_user(request, f"{order.reference}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{order.reference} cancelled.", messages.SUCCESS)
        return None
