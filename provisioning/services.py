"""Approval, provisioning and revocation: every state change here, each with its audit event.

A job's steps run in order; after each one the job records it (a conditional update), so a
retry after a crash continues with the next step. The host-side steps are idempotent too.

One module over 600 lines, on purpose: approval, the job's steps and revocation change the
same rows under the same conditional updates; what is due when is provisioning.schedule's,
access grants provisioning.access's, key installs provisioning.keys'.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from provisioning import access
from provisioning import keys as key_change
from provisioning.backends import Backend, HostKeyRefused, StepFailed
from provisioning.events import (
    access_closed,
    access_closing_soon,
    access_opened,
    lot_held,
    order_approved,
    report_ready,
)
from provisioning.hosts import backend_for
from provisioning.models import AccessGrant, ProvisioningJob
from provisioning.ssh import fingerprint
from reservations import extensions, incidents, notifications
from reservations.errors import InvalidTransition
from reservations.models import Hold, Host, Order
from reservations.services import Actor, record_note, system, transition
from reservations.ssh_keys import SshKeyError, parse_public_keys

log = logging.getLogger(__name__)


def approve_order(order: Order, *, actor: Actor) -> None:
    """paid → approved: one provisioning job per booked lot; ``order_approved`` announced
    (its receiver starts what is due after commit). An extension is joined to the order it
    extends instead (reservations.extensions.join): no job, the open grants end later."""
    with transaction.atomic():
        if not transition(
            order,
            Order.STATUS_APPROVED,
            allowed_from=[Order.STATUS_PAID],
            actor=actor,
            reason="approved",
        ):
            current = Order.objects.values_list("status", flat=True).get(pk=order.pk)
            raise InvalidTransition(current, Order.STATUS_APPROVED)
        if order.extends_id is not None:
            extended = extensions.join(order, actor=actor)
            if extended is not None:
                # Its days are the order's now: the access granted continues to the new end.
                access.follow_extension(extended)
                order_approved.announce(order_id=order.pk)
                return
            # Not joinable any more (its order ended first, and a late payment was accepted):
            # prepared as an order of its own, on the lots it holds.
        lots = Hold.objects.filter(order=order, status=Hold.Status.BOOKED).values_list(
            "lot_id", flat=True
        )
        for lot in lots:
            ProvisioningJob.objects.get_or_create(order=order, lot_id=lot)
        # What is due now (a window that starts within the preparation lead, or has started)
        # is started by the receiver after commit; the rest by the periodic tick.
        order_approved.announce(order_id=order.pk)


def enqueue_job(job_id: int) -> None:
    """Start a job's remaining steps on a worker. If the broker is away, the tick starts it
    again (schedule.resume_stalled)."""
    # The tasks' module imports this one: its task is looked up when first queued.
    from provisioning.tasks import provision_lot

    try:
        provision_lot.delay(job_id)
    except Exception:
        log.warning("provisioning not queued", exc_info=True, extra={"job": job_id})


def _enqueue(jobs: list[ProvisioningJob]) -> None:
    for job in jobs:
        enqueue_job(job.pk)


def accounts_for(job: ProvisioningJob) -> list[tuple[str, str]]:
    """(account, visible cards): one account on both cards, or one per card for two
    independent experiments."""
    base = f"gl-{job.order.reference.lower().removeprefix('gl-')}-{job.lot_id}"
    lot = job.lot
    if job.order.usage_mode == "independent":
        return [(f"{base}-a", str(lot.gpu_a)), (f"{base}-b", str(lot.gpu_b))]
    return [(base, f"{lot.gpu_a},{lot.gpu_b}")]


def run_job(
    job_id: int, backend: Backend | None = None, *, now: datetime | None = None
) -> ProvisioningJob:
    """Run the job's remaining steps; each recorded as done before the next starts.

    Only under the job's open access grant (provisioning.access): without one it is not
    this order's turn on the lot yet, and nothing runs. Only one run at a time: the run
    claims the job (pending → running, with a token of its own, a conditional update) and
    records each step only while it still holds that claim and the grant is still open, so a
    duplicate message, a second worker or a revocation meanwhile stops it. Prepared before
    the window's start, the job waits as PREPARED, with no keys on the host, until the tick
    opens it. ``now`` is the clock (the current time unless a test simulates one).

    A step that fails gives the claim back (pending again, for the task's retry or the
    tick); a host presenting a key other than the pinned one is flagged on the host (the key
    it presented, for the operator to check) and HostKeyRefused propagates.
    """
    clock: Callable[[], datetime] = lambda: now or timezone.now()  # noqa: E731
    job = ProvisioningJob.objects.select_related("order__environment", "lot__host").get(pk=job_id)
    if job.status in ProvisioningJob.DELIVERED or job.open_grant is None:
        return job
    token = uuid.uuid4().hex
    if (
        not _under_grant(job.pk)
        .filter(status=ProvisioningJob.Status.PENDING)
        .update(
            status=ProvisioningJob.Status.RUNNING,
            run_token=token,
            attempts=models.F("attempts") + 1,
            heartbeat_at=clock(),
        )
    ):
        job.refresh_from_db()
        return job  # another run has it, or there is nothing to run
    job.refresh_from_db()
    backend = backend or backend_for(job.lot.host)
    try:
        return _run_steps(job, backend, clock, token)
    except Exception as exc:
        ProvisioningJob.objects.filter(
            pk=job.pk, status=ProvisioningJob.Status.RUNNING, run_token=token
        ).update(status=ProvisioningJob.Status.PENDING)
        if isinstance(exc, HostKeyRefused):
            flag_host_key(job.lot.host, exc)
        raise


def _under_grant(job_id: int) -> models.QuerySet[ProvisioningJob]:
    """The job, if its access grant is open.

    An EXISTS on the grant, not a join: an UPDATE with a join becomes ``id IN (subquery)``,
    and PostgreSQL re-checks a row changed meanwhile against the outer conditions only, so
    the job's own conditions (status, claim) must stay on the job's table for two
    concurrent claims to see each other (only one wins)."""
    return ProvisioningJob.objects.filter(
        models.Exists(
            AccessGrant.objects.filter(job_id=models.OuterRef("pk"), closed_at__isnull=True)
        ),
        pk=job_id,
    )


def lot_cards(job: ProvisioningJob) -> str:
    """The lot's device indices on its host, as the visible-device variables take them."""
    return f"{job.lot.gpu_a},{job.lot.gpu_b}"


