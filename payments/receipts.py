"""Receipts for paid orders, for a university's accounting: billing details, the numbered
receipt of a settled invoice, and what it says (the page and the PDF read the same
``Document``).

A receipt exists once an order is paid by a settled invoice (``paid_invoice``). Its number
is given at its first issue — the page, the PDF, the API or the "order paid" mail, whichever
comes first — under one lock for the whole numbering, so numbers follow each other without
gaps or duplicates (a unique constraint in the database as well). Everything else is read
from the order and the invoice when it is shown: amounts in exact base units, the rate
locked for the invoice, the confirmed transfers and their hashes. The document is written
in the order's language (EN/DE/FR).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.db.models import Max
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.formats import date_format
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from payments.models import BillingDetails, Invoice, Receipt, Transfer, units
from reservations.models import Order
from reservations.templatetags.money import local_units, usd
from reservations.templatetags.money import units as coin

NUMBERING_LOCK = "payments.receipt_number"
"""The advisory lock every new receipt number is taken under (one at a time)."""


# --------------------------------------------------------------------------- billing


def billing_of(order: Order) -> BillingDetails:
    """The order's billing details (unsaved and empty when none were given)."""
    found = BillingDetails.objects.filter(order=order).first()
    return found or BillingDetails(order=order)


def save_billing(
    order: Order, *, organisation: str = "", address: str = "", vat_id: str = ""
) -> BillingDetails:
    """Store whom the receipt is made out to (each part optional; all empty removes them).

    The caller has validated the parts (the contact form, the order page's form): here they
    are only trimmed; a VAT id is kept upper-case, as it is printed.
    """
    parts = {
        "organisation": organisation.strip(),
        "address": "\n".join(line.strip() for line in address.strip().splitlines() if line.strip()),
        "vat_id": vat_id.strip().upper(),
    }
    if not any(parts.values()):
        BillingDetails.objects.filter(order=order).delete()
        return BillingDetails(order=order)
    details, _created = BillingDetails.objects.update_or_create(order=order, defaults=parts)
    return details


# --------------------------------------------------------------------------- the receipt


def paid_invoice(order: Order, invoices: Sequence[Invoice] | None = None) -> Invoice | None:
    """The settled invoice that paid the order, or None: unpaid, expired or cancelled orders
    have no receipt. ``invoices``: the order's invoices, when the caller has them."""
    if invoices is not None:
        if order.status not in Order.PAID_STATUSES:
            return None
        return next((i for i in invoices if i.status == Invoice.STATUS_SETTLED), None)
    return (
        Invoice.objects.filter(
            order=order, status=Invoice.STATUS_SETTLED, order__status__in=Order.PAID_STATUSES
        )
        .select_related("asset__chain", "deposit_address")
        .first()
    )


def has_receipt(order: Order, invoices: Sequence[Invoice] | None = None) -> bool:
    """Whether the order can be given a receipt (without numbering one)."""
    return paid_invoice(order, invoices) is not None


def issue_receipt(order: Order, *, now: datetime | None = None) -> Receipt | None:
    """The order's receipt, numbered at its first issue; None while it has none to have.

    Guarantees: one receipt per order (its number never changes once given), and numbers
    1, 2, 3, … in the order they are issued, none skipped — a number is taken under one
    advisory lock for all receipts and only committed with its receipt.
    """
    existing = Receipt.objects.filter(order=order).first()
    if existing is not None:
        return existing
    invoice = paid_invoice(order)
    if invoice is None:
        return None
    with transaction.atomic():
        # Locks: the receipt numbering (a transaction-level advisory lock, no row locks), so
        # that two first issues never read the same last number.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [NUMBERING_LOCK])
        existing = Receipt.objects.filter(order=order).first()
        if existing is not None:  # issued by another request while we waited
            return existing
        last = Receipt.objects.aggregate(last=Max("number"))["last"] or 0
        return Receipt.objects.create(
            order=order, invoice=invoice, number=last + 1, issued_at=now or timezone.now()
        )


def receipt_path(order: Order, *, pdf: bool = False) -> str:
    """The receipt's page (or PDF) behind the order's secret link, in the active language."""
    name = "payments:receipt_pdf" if pdf else "payments:receipt"
    return reverse(name, args=[order.reference, order.secret])


def receipt_link(order: Order, *, pdf: bool = False) -> str:
    """The same, absolute and in the order's language (for mails and the API)."""
    with translation.override(order.language):
        return f"{settings.SITE_URL}{receipt_path(order, pdf=pdf)}"


# --------------------------------------------------------------------------- what it says


@dataclass(frozen=True)
class Line:
    label: str
    value: str
    mono: bool = False
    """A hash or an address: printed in full on one line."""


@dataclass(frozen=True)
class Section:
    title: str
    lines: list[Line] = field(default_factory=list)


