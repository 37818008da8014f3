"""Health during the window: every lot whose access is open is read on its host, and a
reading outside the kind's limits is an incident.

Every PROVISIONING_HEALTH_SECONDS each such lot gets one reading: the probe
(validation/benchmark/smi.py, the standard library only) is sent to the host and run there
once, reading what ``nvidia-smi`` (or ``amd-smi``) says of the lot's two cards and the
kernel log's XID lines since the previous reading. No process touches the cards and nothing
is written on the host: the researcher's job does not notice. A host without either tool
(the CPU machines of the tests and the demo) is a *stand-in*: its reading says so, judges
only the kernel log, and the pages show "stand-in".

What is judged (:func:`judge`), per card of the lot:

- **fatal** (the booking moves to a spare at once): a card missing from the tool's list, a
  card whose UUID is not the one accepted, an XID the driver logs for broken hardware (79
  fallen off the bus, 48/95 uncorrectable ECC, 64 row remapping failed, 74 NVLink, 119/120
  GSP…), uncorrected ECC errors that grew, a row remapping failure;
- **degraded** (an incident; the lot is replaced when it lasts
  PROVISIONING_HEALTH_REPLACE_AFTER): hotter than the kind's limit, throttled by the
  hardware (slowdown, thermal, power brake) or the driver's thermal limit, rows or pages
  pending retirement (a reset is due), the host not reached twice in a row.

An incident ends when the lot reads healthy again (its time credited: the researcher could
not rely on it) or when access opens on the spare that replaced it
(reservations.incidents). The readings are kept for PROVISIONING_HEALTH_KEEP as a short time
series per lot; the incident keeps the reading that opened it as its evidence.

One tick reads the lots due in parallel (PROVISIONING_HEALTH_CONCURRENCY hosts at once) and
writes with a fixed number of statements whatever the number of lots (a benchmark counts
them), except per lot that changes state (an incident opened, ended, a replacement).
"""

from __future__ import annotations

import concurrent.futures
import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Exists, OuterRef
from django.utils import timezone

from provisioning import replacement
from provisioning.backends import Backend, StepFailed
from provisioning.hosts import backend_for
from provisioning.models import HealthReading, ProvisioningJob
from reservations import incidents
from reservations.models import Incident, Order

log = logging.getLogger(__name__)

Kind = Incident.Kind
FATAL_XID = {
    48: (Kind.ECC, "an uncorrectable ECC error (XID 48)"),
    61: (Kind.XID, "an internal micro-controller breakpoint (XID 61)"),
    62: (Kind.XID, "an internal micro-controller halt (XID 62)"),
    64: (Kind.ECC, "a row remapping that failed (XID 64)"),
    74: (Kind.XID, "an NVLink error (XID 74)"),
    79: (Kind.CARDS, "the card fell off the bus (XID 79)"),
    95: (Kind.ECC, "an uncontained ECC error (XID 95)"),
    119: (Kind.XID, "the GSP timed out (XID 119)"),
    120: (Kind.XID, "a GSP error (XID 120)"),
    140: (Kind.ECC, "an unrecovered ECC error (XID 140)"),
}
"""XIDs the driver logs for hardware that needs a reset or a repair (NVIDIA's XID
catalogue). Application errors (13, 31, 43, 45…) are the job's own and kept, not judged."""
DEGRADED_XID = {
    63: (Kind.ECC, "a row remapping is pending: the card needs a reset (XID 63)"),
    92: (Kind.ECC, "a high single-bit ECC error rate (XID 92)"),
    94: (Kind.ECC, "a contained ECC error: the card goes on (XID 94)"),
}
THROTTLED = {
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake",
}
"""Throttle-mask bits (nvidia-smi's clocks_event_reasons) that are the card's state, not the
job's: idle, application clocks and the power cap are left alone. (The benchmark's own
table, validation/benchmark/smi.py, is not imported: its package imports PyTorch.)"""


@dataclass(frozen=True)
class Finding:
    kind: str
    code: str
    detail: str
    fatal: bool
    card: int | None = None


