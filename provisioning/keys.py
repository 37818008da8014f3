"""The researcher's SSH keys on the hosts, once access has opened.

Before access opens, a key change needs nothing here: the keys go in at the window's start,
read from the database then (services._open_access). After it opens, ``install_keys`` puts
the order's current keys on each of its lots' hosts, through the same backend and host
script as the opening (install_keys.sh replaces the whole set: the old keys are gone), and
only inside the window, under the lot's open grant, for a delivered lot.

It is started after the change commits (provisioning.receivers.install_changed_keys, a
receiver of ``reservations.events.ssh_keys_changed``) as a Celery task retried on a host
fault, and
by the opening itself when the keys changed while it ran. It reads the keys from the
database each time, so a retry, a duplicate message or a late one installs the current
keys, never an older set; the audit trail records each installation with its fingerprints,
and one that finds them already there does nothing.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.core.mail import mail_admins
from django.db import transaction
from django.utils import timezone

from provisioning.backends import Backend, StepFailed
from provisioning.hosts import backend_for
from provisioning.models import AccessGrant, ProvisioningJob
from reservations.models import Order, OrderEvent
from reservations.services import record_note, system
from reservations.ssh_keys import SshKeyError, parse_public_keys

log = logging.getLogger(__name__)

ACTOR = system("ssh keys")
INSTALLED = "SSH keys installed on the host"


def install_keys(
    job_id: int, *, backend: Backend | None = None, now: datetime | None = None
) -> bool:
    """The job's accounts get the order's current keys on the host; True if this call put
    them there.

    False, touching nothing, when the lot has no access open now (not yet delivered, held,
    revoked, or outside the window: the opening installs the keys then, from the database)
    or when the last installation recorded these very keys. A host fault (StepFailed,
    OSError) propagates with nothing recorded, for the task to retry.
    """
    now = now or timezone.now()
    with transaction.atomic():
        # Locks: the job's row, for the host call: two installations of one lot's keys never
        # interleave (the later reads the later keys), and nothing else changes the job
        # (its revocation's record, a run of its steps) meanwhile.
        job = (
            ProvisioningJob.objects.select_for_update(of=("self",))
            .select_related("order", "lot__host")
            .filter(pk=job_id)
            .first()
        )
        if job is None or not _access_open(job, now):
            return False
        keys = "\n".join(job.order.ssh_keys.values_list("public_key", flat=True)) + "\n"
        try:  # validated again before they go onto a host
            parsed = parse_public_keys(keys)
        except SshKeyError as exc:
            raise StepFailed(
                f"install_keys: the order's SSH keys are unusable ({exc.code})"
            ) from None
        fingerprints = ", ".join(key.fingerprint for key in parsed)
        if last_installed(job) == fingerprints:
            return False
        host = job.lot.host
        for account in job.accounts:
            (backend or backend_for(host)).install_keys(host, account, keys)
        record_note(job.order, actor=ACTOR, reason=f"{job.lot}: {INSTALLED}: {fingerprints}")
    log.info("ssh keys installed", extra={"order": job.order.reference, "lot": job.lot_id})
    return True


def _access_open(job: ProvisioningJob, now: datetime) -> bool:
    """Delivered, not held, its grant open with the keys in, and ``now`` inside the window."""
    return (
        job.status == ProvisioningJob.Status.READY
        and not job.access_held
        and bool(job.accounts)
        and job.order.status in (Order.STATUS_APPROVED, Order.STATUS_ACTIVE)
        and AccessGrant.objects.filter(
            job_id=job.pk,
            closed_at__isnull=True,
            keys_at__isnull=False,
            window_start__lte=now,
            window_end__gt=now,
        ).exists()
    )


def last_installed(job: ProvisioningJob) -> str | None:
    """The fingerprints the last installation after a change put on this lot (None: none
    since the opening, which installed the keys of its time)."""
    prefix = f"{job.lot}: {INSTALLED}: "
    reason = (
        OrderEvent.objects.filter(order_id=job.order_id, reason__startswith=prefix)
        .order_by("-id")
        .values_list("reason", flat=True)
        .first()
    )
    return reason.removeprefix(prefix) if reason is not None else None


def enqueue(job_id: int) -> None:
    """Start an installation on a worker; a broker away is logged (the keys stay in the
    database, and the next change or the operator's retry installs them)."""
    # The tasks' module imports this one: its task is looked up when first queued.
    from provisioning.tasks import install_ssh_keys

    try:
        install_ssh_keys.delay(job_id)
    except Exception:
        log.warning("ssh key installation not queued", exc_info=True, extra={"job": job_id})


def installation_failed(job_id: int, error: str) -> None:
    """The retries are spent: the operator is told, and the order's history says so (the
    researcher's keys stay as changed in the database; the old ones are still on the host)."""
    job = ProvisioningJob.objects.select_related("order", "lot").get(pk=job_id)
    reason = f"{job.lot}: the changed SSH keys could not be installed on the host ({error[-300:]})"
    record_note(job.order, actor=ACTOR, reason=reason)
    log.error("ssh key installation failed", extra={"order": job.order.reference})
    mail_admins(
        f"SSH keys not installed: {job.order.reference} on {job.lot}",
        f"{reason}\n\nCheck the host. Nothing retries it by itself any more: the next change "
        "of the order's keys installs the current set.",
        fail_silently=True,
    )
