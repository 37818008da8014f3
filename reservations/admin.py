"""The operator's desk. Actions are one-liners that call the same services as everything else."""

from __future__ import annotations

import threading
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timezone import localtime
from django.utils.translation import gettext, gettext_lazy
from django.views.decorators.http import require_POST

from config import desk
from payments.receipt_admin import BillingInline, ReceiptInline
from provisioning import fleet
from provisioning.admin import SplitTestInline, report_summary
from provisioning.models import ProvisioningJob
from reservations import inventory, services
from reservations.campaign_admin import CheckpointInline, EarlyEndRequestInline
from reservations.errors import InvalidTransition, MoveRefused
from reservations.models import (
    CARDS_CONSTRAINT,
    Environment,
    HardwareKind,
    Hold,
    Host,
    Lot,
    Order,
    OrderEvent,
    OrderSshKey,
    Price,
)
from reservations.records import ReadOnlyInline, RecordAdmin


class PriceInline(admin.TabularInline):
    model = Price
    extra = 0


@admin.register(HardwareKind)
class HardwareKindAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "architecture", "memory_per_card_gb", "stack", "is_offered")
    list_editable = ("is_offered",)
    prepopulated_fields = {"slug": ("name",)}
    inlines = (PriceInline,)
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "slug",
                    "name",
                    "vendor",
                    "generation",
                    "stack",
                    "memory_per_card_gb",
                    "interconnect",
                    "architecture",
                    "description",
                    "display_order",
                    "is_offered",
                )
            },
        ),
        (
            gettext_lazy("Acceptance references (the benchmark holds a lot that misses one)"),
            {
                "description": gettext_lazy(
                    "Datasheet peaks are dense (not sparse) figures per card; shares are "
                    "between 0 and 1. An empty figure is not checked."
                ),
                "fields": (
                    "accept_sku",
                    ("accept_memory_gib", "accept_memory_share_min"),
                    ("accept_bf16_tflops", "accept_fp8_tflops", "accept_matmul_share_min"),
                    ("accept_hbm_tbps", "accept_hbm_share_min"),
                    "accept_busbw_gbps_min",
                    "accept_card_tolerance",
                    ("accept_min_torch", "accept_min_cuda", "accept_min_rocm"),
                    "accept_min_driver",
                    ("accept_ecc_required", "accept_mig_allowed"),
                ),
            },
        ),
    )


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    list_display = ("kind", "window_days", "amount_usd")
    list_filter = ("kind", "window_days")


@admin.register(Environment)
class EnvironmentAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "stack", "is_offered")
    list_editable = ("is_offered",)
    filter_horizontal = ("compatible_kinds",)
    prepopulated_fields = {"slug": ("name",)}


def refusal_of(exc: IntegrityError) -> str | None:
    """The operator's sentence for a write the inventory's invariants refused in the
    database (reservations.models, migration 0009); None for any other integrity error."""
    name = getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None)
    if name == CARDS_CONSTRAINT:
        return gettext("Nothing saved: two lots that are not retired would share a GPU on a host.")
    if name in ("lot_host_kept_while_booked", "host_kind_kept_while_booked"):
        return gettext(
            "Nothing saved: a lot carrying current or future bookings keeps its host, and "
            "its host keeps its kind. Move or settle the bookings first."
        )
    if name == "lot_cards_of_booked_retired_lot":
        return gettext(
            "Nothing saved: these GPUs belong to a retired lot that still carries bookings."
        )
    if name == "host_name_is_dns_labels":
        return gettext("Nothing saved: this is not a valid host name.")
    return None


class RefusalsAsMessages(admin.ModelAdmin):
    """A write the database refuses (a concurrent change slipped past the forms' checks)
    comes back as an error message on the same page, never a 500; the admin's own
    transaction has rolled everything back."""

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except IntegrityError as exc:
            return self._refused(request, exc)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        try:
            return super().changelist_view(request, extra_context)
        except IntegrityError as exc:
            return self._refused(request, exc)

    def _refused(self, request: HttpRequest, exc: IntegrityError) -> HttpResponse:
        message = refusal_of(exc)
        if message is None:
            raise exc
        self.message_user(request, message, messages.ERROR)
        return redirect(request.get_full_path())


