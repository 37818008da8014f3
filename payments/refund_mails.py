"""The mails of a refund, to the order's contact in the order's language, each sent once:
money owed (asking for an address, with the order page's link), a refund sent (its
transaction), a refund confirmed on-chain. Found from the database by beat
(refunds.check_refunds), so a lost task or a mail server away loses none."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from infra.mail import send_templated
from payments.models import Invoice, Refund
from payments.refund_due import WHY, owed_units, owing, why
from reservations.notifications import order_link

log = logging.getLogger(__name__)

MAIL_CATCH_UP = timedelta(days=30)
"""Invoices older than this are not mailed about money owed (the operator's desk shows them)."""


def _context(invoice: Invoice, refund: Refund | None) -> dict[str, Any]:
    order = invoice.order
    asset = invoice.asset
    confirmed = order.contact_confirmed_at is not None
    if refund is None:
        amount: int | Decimal = owed_units(invoice)
    else:
        amount = refund.amount if refund.amount_sent is None else refund.amount_sent
    return {
        "order": order,
        "link": order_link(order),
        "name": order.contact_name if confirmed else "",
        "amount": asset.from_units(amount),
        "symbol": asset.symbol,
        "network": asset.chain.name,
        "contract": asset.contract_address,
        "address": refund.to_address if refund is not None else invoice.refund_address,
        "tx_hash": refund.tx_hash if refund is not None else "",
        "why": WHY[why(order, invoice)],
    }


def _mail_once(rows: QuerySet[Any], pk: int, stamp: str, name: str, now: datetime) -> bool:
    """Mail ``name`` about the row ``pk`` unless its ``stamp`` says it went; stamp it. The
    row is locked while the mail goes out: two workers never both send it; a crash before
    the commit sends it again (at least once, never silently none)."""
    with transaction.atomic():
        # Locks: this invoice's or refund's row.
        row = rows.select_for_update(of=("self",)).filter(pk=pk, **{f"{stamp}__isnull": True})
        found = row.first()
        if found is None:
            return False
        invoice, refund = (found, None) if isinstance(found, Invoice) else (found.invoice, found)
        if refund is None and owed_units(invoice) == 0:
            return False  # refunded meanwhile: nothing to ask for
        order = invoice.order
        send_templated(name, _context(invoice, refund), order.contact_email, order.language)
        type(found).objects.filter(pk=pk).update(**{stamp: now})
    return True


def send_refund_mails(*, now: datetime | None = None) -> int:
    """Mail each step to the order's contact, once: money owed (asking for an address, with
    the order page's link), a refund sent (its transaction), a refund confirmed. A mail
    that fails is tried again next cycle. Returns how many went."""
    now = now or timezone.now()
    due: list[tuple[QuerySet[Any], int, str, str]] = []
    invoices = Invoice.objects.select_related("asset__chain", "order")
    asked = owing().filter(refund_requested_at__isnull=True, created_at__gte=now - MAIL_CATCH_UP)
    due += [
        (invoices, pk, "refund_requested_at", "refund_due")
        for pk in asked.values_list("pk", flat=True)
    ]
    refunds = Refund.objects.select_related("invoice__asset__chain", "invoice__order")
    sent = refunds.filter(sent_mailed_at__isnull=True).exclude(status=Refund.STATUS_REJECTED)
    due += [
        (refunds, pk, "sent_mailed_at", "refund_sent") for pk in sent.values_list("pk", flat=True)
    ]
    done = refunds.filter(status=Refund.STATUS_CONFIRMED, confirmed_mailed_at__isnull=True)
    due += [
        (refunds, pk, "confirmed_mailed_at", "refund_confirmed")
        for pk in done.values_list("pk", flat=True)
    ]
    mailed = 0
    for rows, pk, stamp, name in due:
        try:
            mailed += _mail_once(rows, pk, stamp, name, now)
        except Exception:  # the mail server away: the stamp says it is still to go
            log.warning("refund mail not sent; next cycle", exc_info=True, extra={"mail": name})
    return mailed
