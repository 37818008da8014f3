"""``{% order_live order %}``: the order's status, when access opens or ends, and for each
lot how to connect and its validation report. The page refreshes it in place
(provisioning.views.live) until the order is active."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.db.models import Count, Window
from django.utils import timezone
from django.utils.translation import gettext as _

from provisioning.models import ProvisioningJob, SplitTest
from provisioning.report import ANSWERS, VERDICTS, split_test_summary
from provisioning.split_tests import summarised
from reservations.models import Order

register = template.Library()


def live_context(order: Order, now: datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    jobs = []
    if order.status in (Order.STATUS_APPROVED, Order.STATUS_ACTIVE, Order.STATUS_COMPLETED):
        jobs = list(
            ProvisioningJob.objects.filter(order=order).select_related(
                "order", "lot__host", "grant"
            )
        )
    return {
        "order": order,
        "jobs": jobs,
        "split_tests": _split_tests(order, jobs),
        "now": now,
        "started": now >= order.starts_at,
        "start_iso": order.starts_at.isoformat(),
        "end_iso": order.ends_at.isoformat(),
    }


def _split_tests(order: Order, jobs: list[ProvisioningJob]) -> dict[str, Any] | None:
    """How many split tests the researcher uploaded, the newest's summary and the report
    page that shows it: one query, and only once a lot is delivered (a report to read)."""
    delivered = [job for job in jobs if job.status in ProvisioningJob.DELIVERED and job.report]
    if not delivered:
        return None
    newest = (
        summarised(SplitTest.objects.filter(order=order))
        .annotate(uploaded=Window(Count("pk")))  # over every row, before the LIMIT
        .first()
    )
    if newest is None:
        return None
    parts = getattr(newest, "summary_parts", None)
    report = parts if isinstance(parts, dict) else {}
    shown = next((job for job in delivered if job.pk == newest.job_id), delivered[0])
    return {
        "count": newest.uploaded,
        "summary": split_test_summary(report, order, stand_in=newest.stand_in),
        "job": shown,
    }


@register.inclusion_tag("provisioning/_live.html")
def order_live(order: Order) -> dict[str, Any]:
    return live_context(order)


@register.filter
def verdict_of(report: Any) -> str:
    """The report's verdict in the page's language: a version-2 report's by its code (or
    its answer), a version-1 report's sentence as written."""
    if not isinstance(report, dict) or not isinstance(report.get("verdict"), dict):
        return ""
    verdict = report["verdict"]
    if not isinstance(report.get("version"), int) or report["version"] < 2:
        return str(verdict.get("answer") or "")
    text = VERDICTS.get(str(verdict.get("code") or ""))
    answer = ANSWERS.get(str(verdict.get("answer") or ""), ANSWERS["not_answered"])
    return (
        (_("%(answer)s: %(verdict)s") % {"answer": answer, "verdict": text})
        if text
        else str(answer)
    )
