"""The order page's payment panel: choose the coin, see where and how much, "I've paid";
the receipt of a paid order and its billing details."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import get_language
from django.views.decorators.http import require_GET, require_POST

from payments import claims, invoicing, nodes, receipts, refunds
from payments.models import Asset, Invoice, Receipt
from payments.rpc import RpcError, RpcUnavailable
from payments.templatetags.payments import panel_context
from reservations.errors import MESSAGES, BookingRefused
from reservations.links import order_by_link, order_url
from reservations.services import RESEARCHER


@require_POST
def choose_asset(request: HttpRequest, reference: str, secret: str) -> HttpResponse:
    order = order_by_link(reference, secret)
    chosen = request.POST.get("asset", "")
    asset = (
        Asset.objects.filter(pk=int(chosen), is_active=True).first() if chosen.isdigit() else None
    )
    if asset is None:
        messages.error(request, MESSAGES["invalid_choice"])
        return redirect(order_url(order) + "#payment")
    try:
        invoicing.create_invoice(order, asset)
    except BookingRefused as exc:
        for message in exc.messages:
            messages.error(request, message)
    except (RpcUnavailable, RpcError, nodes.ChainMismatch):
        messages.error(request, MESSAGES["chain_unreachable"])
    return redirect(order_url(order) + "#payment")


@require_POST
def claim(request: HttpRequest, reference: str, secret: str) -> HttpResponse:
    """ "I've paid" (optionally with the transaction's hash): a worker checks at once."""
    order = order_by_link(reference, secret)
    invoice = Invoice.objects.filter(order=order, is_current=True).first()
    if invoice is None:
        return redirect(order_url(order) + "#payment")
    try:
        claims.claim_payment(invoice, request.POST.get("tx_hash", ""))
    except BookingRefused as exc:
        for message in exc.messages:
            messages.error(request, message)
    return redirect(order_url(order) + "#payment")


@require_POST
def refund_address(request: HttpRequest, reference: str, secret: str) -> HttpResponse:
    """Where one invoice's money goes back (refunds.set_refund_address): a refused address
    is said next to the panel, and nothing changes."""
    order = order_by_link(reference, secret)
    chosen = request.POST.get("invoice", "")
    invoice = (
        Invoice.objects.filter(order=order, pk=int(chosen)).first() if chosen.isdigit() else None
    )
    if invoice is None:
        messages.error(request, MESSAGES["invalid_choice"])
        return redirect(order_url(order) + "#refund")
    try:
        refunds.set_refund_address(invoice, request.POST.get("address", ""), actor=RESEARCHER)
    except BookingRefused as exc:
        for message in exc.messages:
            messages.error(request, message)
    return redirect(order_url(order) + "#refund")


@require_GET
def panel(request: HttpRequest, reference: str, secret: str) -> HttpResponse:
    """The panel alone, for the page to refresh while a payment is on its way."""
    order = order_by_link(reference, secret)
    return render(request, "payments/_panel.html", panel_context(order))


@require_GET
def receipt(request: HttpRequest, reference: str, secret: str) -> HttpResponse:
    """The paid order's receipt, in the page's language, with its PDF (in the order's)."""
    order = order_by_link(reference, secret)
    issued = receipts.issue_receipt(order)
    if issued is None:
        raise Http404
    return render(
        request,
        "payments/receipt.html",
        {
            "order": order,
            "document": receipts.document(issued, get_language()),
            "pdf_url": receipts.receipt_path(order, pdf=True),
        },
    )


@require_GET
def receipt_pdf(request: HttpRequest, reference: str, secret: str) -> HttpResponse:
    """The receipt as a PDF, in the order's language."""
    order = order_by_link(reference, secret)
    issued = receipts.issue_receipt(order)
    if issued is None:
        raise Http404
    return pdf_response(issued)


def pdf_response(issued: Receipt) -> HttpResponse:
    """The PDF of a receipt, named for it (the API's endpoint answers the same)."""
    body = receipts.render_pdf(receipts.document(issued))
    response = HttpResponse(body, content_type="application/pdf")
    name = f"receipt-{issued.label}-{issued.order.reference}.pdf"
    response["Content-Disposition"] = f'inline; filename="{name}"'
    return response