@dataclass(frozen=True)
class Document:
    """A receipt as it reads, in one language: the page and the PDF lay it out."""

    receipt: Receipt
    language: str
    title: str
    number: str
    issued: str
    """"Date of issue: …" """
    issuer_title: str
    issuer: list[str]
    billed_to_title: str
    billed_to: list[str]
    sections: list[Section]
    note: str


def _when(moment: datetime | None) -> str:
    if moment is None:
        return "—"
    return f"{date_format(moment.astimezone(UTC), 'DATETIME_FORMAT')} UTC"


def _rate(value: Decimal) -> str:
    """The locked rate with every digit it was stored with, and at least cents."""
    exponent = Decimal(value).normalize().as_tuple().exponent
    places = max(2, -exponent if isinstance(exponent, int) else 2)
    return usd(value, places)


def _issuer() -> list[str]:
    lines = [settings.RECEIPT_ISSUER_NAME, *settings.RECEIPT_ISSUER_ADDRESS]
    if settings.RECEIPT_ISSUER_VAT_ID:
        lines.append(_("VAT id: %(vat_id)s") % {"vat_id": settings.RECEIPT_ISSUER_VAT_ID})
    return [line for line in lines if line]


def _billed_to(order: Order, billing: BillingDetails) -> list[str]:
    lines = [billing.organisation or order.organisation]
    lines += [order.contact_name, *billing.address.splitlines(), order.contact_email]
    if billing.vat_id:
        lines.append(_("VAT id: %(vat_id)s") % {"vat_id": billing.vat_id})
    return [line for line in lines if line]


def document(receipt: Receipt, language: str | None = None) -> Document:
    """What ``receipt`` says, in ``language`` (default: the order's)."""
    order = Order.objects.select_related("kind", "environment").get(pk=receipt.order_id)
    invoice = Invoice.objects.select_related("asset__chain").get(pk=receipt.invoice_id)
    language = language or order.language
    with translation.override(language):
        return _document(receipt, order, invoice, billing_of(order), language)


def _document(
    receipt: Receipt, order: Order, invoice: Invoice, billing: BillingDetails, language: str
) -> Document:
    asset, chain = invoice.asset, invoice.asset.chain
    symbol = asset.symbol
    transfers = list(
        invoice.transfers.filter(status=Transfer.STATUS_CONFIRMED).order_by(
            "block_number", "log_index"
        )
    )
    due = units(invoice.amount_due)
    received = units(invoice.amount_confirmed)
    booked = Section(
        _("What was booked"),
        [
            Line(_("Order"), order.reference),
            Line(
                _("Booked"),
                ngettext("%(lots)s lot of %(kind)s", "%(lots)s lots of %(kind)s", order.lot_count)
                % {"lots": order.lot_count, "kind": local_units(order.kind.name)},
            ),
            Line(
                _("Window"),
                _("%(start)s to %(end)s (%(days)s days)")
                % {
                    "start": _when(order.starts_at),
                    "end": _when(order.ends_at),
                    "days": order.window_days,
                },
            ),
            Line(_("Environment"), order.environment.name),
            Line(
                _("Price"),
                _("%(unit)s per lot × %(lots)s")
                % {"unit": usd(order.unit_price_usd), "lots": order.lot_count},
            ),
        ],
    )
    amounts = [
        Line(_("Total (USD)"), usd(invoice.usd_due)),
        Line(
            _("Paid in %(symbol)s") % {"symbol": symbol}, f"{coin(asset.from_units(due))} {symbol}"
        ),
        Line(
            _("Rate"),
            _("1 %(symbol)s = %(rate)s, locked when the invoice was made")
            % {"symbol": symbol, "rate": _rate(invoice.usd_per_unit)},
        ),
    ]
    if received != due:
        amounts.append(
            Line(_("Received"), f"{coin(asset.from_units(received))} {symbol}"),
        )
    if units(invoice.amount_to_refund):
        amounts.append(
            Line(
                _("To be refunded"),
                f"{coin(asset.from_units(units(invoice.amount_to_refund)))} {symbol}",
            )
        )
    payment = [
        Line(
            _("Network"),
            _("%(name)s (chain id %(id)s)") % {"name": chain.name, "id": chain.chain_id},
        ),
        Line(
            _("Token contract"),
            asset.contract_address or _("none: the network's own coin"),
            mono=bool(asset.contract_address),
        ),
        Line(_("Paid to"), invoice.deposit_address.address, mono=True),
    ]
    if transfers:
        payment.append(Line(_("Paid"), _when(max(t.block_time for t in transfers))))
    payment.append(Line(_("Settled"), _when(invoice.settled_at)))
    for number, transfer in enumerate(transfers, start=1):
        payment.append(
            Line(
                _("Transfer %(n)s") % {"n": number},
                _("%(amount)s, block %(block)s, %(when)s")
                % {
                    "amount": f"{coin(asset.from_units(units(transfer.amount)))} {symbol}",
                    "block": transfer.block_number,
                    "when": _when(transfer.block_time),
                },
            )
        )
        payment.append(Line(_("Transaction"), transfer.tx_hash, mono=True))
    if not transfers and asset.is_native:
        # The native coin is credited by the address's balance (coins a contract forwards
        # count too): no transfer is recorded; the hash named with "I've paid" is printed
        # once the chain showed that it pays this invoice.
        if invoice.claim_result == "pays_invoice" and invoice.claim_tx_hash:
            payment.append(Line(_("Transaction"), invoice.claim_tx_hash, mono=True))
        else:
            payment.append(
                Line(
                    _("Transaction"),
                    _("credited by the balance of the address it was paid to (no hash named)"),
                )
            )
    return Document(
        receipt=receipt,
        language=language,
        title=_("Receipt"),
        number=receipt.label,
        issued=_("Date of issue: %(when)s") % {"when": _when(receipt.issued_at)},
        issuer_title=_("From"),
        issuer=_issuer(),
        billed_to_title=_("Billed to"),
        billed_to=_billed_to(order, billing),
        sections=[
            booked,
            Section(_("Amount"), amounts),
            Section(_("Payment"), payment),
        ],
        note=_("Paid in full by crypto transfer, confirmed on-chain. Order %(reference)s.")
        % {"reference": order.reference},
    )