def _run_steps(
    job: ProvisioningJob, backend: Backend, clock: Callable[[], datetime], token: str
) -> ProvisioningJob:
    host = job.lot.host
    accounts = accounts_for(job)
    keys = keys_of(job)

    def authorize(text: str) -> None:
        """Each account's authorized keys become ``text`` (empty: nobody logs in)."""
        for account, _cards in accounts:
            backend.install_keys(host, account, text)

    report_path = None
    while (step := job.next_step) is not None:
        if step == "prepare_access":
            for account, _cards in accounts:
                backend.script(host, "prepare_access", account)
        elif step == "install_keys":
            try:  # validated again before they go onto a host
                parse_public_keys(keys)
            except SshKeyError as exc:
                raise StepFailed(
                    f"install_keys: the order's SSH keys are unusable ({exc.code})"
                ) from None
            # Checked here; they go in at the window's start. Until then the file is empty:
            # nobody logs in while the benchmark measures the cards, nor into a held lot.
            authorize("")
        elif step == "prepare_environment":
            for account, _cards in accounts:
                backend.script(host, "prepare_environment", account, job.order.environment.slug)
                backend.install_tool(host, account, tool_order(job))
        elif step == "assign_cards":
            for account, cards in accounts:
                backend.script(host, "assign_cards", account, cards)
        elif step in ("run_validation", "fetch_report"):
            # On the lot's cards only: the backend exports their indices to the benchmark,
            # which checks that it sees exactly those (a mismatch holds the lot).
            sandbox = is_sandbox(backend, host)
            report_path = report_path or backend.run_validation(
                host,
                f"job-{job.pk}",
                _benchmark_arguments(job, sandbox=sandbox),
                cards=lot_cards(job),
            )
            if step == "fetch_report":
                report = backend.fetch_report(host, report_path)
                ProvisioningJob.objects.filter(pk=job.pk).update(report=report)
                report_ready.announce(order_id=job.order_id, job_id=job.pk)
                if _holds(report, sandbox=sandbox):
                    ProvisioningJob.objects.filter(pk=job.pk).update(access_held=True)
        elif step == "mark_ready":
            return _open_access(
                job, clock(), authorize, token, accounts, keys, sandbox=is_sandbox(backend, host)
            )
        # Recorded only by the run that holds the job, under its open grant, and only once:
        # a run that lost either stops here.
        if (
            not _under_grant(job.pk)
            .filter(
                status=ProvisioningJob.Status.RUNNING, run_token=token, steps_done=job.steps_done
            )
            .update(steps_done=job.steps_done + 1, heartbeat_at=clock())
        ):
            job.refresh_from_db()
            return job
        job.refresh_from_db()
    return job


