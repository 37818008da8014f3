"""The validation report, for whoever holds the order's link: a readable page with charts,
and the raw JSON; beside it, the researcher's own split test (provisioning.split_tests)."""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render

from provisioning import report as v2
from provisioning.models import ProvisioningJob, SplitTest
from provisioning.services import api_root
from provisioning.templatetags.provisioning import live_context
from provisioning.validation import build
from reservations.links import order_by_link
from reservations.models import Order


def _job(reference: str, secret: str, job_id: int) -> tuple[Order, ProvisioningJob]:
    order = order_by_link(reference, secret)
    job = (
        ProvisioningJob.objects.select_related("lot__host")
        # The researcher's once the lot is delivered (not while it is prepared, failed or
        # held: the operator reads it in the desk first).
        .filter(pk=job_id, order=order, status__in=ProvisioningJob.DELIVERED)
        .first()
    )
    if job is None or job.report is None:
        raise Http404
    return order, job


def live(request: HttpRequest, reference: str, secret: str) -> HttpResponse:
    """The order page's status and access part alone, for the page to refresh in place."""
    order = order_by_link(reference, secret)
    return render(request, "provisioning/_live.html", live_context(order))


def bars(values: dict[str, float | None]) -> list[dict[str, Any]]:
    """Label, value and width (percent of the largest) for a horizontal bar chart."""
    measured = {label: value for label, value in values.items() if isinstance(value, int | float)}
    top = max(measured.values(), default=0) or 1
    return [
        {"label": label, "value": value, "width": round(100 * value / top, 1)}
        for label, value in measured.items()
    ]


def report(request: HttpRequest, reference: str, secret: str, job_id: int) -> HttpResponse:
    order, job = _job(reference, secret, job_id)
    data: dict[str, Any] = job.report or {}
    if isinstance(data.get("version"), int) and data["version"] >= 2:
        # The newest split test of this lot, or of the order when it named no lot.
        split_test = (
            SplitTest.objects.filter(order=order)
            .filter(Q(job=job) | Q(job__isnull=True))
            .select_related("order")
            .first()
        )
        shown = {
            "order": order,
            "job": job,
            "report": data,
            "api_url": api_root(),
            **v2.context(order, data),
            **v2.split_test_context(split_test),
        }
        return render(request, "provisioning/report_v2.html", shown)
    split = data.get("split_test", {})
    single, pair = split.get("one_card", {}), split.get("two_cards", {})
    reduce = data.get("essentials", {}).get("all_reduce", {})
    sizes = reduce.get("sizes", []) if isinstance(reduce, dict) else []
    peaks = pair.get("peak_memory_gb") if isinstance(pair.get("peak_memory_gb"), list) else []
    charts = {
        "step": bars({"1": single.get("median_step_ms"), "2": pair.get("median_step_ms")}),
        "memory": bars({str(i + 1): value for i, value in enumerate(peaks)}),
        "all_reduce": bars({_size(s["bytes"]): s["bus_bandwidth_gbps"] for s in sizes}),
    }
    context = {
        "order": order,
        "job": job,
        "report": data,
        "single": single,
        "pair": pair,
        "charts": charts,
    }
    return render(request, "provisioning/report.html", context)


def report_json(request: HttpRequest, reference: str, secret: str, job_id: int) -> JsonResponse:
    order, job = _job(reference, secret, job_id)
    response = JsonResponse(job.report, json_dumps_params={"indent": 1})
    response["Content-Disposition"] = (
        f'attachment; filename="{order.reference}-lot-{job.lot_id}-report.json"'
    )
    return response


def split_test_json(
    request: HttpRequest, reference: str, secret: str, split_test_id: int
) -> JsonResponse:
    """A split test's report as it was uploaded, for whoever holds its order's link."""
    order = order_by_link(reference, secret)
    split_test = get_object_or_404(SplitTest, pk=split_test_id, order=order)
    response = JsonResponse(split_test.report, json_dumps_params={"indent": 1})
    response["Content-Disposition"] = (
        f'attachment; filename="{order.reference}-split-test-{split_test.pk}.json"'
    )
    return response


def split_test_tool(request: HttpRequest) -> HttpResponse:
    """``gpulots.py``, the split-test command every delivered account has, for anywhere
    else with PyTorch: ``python gpulots.py split-test --help``. The same one file (a zipapp)
    the accounts get, under the same name."""
    tool = build.tool().read_bytes()
    response = HttpResponse(tool, content_type="text/x-python; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="gpulots.py"'
    return response


def _size(size: int) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size // scale} {unit}"
    return f"{size} B"