class LotInlineFormSet(forms.BaseInlineFormSet):
    """The host's lots as one form: the rows are checked against each other too (each row's
    own check only sees the lots already saved)."""

    def clean(self) -> None:
        super().clean()
        owner: dict[int, int] = {}
        for number, form in enumerate(self.forms, start=1):
            if not form.has_changed() and form.instance.pk is None:
                continue
            data = getattr(form, "cleaned_data", None) or {}
            if data.get("DELETE"):
                continue
            gpus = (data.get("gpu_a"), data.get("gpu_b"))
            if None in gpus or form.instance.status == Lot.Status.RETIRED:
                continue
            for gpu in gpus:
                other = owner.setdefault(gpu, number)  # type: ignore[arg-type]
                if other != number:
                    raise ValidationError(
                        gettext("Rows %(first)s and %(second)s both take GPU %(gpu)s.")
                        % {"first": other, "second": number, "gpu": gpu}
                    )


class LotInline(admin.TabularInline):
    model = Lot
    formset = LotInlineFormSet
    extra = 0
    # A lot's status changes on its own page or the Lots list, where the bookings it still
    # carries are shown; a new lot starts active.
    readonly_fields = ("status",)


@admin.register(Host)
class HostAdmin(RefusalsAsMessages):
    list_display = ("name", "kind", "address", "ssh_port", "host_key")
    list_filter = ("kind",)
    search_fields = ("name", "address")
    inlines = (LotInline,)
    readonly_fields = ("pinned_fingerprint", "ssh_host_key_presented", "presented_fingerprint")
    exclude = ("ssh_host_key_refused_at",)
    actions = ("pin_presented_key",)

    @admin.display(description="host key")
    def host_key(self, host: Host) -> str:
        from provisioning.ssh import fingerprint

        if host.ssh_host_key_refused_at:
            presented = host.ssh_host_key_presented
            return (
                f"REFUSED {host.ssh_host_key_refused_at:%Y-%m-%d %H:%M} UTC: presented "
                f"{fingerprint(presented) if presented else 'nothing readable'}"
            )
        return self.pinned_fingerprint(host)

    @admin.display(description="pinned key's fingerprint")
    def pinned_fingerprint(self, host: Host) -> str:
        from provisioning.ssh import fingerprint

        return fingerprint(host.ssh_host_key) if host.ssh_host_key.strip() else "not pinned"

    @admin.display(description="presented key's fingerprint")
    def presented_fingerprint(self, host: Host) -> str:
        from provisioning.ssh import fingerprint

        presented = host.ssh_host_key_presented
        return fingerprint(presented) if presented else "-"

    @admin.action(description="Pin the key the host presented (asks for its checked fingerprint)")
    def pin_presented_key(
        self, request: HttpRequest, queryset: QuerySet[Host]
    ) -> HttpResponse | None:
        from provisioning.services import pin_presented_host_key

        checked, page = ask_reason(
            self,
            request,
            queryset,
            action="pin_presented_key",
            title="Pin the presented host key",
            explanation="On the host itself, run "
            "`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` (or the key of the pinned "
            "type) and paste the SHA256 fingerprint it prints. The presented key is pinned "
            "only if it has that fingerprint.",
            form_class=FingerprintForm,
        )
        if checked is None:
            return page
        for host in queryset:
            if pin_presented_host_key(host, checked):
                self.log_change(request, host, "pinned the host key it presented")
                self.message_user(request, f"{host}: key pinned.", messages.SUCCESS)
            else:
                self.message_user(
                    request,
                    f"{host}: not pinned: the presented key does not have that fingerprint.",
                    messages.ERROR,
                )
        return None

    def save_model(self, request: HttpRequest, obj: Host, form: Any, change: bool) -> None:
        if "ssh_host_key" in form.changed_data:  # pinned by hand: the refusal is settled
            obj.ssh_host_key_presented, obj.ssh_host_key_refused_at = "", None
        super().save_model(request, obj, form, change)