def _open_access(
    job: ProvisioningJob,
    now: datetime,
    authorize: Callable[[str], None],
    token: str,
    accounts: list[tuple[str, str]],
    keys: str,
    *,
    sandbox: bool,
) -> ProvisioningJob:
    """The last step: the keys go in at the window's start (not before, not after its end),
    unless the operator holds the lot."""
    mine = ProvisioningJob.objects.filter(
        pk=job.pk, status=ProvisioningJob.Status.RUNNING, run_token=token
    )
    job.refresh_from_db(fields=["access_held"])
    if not job.access_held and now < job.order.starts_at:
        # Prepared ahead of the window: the keys go in at its start (schedule.open_due).
        mine.update(status=ProvisioningJob.Status.PREPARED, heartbeat_at=now)
        job.refresh_from_db()
        return job
    if now >= job.order.ends_at:  # the window is over: nothing opens any more
        mine.update(status=ProvisioningJob.Status.PENDING)
        job.refresh_from_db()
        return job
    if not job.access_held:
        authorize(keys)
    # Delivered only by this run, under the open grant, if the operator did not hold it
    # meanwhile (a conditional update).
    with transaction.atomic():
        delivered = not job.access_held and bool(
            _under_grant(job.pk)
            .filter(status=ProvisioningJob.Status.RUNNING, run_token=token, access_held=False)
            .update(
                status=ProvisioningJob.Status.READY,
                steps_done=len(ProvisioningJob.STEPS),
                ready_at=now,
                error="",
                accounts=[a for a, _c in accounts],
            )
        )
        if delivered:
            access.record_keys(job, now=now)
            access_opened.announce(order_id=job.order_id, job_id=job.pk)
    if not delivered:
        if mine.exists():  # still this run's: held, so nobody may log in
            authorize("")
            _hold(job, mine, sandbox=sandbox)
        job.refresh_from_db()
        return job
    job.refresh_from_db()
    activate_if_ready(job.order_id)
    if keys_of(job) != keys:  # changed while this run opened it: the current ones go in too
        key_change.enqueue(job.pk)
    return job


def keys_of(job: ProvisioningJob) -> str:
    """The order's public keys, one OpenSSH line each, as an authorized_keys file."""
    return "\n".join(job.order.ssh_keys.values_list("public_key", flat=True)) + "\n"


def _devices_wrong(report: dict[str, Any]) -> bool:
    """The benchmark saw other devices than the lot's (or another number of them)."""
    devices = report.get("devices")
    return isinstance(devices, dict) and devices.get("ok") is False


