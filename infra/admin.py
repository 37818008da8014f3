"""The desk's list of reactions to domain events that failed (infra.events)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from infra import events
from infra.models import FailedReaction


@admin.register(FailedReaction)
class FailedReactionAdmin(admin.ModelAdmin):
    list_display = ("created_at", "event", "receiver", "payload", "attempts", "state", "error")
    list_filter = ("event", ("resolved_at", admin.EmptyFieldListFilter))
    readonly_fields = [field.name for field in FailedReaction._meta.fields]
    actions = ["retry_now", "mark_resolved"]

    @admin.display(description="state")
    def state(self, reaction: FailedReaction) -> str:
        if reaction.resolved_at is not None:
            return reaction.resolution or "resolved"
        if reaction.next_attempt_at is None:
            return "waits for the operator"
        return f"retried at {reaction.next_attempt_at:%Y-%m-%d %H:%M} UTC"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    @admin.action(description="Retry now")
    def retry_now(self, request: HttpRequest, queryset: QuerySet[FailedReaction]) -> None:
        count = events.retry_now(list(queryset.values_list("pk", flat=True)))
        messages.success(request, f"{count} reaction(s) will be retried within a minute.")

    @admin.action(description="Mark resolved (dealt with by hand)")
    def mark_resolved(self, request: HttpRequest, queryset: QuerySet[FailedReaction]) -> None:
        count = events.resolve(list(queryset.values_list("pk", flat=True)), by=str(request.user))
        messages.success(request, f"{count} reaction(s) marked resolved.")
