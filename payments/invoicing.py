"""Invoices: what the payment panel offers, and the invoice an order gets in the coin chosen.

An order has one current invoice at a time; choosing a coin makes (or reuses) the invoice
in it, under the order's row lock, with its own deposit address and the exact amount due
at a locked rate. Every change of coin is a CoinChoice row and counts for the switch limit."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from payments import derivation, integrity
from payments.models import Asset, Chain, CoinChoice, Invoice
from payments.nodes import NodeClient, client_for
from payments.prices import PriceUnavailable, usd_per_unit
from reservations.errors import BookingRefused, RateLimited, refusal
from reservations.models import Order

log = logging.getLogger(__name__)


NATIVE_STEP = 10**12
"""Native amounts due are rounded up to 10⁻⁶ ETH, so they can be typed."""


OFFERED_KEY = "payments:offered-assets"
OFFERED_SECONDS = 15
PRICE_SECONDS = 120


def _price_key(asset: Asset) -> str:
    return f"payments:price-ok:{asset.pk}"


def offered_assets() -> list[Asset]:
    """What the payment panel offers now: every active stablecoin, and a native coin only
    while its price feed is fresh (the scanner checks it each cycle). Cached briefly."""
    offered: list[Asset] | None = cache.get(OFFERED_KEY)
    if offered is None:
        active = Asset.objects.filter(is_active=True, chain__is_active=True).select_related("chain")
        offered = [
            a
            for a in active
            if (not a.is_native or cache.get(_price_key(a))) and not integrity.known_mismatch(a)
        ]
        cache.set(OFFERED_KEY, offered, OFFERED_SECONDS)
    return offered


def refresh_prices(chain: Chain) -> None:
    """Check each native asset's feed; a stale or absurd one stops the coin being offered."""
    natives = [a for a in chain.assets.filter(is_active=True) if a.is_native]
    if not natives:
        return
    client = client_for(chain)
    for asset in natives:
        try:
            cache.set(_price_key(asset), str(usd_per_unit(asset, client)), PRICE_SECONDS)
        except PriceUnavailable as exc:
            cache.delete(_price_key(asset))
            log.warning("coin not offered", extra={"asset": str(asset), "reason": str(exc)})
    cache.delete(OFFERED_KEY)


SWITCH_WINDOW = timedelta(hours=1)
"""The window PAYMENT_COIN_SWITCHES_PER_HOUR counts coin choices in."""


@dataclass(frozen=True)
class _Priced:
    """What a new invoice (or one in the native coin again) needs from the chain."""

    client: NodeClient
    rate: Decimal
    head: int


def create_invoice(order: Order, asset: Asset, *, client: NodeClient | None = None) -> Invoice:
    """The order's invoice in ``asset``, made the order's current one.

    The coin of the current invoice again: that invoice, unchanged (no switch, nothing asked
    of the chain). A coin this order used before: that invoice again — its address, amount
    and locked rate — while it is still payable (the native coin only while its price feed
    answers). Only otherwise a fresh deposit address and the exact amount due.

    Every change of coin is a CoinChoice row (the audit trail) and counts for the limit
    PAYMENT_COIN_SWITCHES_PER_HOUR (RateLimited); at most PAYMENT_OPEN_INVOICES_PER_ORDER
    invoices of an order are payable at once. Both are counted under the order's row lock, so
    concurrent switches cannot pass them, and a refused switch changes nothing. A superseded
    invoice stays watched until its monitoring window ends: money sent to it is not lost.

    Also refuses (BookingRefused) when the order no longer awaits payment, when the asset or
    its chain is not active (whatever the form offered), when a payment to the current invoice
    is already under way, when the asset's configuration contradicts its contract (decimals,
    symbol, chain id: integrity.check_before_invoicing) or when it cannot be priced.
    """
    asset = Asset.objects.select_related("chain").get(pk=asset.pk)  # as configured now
    chosen = _choose(order, asset, priced=None)
    if chosen is not None:
        return chosen
    client = client or client_for(asset.chain)
    try:
        integrity.check_before_invoicing(asset, client)
    except integrity.AssetMismatch:
        cache.delete(OFFERED_KEY)
        misconfigured = ValidationError(integrity.ASSET_MISCONFIGURED, code="asset_misconfigured")
        raise BookingRefused({"asset": [misconfigured]}) from None
    try:
        rate = usd_per_unit(asset, client)
    except PriceUnavailable:
        raise BookingRefused({"asset": [refusal("asset_unpriced")]}) from None
    chosen = _choose(order, asset, priced=_Priced(client, rate, client.block_number()))
    assert chosen is not None
    return chosen


