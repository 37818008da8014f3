"""Provisioning in the operator's desk: jobs with their step, error and report."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from provisioning import services
from provisioning.models import ProvisioningJob
from reservations.services import Actor


@admin.register(ProvisioningJob)
class ProvisioningJobAdmin(admin.ModelAdmin):
    list_display = ("order", "lot", "status", "steps_done", "attempts", "heartbeat_at", "error")
    list_filter = ("status",)
    search_fields = ("order__reference",)
    list_select_related = ("order", "lot__host")
    actions = ("retry",)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [field.name for field in ProvisioningJob._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Retry (continues from the last step done)")
    def retry(self, request: HttpRequest, queryset: QuerySet[ProvisioningJob]) -> None:
        actor = Actor.of(request.user)  # type: ignore[arg-type]
        for job in queryset.select_related("order", "lot__host"):
            if services.retry_job(job, actor=actor):
                self.message_user(request, f"{job}: queued again.", messages.SUCCESS)
            else:
                self.message_user(request, f"{job}: already done.", messages.WARNING)