# --------------------------------------------------------------------------- the PDF


class FontMissing(ImproperlyConfigured):
    """The receipt's Unicode font is not installed (Debian: fonts-dejavu-core)."""


def _fonts() -> tuple[Path, Path]:
    regular = Path(settings.RECEIPT_FONT)
    if not regular.is_file():
        raise FontMissing(
            f"The receipt font {regular} is missing: install fonts-dejavu-core "
            "(scripts/system-packages.sh) or set RECEIPT_FONT to a TrueType font"
        )
    bold = regular.with_name(regular.stem + "-Bold" + regular.suffix)
    return regular, bold if bold.is_file() else regular


def render_pdf(doc: Document) -> bytes:
    """The receipt as an A4 PDF (fpdf2, set in a Unicode TrueType font: ü, é and × print)."""
    from fpdf import FPDF
    from fpdf.fonts import FontFace

    regular, bold = _fonts()
    pdf = FPDF(format="A4")
    pdf.set_margins(18, 18, 18)
    pdf.set_auto_page_break(True, margin=18)
    pdf.add_font("Receipt", "", str(regular))
    pdf.add_font("Receipt", "B", str(bold))
    pdf.set_title(f"{doc.title} {doc.number}")
    pdf.set_author(settings.RECEIPT_ISSUER_NAME)
    pdf.set_lang(doc.language)
    pdf.set_creation_date(doc.receipt.issued_at)
    pdf.add_page()
    width = pdf.epw

    pdf.set_font("Receipt", "B", 18)
    pdf.cell(width, 10, f"{doc.title} {doc.number}", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("Receipt", "", 10)
    pdf.cell(width, 6, doc.issued, new_x="LMARGIN", new_y="NEXT")
    pdf.ln(4)

    heads = (doc.issuer_title, doc.billed_to_title)
    top = pdf.get_y()
    bottom = top
    for column, (head, lines) in enumerate(zip(heads, (doc.issuer, doc.billed_to), strict=True)):
        pdf.set_xy(pdf.l_margin + column * width / 2, top)
        pdf.set_font("Receipt", "B", 10)
        pdf.cell(width / 2, 6, head, new_x="LEFT", new_y="NEXT")
        pdf.set_font("Receipt", "", 10)
        pdf.multi_cell(width / 2 - 4, 5, "\n".join(lines), new_x="LEFT", new_y="NEXT")
        if column == 0:
            bottom = pdf.get_y()
    pdf.set_xy(pdf.l_margin, max(bottom, pdf.get_y()) + 4)

    mono = FontFace(family="Receipt", size_pt=7.5)
    for section in doc.sections:
        pdf.set_font("Receipt", "B", 12)
        pdf.cell(width, 8, section.title, new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("Receipt", "", 9.5)
        with pdf.table(
            col_widths=(42, width - 42),
            first_row_as_headings=False,
            borders_layout="HORIZONTAL_LINES",
            line_height=5,
            padding=1,
        ) as table:
            for line in section.lines:
                row = table.row()
                row.cell(line.label)
                row.cell(line.value, style=mono if line.mono else None)
        pdf.ln(3)

    pdf.set_font("Receipt", "", 9)
    pdf.multi_cell(width, 5, doc.note, new_x="LMARGIN", new_y="NEXT")
    return bytes(pdf.output())
