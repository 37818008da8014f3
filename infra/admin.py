"""The desk's list of reactions to domain events that failed (infra.events)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from infra import events
from infra.models import FailedReaction
from infra.records import RecordAdmin


@admin.register(FailedReaction)
class FailedReactionAdmin(RecordAdmin):
    """Read-only: what failed and why; the operator's two acts are the actions."""

    list_display = ("created_at", "event", "receiver", "payload", "attempts", "state", "error")
    list_filter = ("event", ("resolved_at", admin.EmptyFieldListFilter))
    readonly_fields = [field.name for field in FailedReaction._meta.fields]
    actions = ["retry_now", "mark_resolved"]

    @admin.display(description=_("state"))
    def state(self, reaction: FailedReaction) -> str:
        return str(reaction.state)

    @admin.action(description=_("Retry now"))
    def retry_now(self, request: HttpRequest, queryset: QuerySet[FailedReaction]) -> None:
        count = events.retry_now(list(queryset.values_list("pk", flat=True)))
        messages.success(
            request,
            ngettext(
                "%(count)d reaction will be retried within a minute.",
                "%(count)d reactions will be retried within a minute.",
                count,
            )
            % {"count": count},
        )

    @admin.action(description=_("Mark resolved (dealt with by hand)"))
    def mark_resolved(self, request: HttpRequest, queryset: QuerySet[FailedReaction]) -> None:
        count = events.resolve(list(queryset.values_list("pk", flat=True)), by=str(request.user))
        messages.success(
            request,
            ngettext(
                "%(count)d reaction marked resolved.",
                "%(count)d reactions marked resolved.",
                count,
            )
            % {"count": count},
        )