@dataclass
class Tick:
    read: int = 0
    unhealthy: int = 0
    opened: int = 0
    ended: int = 0
    replaced: int = 0
    pruned: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _value(row: dict[str, Any], name: str) -> float | None:
    value = row.get(name)
    return float(value) if isinstance(value, int | float) else None


def _measured(uuid: object) -> bool:
    text = str(uuid or "")
    return bool(text) and not text.startswith(("not measured", "stand-in", "[N/A]"))


def accepted_cards(job: ProvisioningJob) -> dict[int, dict[str, Any]]:
    """The lot's cards as its acceptance benchmark read them (by host index): the UUIDs a
    reading must find again, the ECC counters it started from."""
    report = job.report if isinstance(job.report, dict) else {}
    telemetry = report.get("telemetry")
    before = telemetry.get("before") if isinstance(telemetry, dict) else None
    rows = before.get("cards") if isinstance(before, dict) else None
    return {
        int(row["index"]): row
        for row in rows or []
        if isinstance(row, dict) and isinstance(row.get("index"), int | float)
    }


def judge(
    reading: dict[str, Any],
    *,
    cards: list[int],
    accepted: dict[int, dict[str, Any]],
    previous: dict[int, dict[str, Any]],
    max_temperature: float,
) -> list[Finding]:
    """What in ``reading`` is outside the limits (empty: healthy). ``accepted``: the cards at
    acceptance; ``previous``: at the previous reading (ECC counters grow from there)."""
    findings: list[Finding] = []
    for event in reading.get("xid") or []:
        code = event.get("code")
        for table, fatal in ((FATAL_XID, True), (DEGRADED_XID, False)):
            if code in table:
                kind, what = table[code]
                findings.append(
                    Finding(kind, f"xid_{code}", f"{what}: {event.get('line', '')}", fatal)
                )
    if reading.get("tool") == "stand-in":
        return findings  # no tool to read the cards with: the kernel log only
    rows = {row.get("index"): row for row in reading.get("cards") or [] if isinstance(row, dict)}
    errors = "; ".join(str(e) for e in reading.get("errors") or [])
    for card in cards:
        row = rows.get(card)
        if row is None:
            detail = f"card {card} is not listed by {reading.get('tool')}" + (
                f" ({errors[:300]})" if errors else ""
            )
            findings.append(Finding(Kind.CARDS, "card_missing", detail, True, card))
            continue
        was = accepted.get(card, {}).get("uuid")
        if _measured(was) and _measured(row.get("uuid")) and row.get("uuid") != was:
            detail = f"card {card} is {row.get('uuid')}, not {was} as accepted"
            findings.append(Finding(Kind.CARDS, "card_changed", detail, True, card))
        findings += _memory(card, row, previous.get(card) or accepted.get(card) or {})
        findings += _heat(card, row, max_temperature)
    return findings


def _memory(card: int, row: dict[str, Any], before: dict[str, Any]) -> list[Finding]:
    found = []
    name = "ecc.errors.uncorrected.volatile.total"
    now, then = _value(row, name), _value(before, name) or 0.0
    if now is not None and now > then:
        detail = f"card {card}: {now:.0f} uncorrected ECC errors (was {then:.0f})"
        found.append(Finding(Kind.ECC, "ecc_uncorrected", detail, True, card))
    if str(row.get("remapped_rows.failure", "")).strip().lower() == "yes":
        detail = f"card {card}: a memory row could not be remapped"
        found.append(Finding(Kind.ECC, "remapping_failed", detail, True, card))
    for pending in ("remapped_rows.pending", "retired_pages.pending"):
        if str(row.get(pending, "")).strip().lower() == "yes":
            detail = f"card {card}: {pending.replace('_', ' ')}: the card needs a reset"
            found.append(Finding(Kind.ECC, "memory_pending", detail, False, card))
    return found


