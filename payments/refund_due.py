"""What an invoice owes back, and why: read-only, for the refund flow (payments.refunds),
its mails (payments.refund_mails), the order page, the API and the desk."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import F, Q, QuerySet
from django.utils.translation import gettext_lazy as _

from payments.models import Asset, Chain, Invoice, Refund, units
from reservations.models import Credit, Order

log = logging.getLogger(__name__)

WHY = {
    "overpaid": _("you paid more than was due"),
    "credited": _("you took a credit as money: time a lot of yours was not usable"),
    "after_refund": _("a payment arrived after this invoice was refunded"),
    "paid_elsewhere": _("the order is already paid by another invoice"),
    "cancelled": _("the order was cancelled"),
    "partial": _("less than the amount due arrived before the invoice expired"),
    "late": _(
        "your payment arrived after the invoice expired; if your lots are no longer free, "
        "it is sent back"
    ),
}
"""Why money goes back, in the researcher's words (page and mails)."""


# --------------------------------------------------------------------------- what is owed


def owed_units(invoice: Invoice) -> int:
    """What a refund of this invoice sends back now, in base units: all of what reached an
    expired invoice (paid late or partly, a second invoice of a paid order, an order
    cancelled), else what the scanner flagged (``amount_to_refund``: beyond the amount due
    of a settled invoice, or what came after a refund) — less what was sent back already.
    Nothing while the invoice is open: the payer may still complete it."""
    if invoice.status in Invoice.OPEN_STATUSES:
        return 0
    if invoice.status == Invoice.STATUS_EXPIRED and units(invoice.amount_seen) > 0:
        paid = max(units(invoice.amount_seen), units(invoice.amount_confirmed))
        return max(0, paid - units(invoice.amount_refunded))
    return units(invoice.amount_to_refund)


def owing() -> QuerySet[Invoice]:
    """The invoices whose ``owed_units`` is above 0, as one query."""
    expired_paid = Q(status=Invoice.STATUS_EXPIRED, amount_seen__gt=0) & (
        Q(amount_seen__gt=F("amount_refunded")) | Q(amount_confirmed__gt=F("amount_refunded"))
    )
    flagged = Q(amount_to_refund__gt=0) & ~Q(status=Invoice.STATUS_EXPIRED, amount_seen__gt=0)
    return Invoice.objects.exclude(status__in=Invoice.OPEN_STATUSES).filter(expired_paid | flagged)


def why(order: Order, invoice: Invoice, invoices: Sequence[Invoice] | None = None) -> str:
    """The code (a key of WHY) of why this invoice's money goes back (``invoices``: the
    order's invoices, when the caller has them: no query then)."""
    if invoice.status == Invoice.STATUS_SETTLED:
        credited = Credit.objects.filter(
            order=order, status=Credit.Status.MONEY, amount_units__gt=0
        ).exists()
        return "credited" if credited else "overpaid"
    if invoice.status == Invoice.STATUS_INVALID:
        return "after_refund"
    if invoices is None:
        paid = Invoice.objects.filter(order=order, status=Invoice.STATUS_SETTLED)
        paid_elsewhere = paid.exclude(pk=invoice.pk).exists()
    else:
        paid_elsewhere = any(
            i.status == Invoice.STATUS_SETTLED and i.pk != invoice.pk for i in invoices
        )
    if paid_elsewhere:
        return "paid_elsewhere"
    if order.status == Order.STATUS_CANCELLED:
        return "cancelled"
    if invoice.exception == Invoice.EXCEPTION_PAID_LATE:
        return "late"
    return "partial"


def in_flight(invoice: Invoice) -> Refund | None:
    """The invoice's refund being verified, if any (there is at most one)."""
    return invoice.refunds.filter(status=Refund.STATUS_SENT).first()


@dataclass(frozen=True)
class RefundLine:
    """One invoice of an order with money to send back or sent back: what the order page's
    panel and the API show."""

    invoice: Invoice
    owed: int
    """Base units still to send back."""
    why: str
    """A key of WHY."""
    can_change: bool
    """The researcher may give or change the address (money owed, no refund on its way)."""
    refunds: list[Refund]
    """Newest first."""

    @property
    def asset(self) -> Asset:
        return self.invoice.asset

    @property
    def chain(self) -> Chain:
        return self.invoice.asset.chain

    @property
    def symbol(self) -> str:
        return self.invoice.asset.symbol

    @property
    def network(self) -> str:
        return self.invoice.asset.chain.name

    @property
    def owed_amount(self) -> Decimal:
        return self.invoice.asset.from_units(self.owed)

    @property
    def reason(self) -> str:
        return str(WHY[self.why])

    @property
    def shown(self) -> list[tuple[Refund, Decimal]]:
        """The refunds the researcher sees (not the rejected ones: the operator's to redo),
        with their amounts in coin units."""
        asset = self.invoice.asset
        return [
            (r, asset.from_units(r.amount if r.amount_sent is None else r.amount_sent))
            for r in self.refunds
            if r.status != Refund.STATUS_REJECTED
        ]


def lines_for(order: Order, invoices: Sequence[Invoice] | None = None) -> list[RefundLine]:
    """The order's invoices that owe money or have had a refund, oldest first.

    ``invoices``: the order's invoices with their assets and chains, when the caller has
    them (the order page reads them once for its panel, refunds and receipt). Then this
    reads only the refunds, and only of invoices money ever reached: none for an order
    nobody paid (the common case)."""
    if invoices is None:
        invoices = list(Invoice.objects.filter(order=order).select_related("asset__chain"))
    paid_into = [
        i
        for i in invoices
        if i.amount_seen > 0
        or i.amount_confirmed > 0
        or i.amount_to_refund > 0
        or i.amount_refunded > 0
    ]
    if not paid_into:
        return []
    refunds_of: dict[int, list[Refund]] = {}
    for refund in Refund.objects.filter(invoice__in=paid_into).order_by("-created_at", "-pk"):
        refunds_of.setdefault(refund.invoice_id, []).append(refund)
    lines = []
    for invoice in sorted(paid_into, key=lambda i: (i.created_at, i.pk)):
        refunds = refunds_of.get(invoice.pk, [])
        owed = owed_units(invoice)
        if owed <= 0 and not refunds:
            continue
        sending = any(r.status == Refund.STATUS_SENT for r in refunds)
        lines.append(
            RefundLine(
                invoice=invoice,
                owed=owed,
                why=why(order, invoice, invoices),
                can_change=owed > 0 and not sending,
                refunds=refunds,
            )
        )
    return lines