def _choose(order: Order, asset: Asset, *, priced: _Priced | None) -> Invoice | None:
    """One locked decision of create_invoice; None: it needs ``priced`` (nothing changed)."""
    now = timezone.now()
    with transaction.atomic():
        # Locks: the order's row, then (in new_deposit_address) the key's index space.
        locked = Order.objects.select_for_update().get(pk=order.pk)
        if locked.status != Order.STATUS_AWAITING_PAYMENT:
            raise BookingRefused({"asset": [refusal("not_awaiting_payment")]})
        if not Asset.objects.filter(pk=asset.pk, is_active=True, chain__is_active=True).exists():
            raise BookingRefused({"asset": [refusal("invalid_choice")]})
        invoices = Invoice.objects.filter(order=locked)
        current = invoices.filter(is_current=True).first()
        if current is not None:
            replaceable = current.amount_seen == 0 and current.status in (
                Invoice.STATUS_NEW,
                Invoice.STATUS_EXPIRED,
            )
            if not replaceable:
                raise BookingRefused({"asset": [refusal("payment_under_way")]})
            if (
                current.asset_id == asset.pk
                and current.status == Invoice.STATUS_NEW
                and current.expires_at > now
            ):
                return current
        _check_switch_limit(locked, now)
        earlier = (
            invoices.filter(
                asset=asset,
                status=Invoice.STATUS_NEW,
                amount_seen=0,
                expires_at__gt=now,
                usd_due=locked.total_usd,
            )
            .exclude(is_current=True)
            .order_by("-created_at")
            .first()
        )
        if earlier is None:
            payable = invoices.filter(status__in=Invoice.OPEN_STATUSES, expires_at__gt=now)
            most = settings.PAYMENT_OPEN_INVOICES_PER_ORDER
            if payable.count() >= most:
                raise BookingRefused({"asset": [refusal("too_many_open_invoices", count=most)]})
        if priced is None and (earlier is None or asset.is_native):
            return None  # to the chain first, outside the lock; decided again after
        if current is not None:
            Invoice.objects.filter(pk=current.pk).update(is_current=False)
        if earlier is not None:
            Invoice.objects.filter(pk=earlier.pk).update(is_current=True)
            earlier.is_current = True
            chosen = earlier
        else:
            assert priced is not None
            chosen = _new_invoice(locked, asset, priced)
        CoinChoice.objects.create(order=locked, invoice=chosen, reused=earlier is not None)
        return chosen


def _check_switch_limit(order: Order, now: datetime) -> None:
    """Refuse (RateLimited) a coin choice beyond PAYMENT_COIN_SWITCHES_PER_HOUR; the caller
    holds the order's row lock."""
    recent = CoinChoice.objects.filter(order=order, created_at__gt=now - SWITCH_WINDOW)
    times = list(recent.order_by("-created_at").values_list("created_at", flat=True))
    limit = settings.PAYMENT_COIN_SWITCHES_PER_HOUR
    if len(times) < limit:
        return
    # Allowed again once the oldest of the last `limit` choices leaves the window.
    retry_after = max(1, math.ceil((times[limit - 1] + SWITCH_WINDOW - now).total_seconds()))
    raise RateLimited(
        {"asset": [refusal("too_many_switches", minutes=math.ceil(retry_after / 60))]},
        retry_after=retry_after,
    )


def _new_invoice(order: Order, asset: Asset, priced: _Priced) -> Invoice:
    address = derivation.new_deposit_address(asset.chain)
    units = Decimal(order.total_usd) / priced.rate * (Decimal(10) ** asset.decimals)
    due = int(units.to_integral_value(rounding="ROUND_CEILING"))
    if asset.is_native:
        due = math.ceil(due / NATIVE_STEP) * NATIVE_STEP
    head = priced.head
    starting = 0
    if asset.is_native:
        starting = priced.client.balances([address.address], [head])[(address.address, head)]
    expires_at = order.hold_expires_at
    if asset.invoice_minutes:
        expires_at = min(expires_at, timezone.now() + timedelta(minutes=asset.invoice_minutes))
    return Invoice.objects.create(
        order=order,
        asset=asset,
        deposit_address=address,
        amount_due=Decimal(due),
        usd_due=order.total_usd,
        usd_per_unit=priced.rate,
        created_block=head,
        starting_balance=Decimal(starting),
        expires_at=expires_at,
        monitor_until=expires_at + timedelta(hours=settings.PAYMENT_MONITOR_HOURS),
    )
