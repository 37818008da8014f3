"""The operator's desk. Actions are one-liners that call the same services as everything else."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import IntegrityError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timezone import localtime
from django.utils.translation import gettext, gettext_lazy

from infra.records import ReadOnlyInline, RecordAdmin
from reservations.models import (
    CARDS_CONSTRAINT,
    Environment,
    HardwareKind,
    Hold,
    Lot,
    Order,
    OrderEvent,
    OrderSshKey,
    Price,
)


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
        (
            gettext_lazy("Health during the window (a reading outside opens an incident)"),
            {"fields": ("health_max_temperature_c",)},
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


def window(order: Order) -> str:
    return f"{order.starts_at:%Y-%m-%d %H:%M} → {order.ends_at:%Y-%m-%d %H:%M} UTC"


def window_html(order: Order) -> SafeString:
    """An order's window for a list: start → end in the desk's time zone, each unbroken."""
    return format_html(
        '<span class="nowrap">{}</span> → <span class="nowrap">{}</span>',
        date_format(localtime(order.starts_at), "SHORT_DATETIME_FORMAT"),
        date_format(localtime(order.ends_at), "SHORT_DATETIME_FORMAT"),
    )


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
