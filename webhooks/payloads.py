"""What each webhook event carries in ``data``: the order as the API returns it
(``GET /api/v1/orders/<reference>/``, so one parser serves both), and for a lot, a refund or
an invoice, the same representation as the API's for it. Built when the event is sent, from
the database as it is then."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.urls import reverse
from rest_framework.renderers import JSONRenderer

from api import serializers as s
from payments.models import Invoice, Refund
from provisioning.models import ProvisioningJob
from provisioning.services import acceptance
from reservations.models import Order


def plain(data: Any) -> Any:
    """DRF's representation as plain JSON values (dates, decimals as the API prints them)."""
    return json.loads(JSONRenderer().render(data))


def order(order_id: int) -> tuple[dict[str, Any], Order]:
    found = (
        Order.objects.select_related("kind", "environment")
        .prefetch_related(*s.ORDER_PREFETCH)
        .get(pk=order_id)
    )
    return {"order": plain(s.OrderSerializer(found).data)}, found


def lot(order_id: int, job_id: int, *, with_report: bool = False) -> tuple[dict[str, Any], Order]:
    data, found = order(order_id)
    job = ProvisioningJob.objects.select_related("order", "lot__host", "grant").get(pk=job_id)
    data["lot"] = plain(s.ProvisioningLotSerializer(s.lot_access(job)).data)
    data["lot"]["job"] = job.pk
    if with_report:
        accepted, summary = acceptance(job)
        path = reverse("api:report", args=[found.reference])
        data["report"] = {"accepted": accepted, "summary": summary, "url": settings.SITE_URL + path}
    return data, found


def refund(refund_id: int) -> tuple[dict[str, Any], Order]:
    sent = Refund.objects.select_related("invoice__asset__chain").get(pk=refund_id)
    data, found = order(sent.invoice.order_id)
    data["refund"] = plain(s.RefundSentSerializer(sent).data)
    data["refund"].update(
        asset=sent.invoice.asset.symbol, chain_id=sent.invoice.asset.chain.chain_id
    )
    return data, found


def invoice(invoice_id: int) -> tuple[dict[str, Any], Order, Invoice]:
    found_invoice = Invoice.objects.select_related("asset__chain", "deposit_address").get(
        pk=invoice_id
    )
    data, found = order(found_invoice.order_id)
    data["invoice"] = plain(s.InvoiceSerializer(found_invoice).data)
    return data, found, found_invoice
