"""Provisioning in the operator's desk: jobs with their step, error and report."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from provisioning.models import ProvisioningJob


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
        from provisioning.tasks import provision_lot

        for job in queryset.exclude(
            status__in=(ProvisioningJob.Status.READY, ProvisioningJob.Status.REVOKED)
        ):
            ProvisioningJob.objects.filter(pk=job.pk).update(
                status=ProvisioningJob.Status.PENDING, error=""
            )
            provision_lot.delay(job.pk)
            self.message_user(request, f"{job}: queued again.", messages.SUCCESS)