class LotRowForm(forms.ModelForm):
    """A row of the Lots list: its status dropdown says whose status it is (no visible label)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "status" in self.fields and self.instance.pk:
            self.fields["status"].widget.attrs["aria-label"] = gettext("Status of %(lot)s") % {
                "lot": self.instance
            }


class MoveForm(forms.Form):
    hold = forms.IntegerField()
    to_lot = forms.IntegerField()


def window(order: Order) -> str:
    return f"{order.starts_at:%Y-%m-%d %H:%M} → {order.ends_at:%Y-%m-%d %H:%M} UTC"


def window_html(order: Order) -> SafeString:
    """An order's window for a list: start → end in the desk's time zone, each unbroken."""
    return format_html(
        '<span class="nowrap">{}</span> → <span class="nowrap">{}</span>',
        date_format(localtime(order.starts_at), "SHORT_DATETIME_FORMAT"),
        date_format(localtime(order.ends_at), "SHORT_DATETIME_FORMAT"),
    )


def bookings_left(lot: Lot, holds: list[Hold]) -> SafeString:
    """The warning for a lot taken out of service that still carries bookings."""
    orders = format_html_join(
        "; ",
        '<a href="{}">{}</a> · {} · {}',
        (
            (
                reverse("admin:reservations_order_change", args=[hold.order.pk]),
                hold.order.reference,
                window(hold.order),
                hold.order.get_status_display(),
            )
            for hold in holds
        ),
    )
    link = format_html(
        '<a href="{}">{}</a>',
        reverse("admin:reservations_lot_bookings", args=[lot.pk]),
        gettext("Bookings on %(lot)s") % {"lot": lot},
    )
    return format_html(
        gettext(
            "Lot {lot} is out of service ({status}) but still carries these bookings: {orders}. "
            "Move each to a free lot of the same kind, or settle it with the researcher: {link}"
        ),
        lot=lot,
        status=lot.get_status_display(),
        orders=orders,
        link=link,
    )


class DriftFilter(admin.SimpleListFilter):
    """The lots whose latest acceptance figures drift below their kind (the desk links here)."""

    title = gettext_lazy("acceptance")
    parameter_name = "drift"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", gettext_lazy("drifting below the kind"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Lot]) -> QuerySet[Lot]:
        if self.value() == "yes":
            return queryset.filter(pk__in=list(fleet.health().flagged()))
        return queryset


@admin.register(Lot)
class LotAdmin(RefusalsAsMessages):
    list_display = ("__str__", "host", "gpu_a", "gpu_b", "status", "acceptance_drift")
    list_filter = ("status", "host__kind", DriftFilter)
    list_editable = ("status",)
    list_select_related = ("host",)
    actions = ("take_out_of_service",)
    change_form_template = "admin/reservations/lot/change_form.html"

    _fleet = threading.local()

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The list, each lot flagged when its latest acceptance figures drift below the
        kind's median (provisioning.fleet; computed once for the page)."""
        self._fleet.health = fleet.health()
        try:
            return super().changelist_view(request, extra_context)
        finally:
            self._fleet.health = None

    @admin.display(description=gettext_lazy("acceptance"))
    def acceptance_drift(self, lot: Lot) -> str:
        health = getattr(self._fleet, "health", None) or fleet.health()
        found = health.latest.get(lot.pk)
        if found is None:
            return "—"
        below = health.flags(lot.pk)
        if below:
            return format_html(
                '<strong class="errornote" data-testid="drift">{}</strong>', health.describe(below)
            )
        if found.failed:
            return format_html(
                '<strong class="errornote">{}</strong>',
                gettext("%(count)s failed checks") % {"count": len(found.failed)},
            )
        return gettext("in line with the kind")

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The lot's page: its bookings now and ahead, and its acceptance figures per rental
        against the kind's median (flagged at the top when its latest ones drift)."""
        context = dict(extra_context or {})
        lot = Lot.objects.filter(pk=object_id).first() if object_id.isdigit() else None
        if lot is not None:
            history, medians = fleet.lot_history(lot.pk)
            context["acceptance_history"] = history
            context["acceptance_medians"] = medians
            context["acceptance_share"] = f"{settings.ACCEPTANCE_DRIFT_SHARE:.0%}"
            below = history[0]["below"] if history else []
            context["acceptance_drift"] = fleet.describe(below) if below else ""
            context["lot_bookings"] = list(inventory.bookings_on(lot))
        return super().change_view(request, object_id, form_url, context)

    def get_changelist_form(self, request: HttpRequest, **kwargs: Any) -> type[forms.ModelForm]:
        kwargs.setdefault("form", LotRowForm)
        return super().get_changelist_form(request, **kwargs)

    def save_model(self, request: HttpRequest, obj: Lot, form: Any, change: bool) -> None:
        """A changed status goes through the service (from the list or the lot's page); the
        other fields are saved as usual."""
        if not change or "status" not in form.changed_data:
            super().save_model(request, obj, form, change)
            return
        others = [name for name in form.changed_data if name != "status"]
        if others:
            obj.save(update_fields=others)
        self._set_status(request, obj, obj.status)

    def _set_status(self, request: HttpRequest, lot: Lot, status: str) -> list[Hold]:
        actor = services.Actor.of(request.user)  # type: ignore[arg-type]
        affected = inventory.set_lot_status(lot, status, actor=actor)
        if affected:
            self.message_user(request, bookings_left(lot, affected), messages.WARNING)
        return affected

    @admin.action(
        description=gettext_lazy("Take out of service (maintenance)"), permissions=["change"]
    )
    def take_out_of_service(self, request: HttpRequest, queryset: QuerySet[Lot]) -> None:
        for lot in queryset.select_related("host"):
            was = lot.status
            if not self._set_status(request, lot, Lot.Status.MAINTENANCE):
                self.message_user(
                    request,
                    gettext("Lot %(lot)s is in maintenance; no current or future booking is on it.")
                    % {"lot": lot},
                    messages.SUCCESS,
                )
            if was != lot.status:
                self.log_change(request, lot, [{"changed": {"fields": ["status"]}}])

    def get_urls(self) -> list[URLPattern]:
        bookings = path(
            "<int:lot_id>/bookings/",
            self.admin_site.admin_view(self.bookings_view),
            name="reservations_lot_bookings",
        )
        return [bookings, *super().get_urls()]

    def bookings_view(self, request: HttpRequest, lot_id: int) -> HttpResponse:
        """The lot's current and future bookings, each with a form moving it to a free lot of
        the same kind (or the sentence that there is none)."""
        lot = get_object_or_404(Lot.objects.select_related("host__kind"), pk=lot_id)
        if not self.has_change_permission(request, lot):
            raise PermissionDenied
        if request.method == "POST":
            self._move(request, lot)
            return redirect("admin:reservations_lot_bookings", lot.pk)
        rows = [(hold, inventory.free_lots_for(hold)) for hold in inventory.bookings_on(lot)]
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Bookings on %(lot)s") % {"lot": lot},
            "lot": lot,
            "rows": rows,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/reservations/lot/bookings.html", context)

    def _move(self, request: HttpRequest, lot: Lot) -> None:
        form = MoveForm(request.POST)
        hold = to_lot = None
        if form.is_valid():
            hold = (
                Hold.objects.filter(pk=form.cleaned_data["hold"], lot=lot)
                .select_related("order", "lot__host")
                .first()
            )
            to_lot = Lot.objects.filter(pk=form.cleaned_data["to_lot"]).first()
        if hold is None or to_lot is None:
            self.message_user(
                request,
                gettext("Nothing moved: choose a booking on %(lot)s and a free lot.")
                % {"lot": lot},
                messages.ERROR,
            )
            return
        reason = (
            f"lot taken out of service ({lot.status})"
            if lot.status != Lot.Status.ACTIVE
            else "moved by the operator"
        )
        actor = services.Actor.of(request.user)  # type: ignore[arg-type]
        try:
            new = inventory.move_booking(hold, to_lot, actor=actor, reason=reason)
        except MoveRefused as refused:
            self.message_user(
                request,
                gettext("%(order)s not moved. %(why)s")
                % {"order": hold.order.reference, "why": refused.message},
                messages.ERROR,
            )
            return
        self.message_user(
            request,
            gettext("%(order)s moved from %(old)s to %(new)s; the researcher is mailed.")
            % {"order": hold.order.reference, "old": lot, "new": new.lot},
            messages.SUCCESS,
        )


