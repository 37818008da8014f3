"""Celery entry points for provisioning: retried with backoff, resumable, catching up."""

from __future__ import annotations

import uuid

from celery import shared_task
from celery.app.task import Task
from django.core.cache import cache

from infra.beat import once_per_slot
from provisioning import health, keys, schedule, services
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


@shared_task(
    bind=True, name="provisioning.tasks.install_ssh_keys", acks_late=True, max_retries=MAX_ATTEMPTS
)
def install_ssh_keys(self: Task, job_id: int) -> bool:
    """The order's changed keys onto one lot's host (provisioning.keys), retried with backoff
    while the host is away; a refused host key is the operator's to check, not retried."""
    try:
        return keys.install_keys(job_id)
    except HostKeyRefused as exc:
        services.flag_host_key(
            ProvisioningJob.objects.select_related("lot__host").get(pk=job_id).lot.host, exc
        )
        keys.installation_failed(job_id, str(exc))
        return False
    except (StepFailed, OSError) as exc:
        if self.request.retries >= MAX_ATTEMPTS:
            keys.installation_failed(job_id, str(exc))
            return False
        raise self.retry(exc=exc, countdown=min(300, 5 * 2**self.request.retries)) from exc


TICK_LOCK = "provisioning:tick"
TICK_LOCK_SECONDS = 300
"""A tick still running this long has lost its worker; the next one may start."""


@shared_task(name="provisioning.tasks.access_tick", acks_late=True)
@once_per_slot  # one run a period, however many beats send it
def access_tick() -> dict[str, int]:
    """Beat: open, close, resume and remind whatever is due (provisioning.schedule). A tick
    still running elsewhere is not doubled (its lock expires if that worker died)."""
    token = uuid.uuid4().hex
    if not cache.add(TICK_LOCK, token, timeout=TICK_LOCK_SECONDS):
        return {}
    try:
        return schedule.tick().as_dict()
    finally:
        if cache.get(TICK_LOCK) == token:  # not a later tick's, once this one's expired
            cache.delete(TICK_LOCK)


HEALTH_LOCK = "provisioning:health"


@shared_task(name="provisioning.tasks.health_tick", acks_late=True)
@once_per_slot  # one run a period, however many beats send it
def health_tick() -> dict[str, int]:
    """Beat: read the cards of every lot whose access is open and whose reading is due
    (provisioning.health). A tick still running elsewhere is not doubled."""
    token = uuid.uuid4().hex
    if not cache.add(HEALTH_LOCK, token, timeout=TICK_LOCK_SECONDS):
        return {}
    try:
        return health.tick().as_dict()
    finally:
        if cache.get(HEALTH_LOCK) == token:
            cache.delete(HEALTH_LOCK)
