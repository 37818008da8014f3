"""What the order page's payment panel shows, computed from the database alone (no RPC
on page views: the scanner keeps the figures fresh)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from functools import lru_cache

import segno
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from payments.invoicing import OFFERED_SECONDS
from payments.models import Asset, Chain, Invoice, Transfer
from payments.networks import PRESETS


@dataclass(frozen=True)
class Panel:
    invoice: Invoice
    amount_due: Decimal
    amount_seen: Decimal
    outstanding: Decimal
    """What is still to pay (the amount due less what arrived): what the amount line, its
    Copy button, the QR code and the wallet link ask for."""
    to_refund: Decimal
    claim_amount: Decimal | None
    confirmations: int
    confirmations_needed: int
    qr_svg: str
    uri: str
    """The EIP-681 request for what is still to pay (the QR code's content, "Open in wallet")."""
    fee_coin: str
    """The chain's own coin, which pays the network fee (a token transfer needs some)."""
    seconds_left: int
    """Until the invoice's deadline, as of this rendering (0 once past)."""
    delayed_since: datetime | None
    """Since when checking is delayed (None: it is not); see ``delayed_since``."""

    @property
    def symbol(self) -> str:
        return self.invoice.asset.symbol

    @property
    def partly_paid(self) -> bool:
        """Some money arrived, not all of it, and the invoice still takes the rest."""
        return (
            self.invoice.status in Invoice.OPEN_STATUSES
            and self.invoice.amount_seen > 0
            and self.invoice.amount_outstanding > 0
        )

    @property
    def asks_for_payment(self) -> bool:
        return asks_for_payment(self.invoice)


def asks_for_payment(invoice: Invoice) -> bool:
    """The invoice is open and something is still to pay: the amount, address, QR code and
    wallet link are shown (a payment in full that is confirming asks for nothing)."""
    return invoice.status in Invoice.OPEN_STATUSES and invoice.amount_outstanding > 0


def payment_uri(invoice: Invoice) -> str:
    """EIP-681: what a wallet scanning the QR code (or following "Open in wallet") should
    pay — what is still due, in exact base units, so that a researcher who paid part of it
    is never asked for the whole amount again."""
    asset = invoice.asset
    chain_id = asset.chain.chain_id
    address = invoice.deposit_address.address
    remaining = int(invoice.amount_outstanding)
    if asset.is_native:
        return f"ethereum:{address}@{chain_id}?value={remaining}"
    return (
        f"ethereum:{asset.contract_address}@{chain_id}/transfer"
        f"?address={address}&uint256={remaining}"
    )


def fee_coin(chain: Chain) -> str:
    """The coin a transfer's network fee is paid in on ``chain``: its preset's native coin,
    else the native coin configured on it (the dev chain's ETH), else ETH."""
    for preset in PRESETS.values():
        if preset.chain_id == chain.chain_id:
            return preset.native_symbol
    key = f"payments:fee-coin:{chain.pk}"
    symbol: str | None = cache.get(key)
    if symbol is None:
        native = Asset.objects.filter(chain=chain, contract_address="").values_list("symbol")
        symbol = next((found for (found,) in native[:1]), "ETH")
        cache.set(key, symbol, OFFERED_SECONDS)
    return symbol


def confirmations(invoice: Invoice) -> int:
    """Confirmations of the invoice's latest transfer, as of the scanner's last look."""
    chain = invoice.asset.chain
    if invoice.amount_seen == 0:
        return 0  # nothing arrived (or all of it orphaned): no transfer to count
    head = chain.scanned_block or invoice.created_block
    counted = invoice.transfers.exclude(status=Transfer.STATUS_ORPHANED)
    latest = max((t.block_number for t in counted), default=None)
    found = 0 if latest is None else max(0, head - latest + 1)
    return min(found, chain.confirmations)


def delayed_since(invoice: Invoice, now: datetime | None = None) -> datetime | None:
    """Since when this invoice's checking is delayed, or None while it is on time.

    Delayed: the invoice is still watched and its chain's last successful scan of every
    open invoice (``Chain.last_scan_at``; the invoice's creation counts as one, it read the
    chain's head) is older than PAYMENT_CHECK_DELAYED_SECONDS — whatever the cause: a node
    that does not answer or answers errors, or no scan at all (worker, beat or broker down).
    A failed check of this very invoice says so at once (``check_delayed``)."""
    if invoice.status in (Invoice.STATUS_SETTLED, Invoice.STATUS_INVALID):
        return None
    now = now or timezone.now()
    if now >= invoice.monitor_until:
        return None
    chain = invoice.asset.chain
    last_ok = max(filter(None, (chain.last_scan_at, invoice.created_at)))
    if now - last_ok > timedelta(seconds=settings.PAYMENT_CHECK_DELAYED_SECONDS):
        return last_ok
    return last_ok if invoice.check_delayed else None


@lru_cache(maxsize=512)
def qr_svg(uri: str) -> str:
    """The QR code of ``uri`` as inline SVG. A pure function of the request it encodes (an
    invoice's address and what is still due), so it is made once per process and request,
    not on every view of the page (making one costs ~30 ms)."""
    return str(segno.make(uri, error="m").svg_inline(scale=4, dark="#1b1d22", light="#ffffff"))


def panel_for(invoice: Invoice, now: datetime | None = None) -> Panel:
    now = now or timezone.now()
    asset = invoice.asset
    chain = asset.chain
    uri = payment_uri(invoice)
    asks = asks_for_payment(invoice)
    return Panel(
        invoice=invoice,
        amount_due=asset.from_units(invoice.amount_due),
        amount_seen=asset.from_units(invoice.amount_seen),
        outstanding=asset.from_units(invoice.amount_outstanding),
        to_refund=asset.from_units(invoice.amount_to_refund),
        claim_amount=(
            None if invoice.claim_amount is None else asset.from_units(invoice.claim_amount)
        ),
        confirmations=confirmations(invoice),
        confirmations_needed=chain.confirmations,
        qr_svg=qr_svg(uri) if asks else "",  # shown only while it asks for payment
        uri=uri,
        fee_coin="" if asset.is_native or not asks else fee_coin(chain),
        seconds_left=max(0, int((invoice.expires_at - now).total_seconds())),
        delayed_since=delayed_since(invoice, now),
    )