EXIT_CODES = {
    1: "the benchmark crashed",
    2: "the benchmark refused its arguments",
    3: "the benchmark did not see the lot's cards",
    4: "the acceptance checks failed",
    5: "the benchmark timed out",
    6: "no GPU was visible",
}
"""What the acceptance benchmark's exit codes mean (REPORT_V2.md)."""


def acceptance_failures(report: dict[str, Any], *, sandbox: bool) -> list[str]:
    """Why a version-2 report does not accept the lot (empty: it does), in English for the
    operator's desk and the order's history. A version-1 report (or the backend's crash
    record) is judged as before: devices and PROVISIONING_HOLD_ON_CRASH only.

    Held: a non-zero exit code, acceptance not passed (false, or nothing checked — except
    the sandbox's CPU stand-in, which has no card to check: the program leaves ``passed``
    null there), a report that did not complete, an error, or a CPU stand-in on a host that
    is not the local sandbox (``sandbox``: the local backend, whose CPU stands in for the
    cards by design).
    """
    if not isinstance(report, dict) or report.get("version", 1) < 2:
        return []
    reasons: list[str] = []
    code = report.get("exit_code")
    if code != 0:
        meaning = EXIT_CODES.get(code, "no exit code") if isinstance(code, int) else None
        reasons.append(f"exit code {code}" + (f" ({meaning})" if meaning else ""))
    if report.get("complete") is not True:
        reasons.append("the report is incomplete")
    if "error" in report:
        reasons.append(f"error: {str(report['error'])[:200]}")
    if report.get("stand_in") is True and not sandbox:
        reasons.append("measured on a CPU stand-in, not on the cards")
    acceptance = report.get("acceptance")
    acceptance = acceptance if isinstance(acceptance, dict) else {}
    stand_in_here = report.get("stand_in") is True and sandbox
    if acceptance.get("passed") is None and stand_in_here and not acceptance.get("failed"):
        return reasons  # the sandbox's CPU stand-in checks no card: nothing to pass or fail
    if acceptance.get("passed") is not True:
        failed = [str(item) for item in acceptance.get("failed") or [] if item]
        if failed:
            reasons.append("failed: " + "; ".join(failed))
        elif acceptance.get("passed") is False:
            reasons.append("acceptance failed")
        else:
            reasons.append("nothing could be checked")
    return reasons


def _holds(report: dict[str, Any], *, sandbox: bool) -> bool:
    """Whether this report stops the lot before delivery (for the operator to decide)."""
    return bool(
        _devices_wrong(report)
        or acceptance_failures(report, sandbox=sandbox)
        or ("error" in report and settings.PROVISIONING_HOLD_ON_CRASH)
    )


def acceptance(job: ProvisioningJob) -> tuple[bool, str]:
    """Whether the lot's stored report accepts it, and in a few words why not (what the
    operator reads when it is held), as the report's readers (webhooks) say it."""
    report = job.report if isinstance(job.report, dict) else {}
    sandbox = is_sandbox(backend_for(job.lot.host), job.lot.host)
    if _holds(report, sandbox=sandbox):
        return False, hold_reason(report, sandbox=sandbox).removeprefix("access held: ")
    return True, "accepted"


def hold_reason(report: dict[str, Any], *, sandbox: bool) -> str:
    """The held job's reason, as the operator reads it on the job and the order's history."""
    if _devices_wrong(report):
        problem = report["devices"].get("problem") or "another device set"
        return f"access held: the benchmark did not see the lot's cards ({problem})"
    failures = acceptance_failures(report, sandbox=sandbox)
    if failures:
        return "access held: acceptance not passed: " + " · ".join(failures)
    if "error" in report:
        return "access held: the benchmark crashed"
    return "access held by the operator"