def _heat(card: int, row: dict[str, Any], max_temperature: float) -> list[Finding]:
    found = []
    temperature = _value(row, "temperature.gpu")
    if temperature is not None and temperature > max_temperature:
        detail = f"card {card} at {temperature:.0f} °C (limit {max_temperature:.0f} °C)"
        found.append(Finding(Kind.THERMAL, "too_hot", detail, False, card))
    mask = row.get("throttle_reasons")
    if isinstance(mask, int | float):
        reasons = [name for bit, name in THROTTLED.items() if int(mask) & bit]
        if reasons:
            detail = f"card {card} throttled: {', '.join(reasons)}"
            found.append(Finding(Kind.THERMAL, "throttled", detail, False, card))
    return found


# --------------------------------------------------------------------------- the tick


def due(now: datetime, order_id: int | None = None) -> list[ProvisioningJob]:
    """Lots whose access is open now and whose last reading is older than the interval."""
    recent = HealthReading.objects.filter(
        job=OuterRef("pk"),
        taken_at__gt=now - timedelta(seconds=settings.PROVISIONING_HEALTH_SECONDS),
    )
    jobs = ProvisioningJob.objects.filter(
        status=ProvisioningJob.Status.READY,
        replaced_at__isnull=True,
        grant__closed_at__isnull=True,
        grant__keys_at__lte=now,
        order__status__in=(Order.STATUS_APPROVED, Order.STATUS_ACTIVE),
        order__starts_at__lte=now,
        order__ends_at__gt=now,
    ).exclude(Exists(recent))
    if order_id is not None:
        jobs = jobs.filter(order_id=order_id)
    return list(jobs.select_related("order", "lot__host__kind", "grant").order_by("pk"))


def _read(
    backend: Backend | None, job: ProvisioningJob, since: datetime, now: datetime
) -> dict[str, Any]:
    """One lot's reading, or the reason there is none (``error``). Runs in a thread: no
    database here."""
    host = job.lot.host
    cards = f"{job.lot.gpu_a},{job.lot.gpu_b}"
    try:
        found = (backend or backend_for(host)).read_health(
            host, cards, since.timestamp(), now.timestamp()
        )
    except (StepFailed, OSError) as exc:
        return {"error": str(exc)[:2000]}
    return found


