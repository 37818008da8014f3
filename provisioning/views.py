"""The validation report, for whoever holds the order's link."""

from __future__ import annotations

from django.http import Http404, HttpRequest, JsonResponse

from provisioning.models import ProvisioningJob
from reservations.views import order_by_link


def report(request: HttpRequest, reference: str, secret: str, job_id: int) -> JsonResponse:
    order = order_by_link(reference, secret)
    job = ProvisioningJob.objects.filter(pk=job_id, order=order).first()
    if job is None or job.report is None:
        raise Http404
    response = JsonResponse(job.report, json_dumps_params={"indent": 1})
    response["Content-Disposition"] = (
        f'attachment; filename="{order.reference}-lot-{job.lot_id}-report.json"'
    )
    return response