class ProvisioningInline(ReadOnlyInline):
    """Each lot's provisioning job: where it is, why it failed, what its benchmark found."""

    model = ProvisioningJob
    fields = ("lot", "status", "access_held", "steps_done", "error", "validation_report")
    readonly_fields = fields

    @admin.display(description="validation report")
    def validation_report(self, job: ProvisioningJob) -> str:
        return report_summary(job)


class HoldInline(ReadOnlyInline):
    model = Hold
    fields = ("lot", "period", "status", "created_at", "released_at")
    readonly_fields = fields


class SshKeyInline(ReadOnlyInline):
    model = OrderSshKey
    fields = ("algorithm", "fingerprint", "public_key")
    readonly_fields = fields


class EventInline(ReadOnlyInline):
    model = OrderEvent
    fields = ("created_at", "actor_label", "from_status", "to_status", "reason")
    readonly_fields = fields


class ReasonForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=2000)


class FingerprintForm(forms.Form):
    fingerprint = forms.CharField(
        max_length=120, help_text="SHA256:… as ssh-keygen -lf prints it on the host"
    )


def ask_reason(
    admin_view: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[Any],
    *,
    action: str,
    title: str,
    explanation: str,
    form_class: type[forms.Form] = ReasonForm,
) -> tuple[str | None, HttpResponse | None]:
    """An admin action's one answer (a reason, by default): (answer, None) once given, else
    (None, the page asking for it)."""
    (field,) = form_class.base_fields
    form = form_class(request.POST if field in request.POST else None)
    if form.is_valid():
        return form.cleaned_data[field], None
    page = TemplateResponse(
        request,
        "admin/reason_action.html",
        {
            **admin_view.admin_site.each_context(request),
            "title": title,
            "explanation": explanation,
            "items": queryset,
            "form": form,
            "action": action,
            "opts": admin_view.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        },
    )
    return None, page


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
        return f"{order.lot_count} × {order.kind.name} · {order.window_days} d"

    @admin.display(description=gettext_lazy("window"), ordering="starts_at")
    def window_column(self, order: Order) -> str:
        return window_html(order)

    @admin.display(description=gettext_lazy("payment"))
    def payment(self, order: Order) -> str:
        from payments.models import Invoice

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
        from provisioning.services import approve_order

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


