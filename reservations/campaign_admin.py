"""The desk's view of 30-day campaigns: on an order's page its checkpoints (reminder,
outcome) and early-end requests; lists of both; the answer to an early-end request."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext_lazy

from infra.records import ReadOnlyInline, RecordAdmin, ask_reason
from reservations import campaign
from reservations.models import Checkpoint, EarlyEndRequest
from reservations.services import Actor


class CheckpointInline(ReadOnlyInline):
    model = Checkpoint
    fields = (
        "position",
        "due_on",
        "what",
        "reminder_sent_at",
        "outcome",
        "outcome_note",
        "outcome_recorded_at",
    )
    readonly_fields = fields
    verbose_name_plural = gettext_lazy("campaign checkpoints")


class EarlyEndRequestInline(ReadOnlyInline):
    model = EarlyEndRequest
    fields = ("requested_at", "reason", "handled_at", "handled_by", "handling_note")
    readonly_fields = fields


@admin.register(Checkpoint)
class CheckpointAdmin(RecordAdmin):
    list_display = ("order", "due_on", "what", "reminder_sent_at", "outcome", "outcome_recorded_at")
    list_filter = ("outcome", "due_on")
    search_fields = ("order__reference",)
    list_select_related = ("order",)


@admin.register(EarlyEndRequest)
class EarlyEndRequestAdmin(RecordAdmin):
    list_display = ("order", "requested_at", "reason", "handled_at", "handled_by")
    list_filter = (("handled_at", admin.EmptyFieldListFilter),)
    search_fields = ("order__reference",)
    list_select_related = ("order",)
    actions = ("answer_requests",)

    @admin.action(description=gettext_lazy("Answer the early-end requests"))
    def answer_requests(
        self, request: HttpRequest, queryset: QuerySet[EarlyEndRequest]
    ) -> HttpResponse | None:
        answer, page = ask_reason(
            self,
            request,
            queryset,
            action="answer_requests",
            title="Answer early-end requests",
            explanation="What did you decide (ended on a date, partly refunded, or kept "
            "running)? End or refund the order itself as usual; this records the answer and "
            "shows it on the order page.",
        )
        if answer is None:
            return page
        actor = Actor.of(request.user)  # type: ignore[arg-type]
        for early_end in queryset.select_related("order"):
            if campaign.answer_early_end(early_end, actor=actor, note=answer):
                self.message_user(request, f"{early_end.order.reference}: answered.")
            else:
                self.message_user(
                    request, f"{early_end.order.reference}: already answered.", messages.WARNING
                )
        return None
