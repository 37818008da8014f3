"""Hosts and lots in the desk: the inventory, with their host keys and acceptance figures."""

from __future__ import annotations

import threading
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext, gettext_lazy

from infra.records import ask_reason
from provisioning import fleet, health
from provisioning.services import pin_presented_host_key
from provisioning.ssh import fingerprint
from reservations import inventory, services
from reservations.admin import (
    LotInline,
    RefusalsAsMessages,
    window,
)
from reservations.errors import MoveRefused
from reservations.models import (
    Hold,
    Host,
    Lot,
)


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
        if host.ssh_host_key_refused_at:
            presented = host.ssh_host_key_presented
            return (
                f"REFUSED {host.ssh_host_key_refused_at:%Y-%m-%d %H:%M} UTC: presented "
                f"{fingerprint(presented) if presented else 'nothing readable'}"
            )
        return self.pinned_fingerprint(host)

    @admin.display(description="pinned key's fingerprint")
    def pinned_fingerprint(self, host: Host) -> str:
        return fingerprint(host.ssh_host_key) if host.ssh_host_key.strip() else "not pinned"

    @admin.display(description="presented key's fingerprint")
    def presented_fingerprint(self, host: Host) -> str:
        presented = host.ssh_host_key_presented
        return fingerprint(presented) if presented else "-"

    @admin.action(description="Pin the key the host presented (asks for its checked fingerprint)")
    def pin_presented_key(
        self, request: HttpRequest, queryset: QuerySet[Host]
    ) -> HttpResponse | None:
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
            context["lot_incidents"] = list(
                lot.incidents.select_related("order", "replacement__host").order_by("-started_at")
            )
            context["lot_readings"] = health.recent(lot)
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


class FingerprintForm(forms.Form):
    fingerprint = forms.CharField(
        max_length=120, help_text="SHA256:… as ssh-keygen -lf prints it on the host"
    )
