"""Driving provisioning on a simulated clock, as the schedule (provisioning.schedule) would."""

from __future__ import annotations

from datetime import datetime

from provisioning import access, services
from provisioning.backends import Backend
from provisioning.models import ProvisioningJob


def run_at_start(
    job_id: int, backend: Backend | None = None, *, at: datetime | None = None
) -> ProvisioningJob:
    """The job's turn at its window's start (or ``at``): its grant opens if the lot is
    free, and its steps run on that clock."""
    job = ProvisioningJob.objects.select_related("order").get(pk=job_id)
    now = at or job.order.starts_at
    access.open_grant(job, now=now)
    return services.run_job(job_id, backend, now=now)