def is_sandbox(backend: Backend, host: Host) -> bool:
    """Whether a CPU stands in for the host's cards by design: the local sandbox, or a host
    the operator named in PROVISIONING_CPU_STAND_IN_HOSTS (a test machine without GPUs)."""
    return bool(getattr(backend, "sandbox", False)) or (
        host.name in settings.PROVISIONING_CPU_STAND_IN_HOSTS
    )


def _hold(job: ProvisioningJob, mine: models.QuerySet[ProvisioningJob], *, sandbox: bool) -> None:
    """Stop before delivery: the lot is held (by the operator, because its acceptance
    failed, or because its benchmark crashed and PROVISIONING_HOLD_ON_CRASH says so) until
    the operator releases it."""
    report = job.report if isinstance(job.report, dict) else {}
    reason = hold_reason(report, sandbox=sandbox)[:2000]
    with transaction.atomic():
        if mine.update(status=ProvisioningJob.Status.HELD, error=reason):
            record_note(job.order, actor=system("provisioning"), reason=f"{job.lot}: {reason}")
            lot_held.announce(order_id=job.order_id, job_id=job.pk)
    job.refresh_from_db()


STALLED_AFTER = timedelta(minutes=25)
"""A job without a recorded step for this long has lost its worker: longer than the
longest step (the benchmark: BENCHMARK_TIMEOUT, 15 min, plus the uploads)."""


OPENING_STALLED_AFTER = timedelta(minutes=5)
"""The same for a job whose only step left is opening access (two short scripts)."""


def stalled(now: datetime) -> models.Q:
    """Jobs under an open grant, waiting or running with no step recorded for STALLED_AFTER
    (OPENING_STALLED_AFTER when only the opening is left): no worker has them (a lost
    message, a killed worker), so starting them again cannot start them twice. A job with
    no grant yet is the schedule's (schedule.tick), not stalled."""
    quiet = now - STALLED_AFTER
    opening = models.Q(steps_done=len(ProvisioningJob.STEPS) - 1) & models.Q(
        heartbeat_at__lt=now - OPENING_STALLED_AFTER
    )
    open_grant = AccessGrant.objects.filter(job_id=models.OuterRef("pk"), closed_at__isnull=True)
    # EXISTS rather than joins: the conditional updates that use this stay on the job's row
    # (see _under_grant).
    return (
        models.Q(status__in=(ProvisioningJob.Status.PENDING, ProvisioningJob.Status.RUNNING))
        & models.Q(models.Exists(open_grant))
        & (
            models.Q(heartbeat_at__lt=quiet)
            | models.Q(heartbeat_at__isnull=True)
            & models.Q(models.Exists(open_grant.filter(opened_at__lt=quiet)))
            | opening
        )
    )


def hold_access(job: ProvisioningJob, *, actor: Actor) -> bool:
    """The operator holds a lot that is not delivered yet: its job stops before delivery."""
    with transaction.atomic():
        held = (
            ProvisioningJob.objects.filter(pk=job.pk, access_held=False)
            .exclude(status__in=ProvisioningJob.DELIVERED)
            .update(access_held=True)
        )
        if held:
            record_note(job.order, actor=actor, reason=f"{job.lot}: access held")
    return bool(held)


def release_access(job: ProvisioningJob, *, actor: Actor) -> bool:
    """The operator releases a held lot: a job waiting as "held" continues and delivers
    access; one still on its way just loses the hold (it is not started a second time).
    Refused once the window has ended."""
    now = timezone.now()
    live = ProvisioningJob.objects.filter(pk=job.pk, access_held=True, order__ends_at__gt=now)
    with transaction.atomic():
        resumed = live.filter(status=ProvisioningJob.Status.HELD).update(
            access_held=False, status=ProvisioningJob.Status.PENDING, error="", heartbeat_at=now
        )
        released = resumed or (
            live.exclude(
                status__in=(*ProvisioningJob.DELIVERED, ProvisioningJob.Status.HELD)
            ).update(access_held=False)
        )
        if released:
            record_note(job.order, actor=actor, reason=f"{job.lot}: access released")
        if resumed:
            transaction.on_commit(lambda: _enqueue([job]))
    return bool(released)


