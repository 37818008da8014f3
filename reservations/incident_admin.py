"""The desk's view of incidents and credits: on an order's page its incidents and credits
(the lot's page lists the lot's incident history: desk.admin.fleet), lists of both, and the
refusal of a credit, with a reason that is mailed."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext_lazy

from infra.records import ReadOnlyInline, RecordAdmin, ask_reason
from reservations import incidents
from reservations.models import Credit, Incident
from reservations.services import Actor

INCIDENT_FIELDS = ("kind", "summary", "started_at", "ended_at", "replacement")


class OrderIncidentInline(ReadOnlyInline):
    model = Incident
    fk_name = "order"
    fields = ("lot", *INCIDENT_FIELDS)
    readonly_fields = fields


class CreditInline(ReadOnlyInline):
    model = Credit
    fields = ("incident", "seconds", "value_usd", "status", "amount_units", "reason", "decided_at")
    readonly_fields = fields


class OpenFilter(admin.SimpleListFilter):
    title = gettext_lazy("open")
    parameter_name = "open"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("yes", str(gettext_lazy("open now")))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Incident]) -> QuerySet[Incident]:
        return queryset.filter(ended_at__isnull=True) if self.value() == "yes" else queryset


@admin.register(Incident)
class IncidentAdmin(RecordAdmin):
    list_display = ("order", "lot", "kind", "started_at", "ended_at", "replacement")
    list_filter = (OpenFilter, "kind", "lot__host__kind", "lot")
    search_fields = ("order__reference", "lot__host__name")
    list_select_related = ("order", "lot__host", "replacement__host")
    date_hierarchy = "started_at"


@admin.register(Credit)
class CreditAdmin(RecordAdmin):
    list_display = ("order", "hours", "value_usd", "status", "amount_units", "created_at")
    list_filter = ("status",)
    search_fields = ("order__reference",)
    list_select_related = ("order",)
    actions = ("refuse_credits",)

    @admin.action(description=gettext_lazy("Refuse the credits (with a reason, mailed)"))
    def refuse_credits(
        self, request: HttpRequest, queryset: QuerySet[Credit]
    ) -> HttpResponse | None:
        reason, page = ask_reason(
            self,
            request,
            queryset,
            action="refuse_credits",
            title="Refuse credits",
            explanation="Why is the time not credited (the researcher is mailed this, in "
            "their language's mail)? Only credits not yet taken as time or money can be refused.",
        )
        if reason is None:
            return page
        actor = Actor.of(request.user)  # type: ignore[arg-type]
        for credit in queryset.select_related("order"):
            try:
                incidents.refuse(credit, actor=actor, reason=reason)
            except incidents.CreditRefused as refused:
                self.message_user(
                    request, f"{credit.order.reference}: {refused.message}", messages.WARNING
                )
            else:
                self.message_user(request, f"{credit.order.reference}: credit refused, mailed.")
        return None
