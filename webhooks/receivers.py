"""Each webhook event is a receiver of a domain event (infra.events): connected here, from
WebhooksConfig.ready(), never a call added to the service that made the change. A receiver
builds the payload from the database and fans it out (webhooks.services.fan_out), once per
happening however often it is retried (the message's key)."""

from __future__ import annotations

from infra.events import Event
from payments import integrity
from payments.events import invoice_exception, refund_sent
from payments.models import Invoice
from provisioning.events import (
    access_closed,
    access_closing_soon,
    access_opened,
    lot_held,
    lot_replaced,
    order_approved,
    report_ready,
)
from reservations.events import (
    credit_decided,
    incident_opened,
    order_cancelled,
    order_credited,
    order_expired,
    order_extended,
    order_extension_placed,
    order_paid,
    order_paid_late,
    order_placed,
)
from webhooks import payloads, services


def order_changed(*, sender: Event, order_id: int, **_: object) -> None:
    """An order's event: ``data.order``."""
    data, order = payloads.order(order_id)
    services.fan_out(
        sender.name, f"{sender.name}:{order_id}", data, order_id=order_id, owner_id=order.user_id
    )


for _event in (
    order_placed,
    order_paid,
    order_paid_late,
    order_cancelled,
    order_expired,
    order_approved,
    access_closing_soon,
):
    _event.connect(order_changed, dispatch_uid=f"webhooks: {_event.name}")


@order_extension_placed.receiver(dispatch_uid="webhooks: order.placed for an extension")
def extension_placed(*, order_id: int, **_: object) -> None:
    """An extension is an order of its own: ``order.placed``, its ``extends`` the order."""
    data, order = payloads.order(order_id)
    services.fan_out(
        "order.placed",
        f"order.placed:{order_id}",
        data,
        order_id=order_id,
        owner_id=order.user_id,
    )


@order_extended.receiver(dispatch_uid="webhooks: order.extended")
def order_extended_by(*, order_id: int, extension_id: int, **_: object) -> None:
    """``order.extended``: ``data.order`` (its new ``ends_at``, the extension among its
    ``extensions``); once per extension."""
    data, order = payloads.order(order_id)
    services.fan_out(
        "order.extended",
        f"order.extended:{order_id}:{extension_id}",
        data,
        order_id=order_id,
        owner_id=order.user_id,
    )


def lot_changed(*, sender: Event, order_id: int, job_id: int, **_: object) -> None:
    """A lot's event: ``data.order`` and ``data.lot`` (and ``data.report`` when it is ready)."""
    data, order = payloads.lot(order_id, job_id, with_report=sender is report_ready)
    services.fan_out(
        sender.name,
        f"{sender.name}:{order_id}:{job_id}",
        data,
        order_id=order_id,
        owner_id=order.user_id,
    )


for _event in (report_ready, access_opened, access_closed, lot_held):
    _event.connect(lot_changed, dispatch_uid=f"webhooks: {_event.name}")


@incident_opened.receiver(dispatch_uid="webhooks: lot.incident_opened")
def incident_opened_on(*, order_id: int, incident_id: int, **_: object) -> None:
    """``lot.incident_opened``: ``data.order`` (the incident among its ``incidents``) and
    ``data.incident``."""
    data, order = payloads.order(order_id)
    data["incident"] = next(i for i in data["order"]["incidents"] if i["id"] == incident_id)
    services.fan_out(
        "lot.incident_opened",
        f"lot.incident_opened:{incident_id}",
        data,
        order_id=order_id,
        owner_id=order.user_id,
    )


@lot_replaced.receiver(dispatch_uid="webhooks: lot.replaced")
def lot_replaced_by(*, order_id: int, job_id: int, replacement_job_id: int, **_: object) -> None:
    """``lot.replaced``: ``data.order`` and ``data.lot``, the replacement lot (its ``job``),
    with ``data.replaced``, the failed lot's job."""
    data, order = payloads.lot(order_id, replacement_job_id)
    data["replaced"] = {"job": job_id}
    services.fan_out(
        "lot.replaced",
        f"lot.replaced:{order_id}:{job_id}",
        data,
        order_id=order_id,
        owner_id=order.user_id,
    )


@order_credited.receiver(dispatch_uid="webhooks: order.credited")
@credit_decided.receiver(dispatch_uid="webhooks: order.credited (decided)")
def credit_changed(*, order_id: int, credit_id: int, **_: object) -> None:
    """``order.credited``: ``data.order`` and ``data.credit``; once when offered and once
    when decided (its ``status`` says time, money or refused)."""
    data, order = payloads.order(order_id)
    data["credit"] = next(c for c in data["order"]["credits"] if c["id"] == credit_id)
    key = f"order.credited:{credit_id}:{data['credit']['status']}"
    services.fan_out("order.credited", key, data, order_id=order_id, owner_id=order.user_id)


@refund_sent.receiver(dispatch_uid="webhooks: refund.sent")
def refund_recorded(*, refund_id: int, **_: object) -> None:
    """``refund.sent``: ``data.order`` and ``data.refund``."""
    data, order = payloads.refund(refund_id)
    services.fan_out(
        "refund.sent", f"refund.sent:{refund_id}", data, order_id=order.pk, owner_id=order.user_id
    )


def _invoice_event(invoice: Invoice) -> str | None:
    if invoice.exception == Invoice.EXCEPTION_PAID_OVER:
        return "order.overpaid"
    if invoice.exception == Invoice.EXCEPTION_PAID_PARTIAL:
        if invoice.status == Invoice.STATUS_PROCESSING:
            return "order.partially_paid"
        return "payment.needs_decision"  # expired with part paid: to refund
    if invoice.exception == Invoice.EXCEPTION_PAID_LATE:
        return "payment.needs_decision"  # accept it (capacity left) or refund it
    if invoice.status in Invoice.OPEN_STATUSES and not integrity.accepting(invoice):
        return "payment.needs_decision"  # a coin or chain turned off: held
    return None


@invoice_exception.receiver(dispatch_uid="webhooks: invoice exceptions")
def invoice_needs_attention(*, invoice_id: int, **_: object) -> None:
    """``order.partially_paid``, ``order.overpaid`` and, for operators,
    ``payment.needs_decision``: ``data.order`` and ``data.invoice``."""
    data, order, invoice = payloads.invoice(invoice_id)
    event = _invoice_event(invoice)
    if event is None:  # it changed again before this ran: nothing to tell now
        return
    key = f"{event}:{invoice_id}:{invoice.status}:{invoice.amount_seen}"
    services.fan_out(event, key, data, order_id=order.pk, owner_id=order.user_id)