def api_root() -> str:
    """The REST API's base URL, as a client outside this site reaches it."""
    return f"{settings.SITE_URL}/api/v1"


def tool_order(job: ProvisioningJob) -> str:
    """What ``gpulots split-test`` reads in the account (~/.gpulots/order.json): the order
    to attach its report to, this lot's job, the hypothesis booked, where the API is. No
    secret: the upload needs the researcher's own API token."""
    order = job.order
    facts = {
        "reference": order.reference,
        "job": job.pk,
        "lot": str(job.lot),
        "hypothesis": order.hypothesis,
        "precision": order.model_precision or None,
        "workload": order.model_workload or None,
        "api": api_root(),
    }
    return json.dumps(facts, indent=1) + "\n"


def _benchmark_arguments(job: ProvisioningJob, *, sandbox: bool | None = None) -> list[str]:
    """The benchmark's command line for this job: the order's hypothesis and model shape,
    the kind's acceptance references, and --require-gpu on a real host (``sandbox``: the
    local backend, where this machine's CPU stands in; None: the configured backend)."""
    order = job.order
    kind = job.lot.host.kind
    if sandbox is None:
        sandbox = settings.PROVISIONING_BACKEND == "local"
    arguments = [
        "--hypothesis",
        order.hypothesis,
        "--usage-mode",
        order.usage_mode,
        "--expected-arch",
        kind.architecture,
    ]
    if order.model_params_billion is not None:
        arguments += ["--params-billion", str(order.model_params_billion)]
    if order.model_precision in V2_PRECISIONS:
        arguments += ["--precision", order.model_precision]
    arguments += [
        "--seq-len",
        str(order.model_seq_len),
        "--micro-batch",
        str(order.model_micro_batch),
        "--workload",
        order.model_workload or "training",
        "--thresholds",
        json.dumps(kind.acceptance_thresholds(), sort_keys=True),
    ]
    if not sandbox:
        arguments.append("--require-gpu")
    return arguments


V2_PRECISIONS = ("fp32", "bf16", "fp16", "fp8", "int8")
"""The precisions the version-2 benchmark measures (int4 orders are measured in its
default)."""


def fail_job(job_id: int, error: str) -> bool:
    """A job that cannot go on (retries spent, a refused host key) is marked failed with
    the reason, for the operator; its order stays approved, never active."""
    with transaction.atomic():
        failed = (
            ProvisioningJob.objects.filter(pk=job_id)
            .exclude(status__in=ProvisioningJob.DELIVERED)
            .update(status=ProvisioningJob.Status.FAILED, error=error[-2000:])
        )
        if failed:
            job = ProvisioningJob.objects.select_related("order", "lot").get(pk=job_id)
            record_note(
                job.order,
                actor=system("provisioning"),
                reason=f"provisioning failed on {job.lot}: {error[-400:]}",
            )
    return bool(failed)


def retry_job(job: ProvisioningJob, *, actor: Actor) -> bool:
    """The operator starts a failed or stalled job again; it continues after its last step.
    A job a worker is still running (a recent heartbeat) is not started a second time, nor
    any job once its window has ended."""
    now = timezone.now()
    with transaction.atomic():
        queued = (
            ProvisioningJob.objects.filter(pk=job.pk, order__ends_at__gt=now)
            .filter(models.Q(status=ProvisioningJob.Status.FAILED) | stalled(now))
            .update(status=ProvisioningJob.Status.PENDING, error="", heartbeat_at=now)
        )
        if queued:
            record_note(job.order, actor=actor, reason=f"provisioning retried on {job.lot}")
            transaction.on_commit(lambda: _enqueue([job]))
    return bool(queued)