@admin.register(OrderEvent)
class OrderEventAdmin(RecordAdmin):
    list_display = ("created_at", "order", "actor_label", "from_status", "to_status", "reason")
    list_filter = ("to_status",)
    search_fields = ("order__reference", "actor_label", "reason")
    list_select_related = ("order",)


class HoldPeriodFilter(admin.SimpleListFilter):
    title = gettext_lazy("when")
    parameter_name = "when"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("ahead", gettext_lazy("now and ahead")), ("past", gettext_lazy("ended"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Hold]) -> QuerySet[Hold]:
        now = timezone.now()
        if self.value() == "ahead":
            return queryset.filter(period__endswith__gt=now)
        if self.value() == "past":
            return queryset.filter(period__endswith__lte=now)
        return queryset


@admin.register(Hold)
class HoldAdmin(RecordAdmin):
    """Which lot each order holds, for which period (window + turnaround): kept by the
    services (booking, payment, moves, expiry), read here."""

    list_display = ("lot", "order", "order_window", "period_ends", "status", "released_at")
    list_filter = ("status", HoldPeriodFilter, "lot__host__kind", "lot__host")
    search_fields = ("order__reference", "order__contact_email", "lot__host__name")
    list_select_related = ("lot__host", "order")
    ordering = ("-period",)

    @admin.display(description=gettext_lazy("window"), ordering="order__starts_at")
    def order_window(self, hold: Hold) -> str:
        return window_html(hold.order)

    @admin.display(description=gettext_lazy("lot free again"))
    def period_ends(self, hold: Hold) -> str:
        upper = hold.period.upper
        return date_format(localtime(upper), "SHORT_DATETIME_FORMAT") if upper else "—"
