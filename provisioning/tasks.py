"""Celery entry points for provisioning: retried with backoff, resumable, catching up."""

from __future__ import annotations

from celery import shared_task
from celery.app.task import Task
from django.utils import timezone

from provisioning import services
from provisioning.backends import HostKeyRefused, StepFailed
from provisioning.models import ProvisioningJob

MAX_ATTEMPTS = 5


@shared_task(
    bind=True, name="provisioning.tasks.provision_lot", acks_late=True, max_retries=MAX_ATTEMPTS
)
def provision_lot(self: Task, job_id: int) -> str:
    try:
        return str(services.run_job(job_id).status)
    except HostKeyRefused as exc:  # retrying cannot help: the operator checks the host
        services.fail_job(job_id, str(exc))
        return ProvisioningJob.Status.FAILED
    except (StepFailed, OSError) as exc:
        if self.request.retries >= MAX_ATTEMPTS:
            services.fail_job(job_id, str(exc))
            return ProvisioningJob.Status.FAILED
        raise self.retry(exc=exc, countdown=min(300, 5 * 2**self.request.retries)) from exc


@shared_task(name="provisioning.tasks.revoke_due_access", acks_late=True)
def revoke_due_access() -> int:
    return services.revoke_due()


@shared_task(name="provisioning.tasks.remind_before_end", acks_late=True)
def remind_before_end() -> int:
    return services.remind_before_end()


@shared_task(name="provisioning.tasks.resume_pending_jobs", acks_late=True)
def resume_pending_jobs() -> int:
    """Beat: jobs of approved orders that no worker is running (a lost message, a killed
    worker) are started again; they continue where they stopped."""
    pending = ProvisioningJob.objects.filter(
        services.stalled(timezone.now()), order__status="approved"
    ).values_list("pk", flat=True)
    for job_id in pending:
        provision_lot.delay(job_id)
    return len(pending)
