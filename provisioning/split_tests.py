"""The researcher's own split test (issue 16): ``gpulots split-test`` runs their training
command on one card, then on two, in their account, and uploads its JSON report to the
order with their API token. Stored here, and only here, once its shape is checked; its
content is never trusted (the pages read it through provisioning.report's guards).
"""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction
from django.db.models import F, QuerySet
from django.db.models.functions import JSONObject

from provisioning.models import ProvisioningJob, SplitTest
from provisioning.report import ANSWERS, part, split_test_speedup
from reservations.models import Order
from reservations.services import Actor, record_note

KIND = "split_test"
VERSION = 2
MAX_REPORT_BYTES = 256 * 1024
"""The most a report's JSON text may weigh (compact, UTF-8; the command's weigh a few KiB).
The API reads no bigger body anyway (DATA_UPLOAD_MAX_MEMORY_SIZE)."""
KEPT_PER_ORDER = 50
"""Split tests kept per order: an upload beyond it drops the oldest, so that a researcher
iterating on a training script is never locked out. The audit trail keeps every upload."""
OBJECTS = ("order", "split", "verdict", "steps", "sections", "acceptance")
"""The parts that, when present, must be JSON objects."""

REFUSALS = {
    "not_a_split_test": (
        'This is not a split-test report: a JSON object with "kind": "split_test", as '
        "gpulots split-test writes it."
    ),
    "unsupported_version": (
        "This split-test report's version is not supported: version 2 is. Update gpulots."
    ),
    "split_test_too_large": (
        f"This split-test report is too large: at most {MAX_REPORT_BYTES // 1024} KiB of JSON."
    ),
    "malformed_split_test": "This split-test report is malformed: %(why)s.",
    "job_not_in_order": "The report names job %(job)s, which is not a lot of this order.",
    "other_order": "The report was made for order %(reference)s, not this one.",
}
"""What each refusal says (the API's ``detail``), by its stable code."""


class SplitTestRefused(ValueError):
    """An upload refused: nothing was stored. ``code`` is a key of REFUSALS."""

    def __init__(self, code: str, **params: object) -> None:
        super().__init__(REFUSALS[code] % params if params else REFUSALS[code])
        self.code = code


def attach_split_test(order: Order, report: Any, *, actor: Actor) -> SplitTest:
    """Store ``report`` as a split test of ``order``, uploaded by ``actor``.

    Guarantees: a report that is not a version-2 split test, weighs more than
    MAX_REPORT_BYTES, has a non-object part, holds a NUL character or a number JSON cannot
    carry, names another order, or names a job that is not one of this order's, is
    refused with SplitTestRefused and nothing is written. Otherwise the split test, its
    audit entry and the pruning to the newest KEPT_PER_ORDER commit together; uploads to
    one order take their turn on its row, so the count never exceeds the limit.
    """
    job_id = _checked(order, report)
    verdict = part(report, "verdict")
    answer = verdict.get("answer")
    code = verdict.get("code")
    with transaction.atomic():
        # Locks: this order's row, so that concurrent uploads to it count and prune in turn.
        Order.objects.select_for_update().values_list("pk", flat=True).get(pk=order.pk)
        job = None
        if job_id is not None:
            job = (
                ProvisioningJob.objects.select_related("lot__host")
                .filter(pk=job_id, order=order)
                .first()
            )
            if job is None:
                raise SplitTestRefused("job_not_in_order", job=job_id)
        split_test = SplitTest.objects.create(
            order=order,
            job=job,
            report=report,
            answer=answer if isinstance(answer, str) and answer in ANSWERS else "not_answered",
            code=code[:40] if isinstance(code, str) else "",
            speedup=split_test_speedup(report, order),
            stand_in=report.get("stand_in") is True or verdict.get("stand_in") is True,
        )
        stale = SplitTest.objects.filter(order=order).values_list("pk", flat=True)[KEPT_PER_ORDER:]
        SplitTest.objects.filter(pk__in=list(stale)).delete()
        record_note(order, actor=actor, reason=_audit_line(split_test))
    return split_test


def _checked(order: Order, report: Any) -> int | None:
    """The job the report names (None: none), once its shape is right."""
    if not isinstance(report, dict) or report.get("kind") != KIND:
        raise SplitTestRefused("not_a_split_test")
    version = report.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version != VERSION:
        raise SplitTestRefused("unsupported_version")
    try:
        text = json.dumps(report, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:  # 1e999 parses as infinity, which JSON (and PostgreSQL) cannot carry
        raise SplitTestRefused("malformed_split_test", why="a number is out of range") from None
    if len(text.encode()) > MAX_REPORT_BYTES:
        raise SplitTestRefused("split_test_too_large")
    if _holds_nul(report):  # PostgreSQL's jsonb refuses it
        raise SplitTestRefused("malformed_split_test", why="a text holds a NUL character")
    for key in OBJECTS:
        if report.get(key) is not None and not isinstance(report[key], dict):
            raise SplitTestRefused("malformed_split_test", why=f'"{key}" is not an object')
    named = part(report, "order")
    reference = named.get("reference")
    if reference not in (None, "") and reference != order.reference:
        raise SplitTestRefused("other_order", reference=str(reference)[:40])
    job = named.get("job")
    if job is None:
        return None
    if not isinstance(job, int) or isinstance(job, bool):
        raise SplitTestRefused("job_not_in_order", job=json.dumps(job)[:40])
    return job


def _holds_nul(value: Any) -> bool:
    """Whether a text anywhere in ``value`` (a key too) holds U+0000; without recursion."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def _audit_line(split_test: SplitTest) -> str:
    lot = f" for lot {split_test.job.lot}" if split_test.job is not None else ""
    details = [split_test.code] if split_test.code else []
    if split_test.speedup is not None:
        details.append(f"{split_test.speedup:g}×")
    if split_test.stand_in:
        details.append("CPU stand-in")
    said = f" ({', '.join(details)})" if details else ""
    return f"split test {split_test.pk} uploaded{lot}: {split_test.answer}{said}"


SUMMARY_PARTS = JSONObject(
    split=F("report__split"),
    order=JSONObject(hypothesis=F("report__order__hypothesis")),
    verdict=JSONObject(hypothesis=F("report__verdict__hypothesis")),
)
"""The parts of a report its summary reads (provisioning.report.split_test_summary)."""


def summarised(split_tests: QuerySet[SplitTest]) -> QuerySet[SplitTest]:
    """``split_tests`` without their reports (up to MAX_REPORT_BYTES each), with what their
    summaries read of them as ``summary_parts``."""
    return split_tests.defer("report").annotate(summary_parts=SUMMARY_PARTS)