def flag_host_key(host: Host, refused: HostKeyRefused) -> None:
    """Keep the key a host presented when it was refused, for the operator to check."""
    Host.objects.filter(pk=host.pk).update(
        ssh_host_key_presented=refused.presented, ssh_host_key_refused_at=timezone.now()
    )
    log.error("host key refused", extra={"host": host.name, "reason": str(refused)})


def pin_presented_host_key(host: Host, checked_fingerprint: str) -> bool:
    """The operator, having checked the presented key's fingerprint on the host, pins it:
    only if the key stored now is the one with that fingerprint (not one presented since)."""
    presented = (
        Host.objects.filter(pk=host.pk).values_list("ssh_host_key_presented", flat=True).first()
    )
    if not presented or fingerprint(presented) != checked_fingerprint.strip():
        return False
    return bool(
        Host.objects.filter(pk=host.pk, ssh_host_key_presented=presented).update(
            ssh_host_key=models.F("ssh_host_key_presented"),
            ssh_host_key_presented="",
            ssh_host_key_refused_at=None,
        )
    )


def activate_if_ready(order_id: int) -> bool:
    """approved → active once every lot is ready (never with a failed lot; a lot replaced by
    a spare counts by its spare)."""
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=order_id)
        jobs = list(
            ProvisioningJob.objects.filter(order=order, replaced_at__isnull=True).values_list(
                "status", flat=True
            )
        )
        if not jobs or any(status != ProvisioningJob.Status.READY for status in jobs):
            return False
        if transition(
            order,
            Order.STATUS_ACTIVE,
            allowed_from=[Order.STATUS_APPROVED],
            actor=system("provisioning"),
            reason="every lot is ready",
        ):
            extensions.activate_joined(order, actor=system("provisioning"))
            notifications.enqueue_order_mail(order, "order_active")
            return True
    return False


def revoke_due(*, now: datetime | None = None, backend: Backend | None = None) -> int:
    """Orders whose window has ended: access removed on every lot, order completed. Catches
    up with anything overdue (the worker was down at the time), and includes orders still
    approved (a lot failed or held): their prepared lots are revoked too.

    Each lot on its own: a host that cannot be reached keeps only its lots' grants open
    (those lots stay closed to their next tenants, the operator is told once per lot) and is
    not tried again in this run; the order completes once every lot's access is removed."""
    now = now or timezone.now()
    done = 0
    down: dict[int, str] = {}  # host id → why, for this run
    ended = (
        Order.objects.filter(
            status__in=(Order.STATUS_ACTIVE, Order.STATUS_APPROVED), ends_at__lte=now
        )
        # A joined extension ends with its order; an order whose paid extension waits for
        # the operator keeps its access until the operator decides (approve or refuse).
        .filter(joined_at__isnull=True)
        .exclude(extensions__status=Order.STATUS_PAID, extensions__joined_at__isnull=True)
        .order_by("ends_at")
    )
    for order in ended:
        failures = _revoke_lots(order, now, backend, down)
        for job, error in failures:
            log.warning("revocation postponed", extra={"order": order.reference, "error": error})
            access.revocation_failed(job, error, now=now)
        if failures:
            continue
        delivered = order.status == Order.STATUS_ACTIVE
        with transaction.atomic():
            if transition(
                order,
                Order.STATUS_COMPLETED,
                allowed_from=[Order.STATUS_ACTIVE, Order.STATUS_APPROVED],
                actor=system("revocation"),
                reason="the window ended; access removed"
                if delivered
                else "the window ended before every lot was delivered; access removed",
            ):
                notifications.enqueue_order_mail(order, "order_revoked")
                _complete_joined(order)
                incidents.end_with_window(order, at=now)
                done += 1
    return done