def tick(
    *, now: datetime | None = None, backend: Backend | None = None, order_id: int | None = None
) -> Tick:
    """Read every lot that is due at ``now`` and act on what is read."""
    now = now or timezone.now()
    done = Tick()
    jobs = due(now, order_id)
    if order_id is None:
        keep = now - settings.PROVISIONING_HEALTH_KEEP
        done.pruned = HealthReading.objects.filter(taken_at__lt=keep).delete()[0]
    if not jobs:
        return done
    ids = [job.pk for job in jobs]
    newest = HealthReading.objects.filter(job_id__in=ids).order_by("job_id", "-taken_at")
    latest = {reading.job_id: reading for reading in newest.distinct("job_id")}
    # The last reading that came back: XID lines and ECC counters go on from it (a host not
    # reached in between loses none of its kernel log's lines).
    answered = {reading.job_id: reading for reading in newest.filter(error="").distinct("job_id")}
    open_ones = {
        (incident.order_id, incident.lot_id): incident
        for incident in Incident.objects.filter(
            ended_at__isnull=True, order_id__in={job.order_id for job in jobs}
        ).select_related("order", "lot")
    }
    workers = max(1, min(settings.PROVISIONING_HEALTH_CONCURRENCY, len(jobs)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        found = list(
            pool.map(lambda job: _read(backend, job, _since(job, answered.get(job.pk)), now), jobs)
        )
    readings = [
        _record(job, answer, answered.get(job.pk), now)
        for job, answer in zip(jobs, found, strict=True)
    ]
    HealthReading.objects.bulk_create(readings)
    done.read = len(readings)
    for job, taken in zip(jobs, readings, strict=True):
        if not taken.healthy:
            done.unhealthy += 1
        _act(job, taken, latest.get(job.pk), open_ones.get((job.order_id, job.lot_id)), done)
    return done


def _since(job: ProvisioningJob, previous: HealthReading | None) -> datetime:
    """XID lines are read from the last reading that came back on (from access opening, at
    first)."""
    if previous is not None:
        return previous.taken_at
    keys_at = job.grant.keys_at
    return keys_at if keys_at is not None else job.order.starts_at


def _record(
    job: ProvisioningJob, reading: dict[str, Any], previous: HealthReading | None, now: datetime
) -> HealthReading:
    if "error" in reading:
        detail = f"{job.lot.host.name} not reached: {reading['error'][:300]}"
        finding = Finding(Kind.UNREACHABLE, "unreachable", detail, False)
        return HealthReading(
            job=job,
            lot=job.lot,
            taken_at=now,
            healthy=False,
            error=reading["error"],
            findings=[asdict(finding)],
        )
    before = {row.get("index"): row for row in previous.cards} if previous else {}
    findings = judge(
        reading,
        cards=[job.lot.gpu_a, job.lot.gpu_b],
        accepted=accepted_cards(job),
        previous=before,
        max_temperature=job.lot.host.kind.health_max_temperature_c,
    )
    return HealthReading(
        job=job,
        lot=job.lot,
        taken_at=now,
        healthy=not findings,
        tool=str(reading.get("tool", ""))[:12],
        cards=reading.get("cards") or [],
        xid=reading.get("xid") or [],
        findings=[asdict(finding) for finding in findings],
        seconds=reading.get("seconds"),
    )


def _act(
    job: ProvisioningJob,
    reading: HealthReading,
    previous: HealthReading | None,
    incident: Incident | None,
    done: Tick,
) -> None:
    """An incident opened, ended or escalated to a replacement by ``reading``."""
    now = reading.taken_at
    ours = incident is not None and not incident.at_acceptance and incident.replacement_id is None
    if reading.healthy:
        if ours and incident is not None:
            incidents.end_incident(incident, at=now, why="the lot read healthy again")
            done.ended += 1
        return
    findings = reading.findings
    fatal = any(finding["fatal"] for finding in findings)
    unreachable = bool(reading.error)
    if incident is None:
        if unreachable and not (previous is not None and previous.error):
            return  # once is a hiccup; twice in a row (an interval apart) is an incident
        first = sorted(findings, key=lambda finding: not finding["fatal"])[0]
        started = previous.taken_at if unreachable and previous is not None else now
        incident, opened = incidents.open_incident(
            job.order,
            job.lot,
            kind=first["kind"],
            summary="; ".join(finding["detail"] for finding in findings),
            evidence=evidence_of(reading),
            at=started,
        )
        done.opened += int(opened)
    elif not ours:
        return  # the acceptance's incident, or one already replaced: not this reading's
    lasted = now - incident.started_at >= settings.PROVISIONING_HEALTH_REPLACE_AFTER
    replace = (fatal or lasted) and settings.PROVISIONING_REPLACE_FAILED_LOTS
    if replace and replacement.replace(job, incident, now=now) is not None:
        done.replaced += 1


def evidence_of(reading: HealthReading) -> dict[str, Any]:
    """What an incident keeps of the reading that opened it."""
    return {
        "source": "health",
        "taken_at": reading.taken_at.isoformat(),
        "tool": reading.tool,
        "cards": reading.cards,
        "xid": reading.xid,
        "findings": reading.findings,
        **({"error": reading.error} if reading.error else {}),
    }


SHOWN_READINGS = 24


def recent(lot: Any) -> list[dict[str, Any]]:
    """The lot's latest readings for its page, newest first: per card its temperature,
    throttle mask and uncorrected ECC count, and what was judged."""
    rows = []
    for reading in HealthReading.objects.filter(lot=lot).select_related("job__order")[
        :SHOWN_READINGS
    ]:
        cards = [
            {
                "index": card.get("index"),
                "temperature": card.get("temperature.gpu", "—"),
                "throttle": card.get("throttle_reasons", "—"),
                "ecc": card.get("ecc.errors.uncorrected.volatile.total", "—"),
            }
            for card in reading.cards
            if isinstance(card, dict)
        ]
        rows.append({"reading": reading, "cards": cards, "findings": reading.findings})
    return rows