def _complete_joined(order: Order) -> None:
    """The extensions joined to ``order`` end with it (in its completion's transaction)."""
    for extension in Order.objects.filter(extends=order, joined_at__isnull=False):
        transition(
            extension,
            Order.STATUS_COMPLETED,
            allowed_from=[Order.STATUS_ACTIVE, Order.STATUS_APPROVED],
            actor=system("revocation"),
            reason=f"the window of {order.reference}, which it extended, ended",
        )


def _revoke_lots(
    order: Order, now: datetime, backend: Backend | None, down: dict[int, str]
) -> list[tuple[ProvisioningJob, str]]:
    failures = []
    for job in (
        ProvisioningJob.objects.filter(order=order)
        .exclude(status=ProvisioningJob.Status.REVOKED)
        .select_related("order", "lot__host", "grant")
    ):
        if job.access_grant is None and job.steps_done == 0 and not job.accounts:
            continue  # its turn on the lot never came: nothing of it is on the host
        host = job.lot.host
        if host.pk in down:
            failures.append((job, down[host.pk]))
            continue
        try:
            revoke_lot(job, backend, now=now)
        except StepFailed as exc:
            if isinstance(exc, HostKeyRefused):
                flag_host_key(host, exc)
            down[host.pk] = str(exc)
            failures.append((job, str(exc)))
    return failures


def revoke_lot(
    job: ProvisioningJob, backend: Backend | None, *, now: datetime, free_now: bool = False
) -> bool:
    """Remove ``job``'s access on its lot's host (a benchmark still running stopped, each
    account revoked), then record it: the job revoked, its grant closed (the lot free after
    the booking's turnaround, or at once with ``free_now``: a replaced lot) and
    ``access.closed`` announced. Raises StepFailed when the host does not confirm; then
    nothing is recorded and the grant stays open. False: recorded already."""
    host = job.lot.host
    chosen = backend or backend_for(host)
    if job.status != ProvisioningJob.Status.READY:  # maybe still benchmarking
        chosen.stop_validation(host, f"job-{job.pk}")
    for account in job.accounts or [a for a, _c in accounts_for(job)]:
        chosen.script(host, "revoke", account)
    with transaction.atomic():  # confirmed on the host
        revoked = (
            ProvisioningJob.objects.filter(pk=job.pk)
            .exclude(status=ProvisioningJob.Status.REVOKED)
            .update(status=ProvisioningJob.Status.REVOKED, revoked_at=now)
        )
        if revoked:
            access.close_grant(job, now=now, free_now=free_now)
            access_closed.announce(order_id=job.order_id, job_id=job.pk)
    return bool(revoked)


def remind_before_end(*, now: datetime | None = None) -> int:
    """Mail each active order once, PROVISIONING_REMINDER_HOURS before its window ends.

    Sent here, under the order's row lock, and stamped in the same transaction
    (notifications.send_once): a mail server away leaves it unstamped for the next run.
    """
    now = now or timezone.now()
    hours = settings.PROVISIONING_REMINDER_HOURS
    if not hours:
        return 0
    due = Order.objects.filter(
        status=Order.STATUS_ACTIVE,
        joined_at__isnull=True,  # a joined extension's end is its order's: mailed for that
        ending_mail_sent_at__isnull=True,
        ends_at__gt=now,
        ends_at__lte=now + timedelta(hours=hours),
    )
    sent = 0
    for order in due:
        with transaction.atomic():  # the audit entry commits with the stamp
            if notifications.send_once(order.pk, "order_ending", "ending_mail_sent_at", now=now):
                record_note(order, actor=system("reminder"), reason="the window ends soon: mailed")
                access_closing_soon.announce(order_id=order.pk)
                sent += 1
    return sent


__all__ = [
    "StepFailed",
    "acceptance",
    "approve_order",
    "fail_job",
    "hold_access",
    "pin_presented_host_key",
    "release_access",
    "remind_before_end",
    "retry_job",
    "revoke_due",
    "revoke_lot",
    "run_job",
]
