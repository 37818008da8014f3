"""Invoices: made for an order, claimed ("I've paid"), verified and scanned on-chain.

What counts as payment is decided here and only here: a Transfer log of the invoice asset's
own contract (or, for the native coin, the address's balance) into the invoice's own
address, in a block at or after the invoice was made, on the configured chain, with enough
confirmations, in blocks that are still canonical. Each transfer is a row keyed by (chain,
tx hash, log index): the same transfer can never be credited twice.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from payments import derivation
from payments.models import Asset, Chain, CoinChoice, Invoice, Transfer
from payments.prices import PriceUnavailable, usd_per_unit
from payments.rpc import RpcClient, RpcError, RpcUnavailable
from reservations import services as reservations
from reservations.errors import BookingRefused, RateLimited, refusal
from reservations.models import Order

log = logging.getLogger(__name__)

TX_HASH = re.compile(r"^0x[0-9a-fA-F]{64}$")
ADDRESS_CHUNK = 500
"""Deposit addresses per eth_getLogs OR filter (and per balance batch)."""
NATIVE_STEP = 10**12
"""Native amounts due are rounded up to 10⁻⁶ ETH, so they can be typed."""


class ChainMismatch(Exception):
    """The RPC node serves another chain than the configuration says: it is not used."""


def client_for(chain: Chain) -> RpcClient:
    """A client for ``chain`` after checking the node serves that chain id."""
    client = RpcClient(chain.rpc_url, timeout=settings.PAYMENT_RPC_TIMEOUT)
    served = client.chain_id()
    if served != chain.chain_id:
        raise ChainMismatch(f"{chain.rpc_url} serves chain {served}, not {chain.chain_id}")
    return client


def confirmed_height(chain: Chain, client: RpcClient, head: int) -> int:
    if chain.use_finalized_tag:
        return client.finalized_block_number()
    return head - chain.confirmations + 1


# --------------------------------------------------------------------------- invoices


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
        offered = [a for a in active if not a.is_native or cache.get(_price_key(a))]
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

    client: RpcClient
    rate: Decimal
    head: int


def create_invoice(order: Order, asset: Asset, *, client: RpcClient | None = None) -> Invoice:
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

    Also refuses (BookingRefused) when the order no longer awaits payment, when a payment to
    the current invoice is already under way, or when the asset cannot be priced.
    """
    chosen = _choose(order, asset, priced=None)
    if chosen is not None:
        return chosen
    client = client or client_for(asset.chain)
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
        # Locks: the order's row, then (in new_deposit_address) the chain's row.
        locked = Order.objects.select_for_update().get(pk=order.pk)
        if locked.status != Order.STATUS_AWAITING_PAYMENT:
            raise BookingRefused({"asset": [refusal("not_awaiting_payment")]})
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


# --------------------------------------------------------------------------- claims

VERIFICATION_LEASE = timedelta(minutes=10)
"""A verification queued longer than this was lost (a flushed broker): beat queues it again."""
VERIFICATION_MAX_PAUSE = timedelta(minutes=5)
VERIFICATION_BATCH = 200
"""Verifications beat queues per cycle at most (the earliest due first)."""


def claim_payment(invoice: Invoice, tx_hash: str = "") -> Invoice:
    """ "I've paid": record the claim and have the invoice's verification check it.

    Claims coalesce: an invoice has at most one verification queued or running at a time
    (``verification_queued_at``, set under the invoice's row lock), however many claims
    arrive together. A later claim is recorded (its hash replaces the earlier one) and
    brings the next check forward, but never nearer than PAYMENT_CLAIM_CHECK_SECONDS after
    the last one; the pending verification, or the next one beat queues, checks it.

    A malformed hash is refused with a clear error and nothing changes. The claim itself
    credits nothing: only what the chain shows does.
    """
    tx_hash = tx_hash.strip().lower()
    if tx_hash and not TX_HASH.match(tx_hash):
        raise BookingRefused({"tx_hash": [refusal("invalid_tx_hash")]})
    now = timezone.now()
    gap = timedelta(seconds=settings.PAYMENT_CLAIM_CHECK_SECONDS)
    with transaction.atomic():
        # Locks: the invoice's row (claims of one invoice queue up here).
        locked = Invoice.objects.select_for_update().get(pk=invoice.pk)
        changes: dict[str, object] = {"claimed_at": now}
        if tx_hash and tx_hash != locked.claim_tx_hash:
            changes.update(claim_tx_hash=tx_hash, claim_result="")
        watched = (
            locked.status not in (Invoice.STATUS_SETTLED, Invoice.STATUS_INVALID)
            and now < locked.monitor_until
        )
        send = False
        if watched:
            due = (
                now if locked.claim_checked_at is None else max(now, locked.claim_checked_at + gap)
            )
            if locked.verification_due_at is not None:
                due = min(due, locked.verification_due_at)
            changes["verification_due_at"] = due
            send = due <= now and _verification_free(locked, now)
            if send:
                changes["verification_queued_at"] = now
        Invoice.objects.filter(pk=locked.pk).update(**changes)
        if send:
            transaction.on_commit(lambda: _send_verification(invoice.pk, now))
    invoice.refresh_from_db()
    return invoice


def _send_verification(invoice_id: int, queued_at: datetime) -> None:
    """Queue the verification; with the broker away, free it again so that beat's
    dispatch_verifications queues it once the broker is back (the claim stands)."""
    from payments.tasks import verify_invoice

    try:
        verify_invoice.delay(invoice_id)
    except Exception:  # any broker failure
        Invoice.objects.filter(pk=invoice_id, verification_queued_at=queued_at).update(
            verification_queued_at=None
        )
        log.warning("verification not queued; beat queues it", extra={"invoice": invoice_id})


def _verification_free(invoice: Invoice, now: datetime) -> bool:
    queued = invoice.verification_queued_at
    return queued is None or queued < now - VERIFICATION_LEASE


def verify_claim(invoice_id: int) -> str:
    """The invoice's one pending verification (the ``verify_invoice`` task): check the
    claimed transaction and scan the invoice's address now, then say when to look again —
    pauses growing with the time since the claim, up to 5 minutes, until it settles or its
    monitoring window ends. The next check is queued by beat (dispatch_verifications), so a
    lost message loses nothing; the scanner watches every open invoice anyway."""
    now = timezone.now()
    with transaction.atomic():
        # Locks: the invoice's row.
        locked = Invoice.objects.select_for_update().get(pk=invoice_id)
        if locked.verification_queued_at is None:
            return locked.status  # a second delivery of a message already done
        # Taken: a claim arriving from now on sets a new due time for after this check.
        Invoice.objects.filter(pk=invoice_id).update(verification_due_at=None)
    invoice = Invoice.objects.select_related("asset__chain", "deposit_address").get(pk=invoice_id)
    finished = (
        invoice.status in (Invoice.STATUS_SETTLED, Invoice.STATUS_INVALID)
        or now > invoice.monitor_until
    )
    if not finished:
        try:
            client = client_for(invoice.asset.chain)
            result = check_claim(invoice, client)
            if result:
                Invoice.objects.filter(pk=invoice.pk, claim_tx_hash=invoice.claim_tx_hash).update(
                    claim_result=result
                )
            scan_chain(invoice.asset.chain, client=client, only=[invoice.pk])
        except (RpcUnavailable, RpcError, ChainMismatch) as exc:
            Invoice.objects.filter(pk=invoice.pk).update(check_delayed=True)
            log.warning("verification delayed", extra={"invoice": invoice.pk, "error": str(exc)})
    gap = timedelta(seconds=settings.PAYMENT_CLAIM_CHECK_SECONDS)
    with transaction.atomic():
        locked = Invoice.objects.select_for_update().get(pk=invoice_id)
        due: datetime | None = None
        if not finished and locked.status not in (Invoice.STATUS_SETTLED, Invoice.STATUS_INVALID):
            since_claim = now - (locked.claimed_at or now)
            due = now + min(VERIFICATION_MAX_PAUSE, max(gap, since_claim))
            if locked.verification_due_at is not None:  # a claim came in meanwhile
                due = max(now + gap, min(due, locked.verification_due_at))
            if due > locked.monitor_until:
                due = None
        Invoice.objects.filter(pk=invoice_id).update(
            verification_queued_at=None, verification_due_at=due, claim_checked_at=now
        )
        return locked.status


def dispatch_verifications(now: datetime | None = None) -> int:
    """Beat: queue the verifications that are due (one per invoice at most, the conditional
    update says which), and again those whose message was lost. Returns how many."""
    from payments.tasks import verify_invoice

    now = now or timezone.now()
    free = Q(verification_queued_at__isnull=True) | Q(
        verification_queued_at__lt=now - VERIFICATION_LEASE
    )
    due = Invoice.objects.filter(free, verification_due_at__lte=now)
    sent = 0
    for pk in due.order_by("verification_due_at").values_list("pk", flat=True)[:VERIFICATION_BATCH]:
        if due.filter(pk=pk).update(verification_queued_at=now):
            verify_invoice.delay(pk)
            sent += 1
    return sent


# --------------------------------------------------------------------------- scanning


@dataclass
class ScanReport:
    invoices: int = 0
    transfers_recorded: int = 0
    settled: list[int] = field(default_factory=list)
    rpc_requests: int = 0


def open_invoices(chain: Chain, now: datetime | None = None) -> list[Invoice]:
    now = now or timezone.now()
    return list(
        Invoice.objects.filter(asset__chain=chain, monitor_until__gt=now)
        .exclude(status__in=(Invoice.STATUS_SETTLED, Invoice.STATUS_INVALID))
        .select_related("asset", "deposit_address", "order")
    )


def scan_chain(
    chain: Chain, *, client: RpcClient | None = None, only: list[int] | None = None
) -> ScanReport:
    """One scan cycle over the chain's open invoices (or just ``only``).

    RPC cost: one eth_blockNumber, one eth_getLogs per token per chunk of addresses, one
    balance batch per chunk of native addresses, one block batch to check that the blocks
    of confirmed transfers are still canonical — never one call per invoice.
    Raises RpcUnavailable (the invoices are marked "checking is delayed").
    """
    report = ScanReport()
    invoices = open_invoices(chain)
    if only is not None:
        invoices = [i for i in invoices if i.pk in only]
    report.invoices = len(invoices)
    try:
        client = client or client_for(chain)
        head = client.block_number()
        confirmed = confirmed_height(chain, client, head)
        by_asset: dict[int, list[Invoice]] = {}
        for invoice in invoices:
            by_asset.setdefault(invoice.asset_id, []).append(invoice)
        native: dict[int, tuple[int, int]] = {}
        touched: set[int] = set()
        for group in by_asset.values():
            asset = group[0].asset
            if asset.is_native:
                native.update(_scan_native(client, group, head, confirmed))
            else:
                recorded, changed = _scan_token(client, chain, asset, group, head, confirmed)
                report.transfers_recorded += recorded
                touched |= changed
    except (RpcUnavailable, RpcError, ChainMismatch) as exc:
        # The page says "checking is delayed"; the next cycle starts from the database again.
        Invoice.objects.filter(pk__in=[i.pk for i in invoices]).update(check_delayed=True)
        record_scan_failure(chain, exc)
        raise
    now = timezone.now()
    scanned: dict[str, object] = {"scanned_block": head}
    if only is None:  # a full cycle: every open invoice of the chain was looked at
        scanned.update(last_scan_at=now, last_scan_error="")
    Chain.objects.filter(pk=chain.pk).update(**scanned)
    for invoice in invoices:
        # Only invoices whose state can have changed: new transfers, other balances, a
        # pending payment, a deadline passed, a delay to clear, or a direct request.
        amounts = native.get(invoice.pk)
        if (
            only is not None
            or invoice.pk in touched
            or invoice.status == Invoice.STATUS_PROCESSING
            or invoice.check_delayed
            or (invoice.status == Invoice.STATUS_NEW and now > invoice.expires_at)
            or (
                amounts is not None
                and amounts != (int(invoice.amount_seen), int(invoice.amount_confirmed))
            )
        ) and recompute(invoice.pk, native=amounts):
            report.settled.append(invoice.pk)
    report.rpc_requests = client.requests_made
    return report


def record_scan_failure(chain: Chain, exc: Exception) -> None:
    """What the chain's last failed scan said, for the operator's desk (the delay itself is
    read from ``last_scan_at``, the last success: see payments.panel.delayed_since)."""
    Chain.objects.filter(pk=chain.pk).update(
        last_scan_error=f"{type(exc).__name__}: {exc}"[:300], last_scan_error_at=timezone.now()
    )


def _chunks(items: list[Invoice]) -> list[list[Invoice]]:
    return [items[i : i + ADDRESS_CHUNK] for i in range(0, len(items), ADDRESS_CHUNK)]


def _scan_token(
    client: RpcClient,
    chain: Chain,
    asset: Asset,
    invoices: list[Invoice],
    head: int,
    confirmed: int,
) -> tuple[int, set[int]]:
    """Record Transfer logs of the asset's own contract into the invoices' addresses.
    Returns how many were recorded and the invoices whose transfers changed."""
    # From the oldest open invoice's first block: every transfer that can count is in range,
    # so one that the chain no longer shows has been removed by a reorganisation.
    from_block = min(i.created_block for i in invoices)
    found: list[Transfer] = []
    if from_block > head:  # a chain younger than our invoices (a reset dev chain)
        return 0, set()
    for chunk in _chunks(invoices):
        by_address = {i.deposit_address.address.lower(): i for i in chunk}
        logs = client.token_transfers(asset.contract_address, list(by_address), from_block, head)
        blocks = client.blocks(sorted({entry.block_number for entry in logs})) if logs else {}
        for entry in logs:
            invoice = by_address.get(entry.to_address)
            if invoice is None or entry.address != asset.contract_address.lower():
                continue  # another contract (a fake token) or another address: not payment
            if entry.block_number < invoice.created_block:
                continue  # older than the invoice
            block = blocks.get(entry.block_number)
            if block is None or block["hash"] != entry.block_hash:
                continue  # the block changed while we looked: the next cycle sees it settled
            status = (
                Transfer.STATUS_CONFIRMED
                if entry.block_number <= confirmed
                else Transfer.STATUS_SEEN
            )
            found.append(
                Transfer(
                    chain=chain,
                    tx_hash=entry.tx_hash,
                    log_index=entry.log_index,
                    invoice=invoice,
                    from_address=entry.from_address,
                    amount=Decimal(entry.amount),
                    block_number=entry.block_number,
                    block_hash=entry.block_hash,
                    block_time=datetime.fromtimestamp(int(block["timestamp"], 16), tz=UTC),
                    status=status,
                )
            )
    # One upsert on the (chain, tx hash, log index) key: concurrent scans cannot both insert
    # a transfer, and a re-included transfer takes its new block.
    Transfer.objects.bulk_create(
        found,
        update_conflicts=True,
        unique_fields=["chain", "tx_hash", "log_index"],
        update_fields=["block_number", "block_hash", "block_time", "status"],
    )
    # A transfer recorded in the scanned range that the chain no longer shows was removed by
    # a reorganisation: it is orphaned and stops counting.
    kept = {(t.tx_hash, t.log_index) for t in found}
    changed = {t.invoice_id for t in found}
    for transfer in Transfer.objects.filter(invoice__in=invoices).exclude(
        status=Transfer.STATUS_ORPHANED
    ):
        if (transfer.tx_hash, transfer.log_index) not in kept:
            Transfer.objects.filter(pk=transfer.pk).update(status=Transfer.STATUS_ORPHANED)
            changed.add(transfer.invoice_id)
    return len(found), changed


def _scan_native(
    client: RpcClient, invoices: list[Invoice], head: int, confirmed: int
) -> dict[int, tuple[int, int]]:
    """The native coin is credited by balance, so coins sent by a contract count too.
    Returns (seen, confirmed) amounts per invoice id; the balance at the latest block, and
    at the confirmed height (re-read every cycle: a reorganisation that removes a payment
    lowers it again)."""
    amounts: dict[int, tuple[int, int]] = {}
    for chunk in _chunks(invoices):
        addresses = [i.deposit_address.address for i in chunk]
        found = client.balances(addresses, [confirmed, head])
        for invoice in chunk:
            address = invoice.deposit_address.address
            start = int(invoice.starting_balance)
            amounts[invoice.pk] = (
                max(0, found[(address, head)] - start),
                max(0, found[(address, confirmed)] - start),
            )
    return amounts


# --------------------------------------------------------------------------- states


def recompute(
    invoice_id: int, *, native: tuple[int, int] | None = None, now: datetime | None = None
) -> bool:
    """Derive the invoice's state from what the chain showed; True if this call settled it.

    ``native``: (seen, confirmed) amounts a native-coin scan just read. Settling is a
    conditional update (status not yet settled), done once, and moves the order to "paid"
    in the same transaction. A payment that arrived after expiry — or after the order's
    hold was released — is "paid_late": the order is left to the operator (accept if
    capacity remains, or refund).
    """
    now = now or timezone.now()
    order_id = Invoice.objects.values_list("order_id", flat=True).get(pk=invoice_id)
    with transaction.atomic():
        # Locks: the order's row, then the invoice's (the order create_invoice takes too).
        order = Order.objects.select_for_update().get(pk=order_id)
        invoice = Invoice.objects.select_for_update().select_related("asset").get(pk=invoice_id)
        if invoice.status in (Invoice.STATUS_SETTLED, Invoice.STATUS_INVALID):
            return False
        if invoice.asset.is_native:
            seen, confirmed = (
                (Decimal(native[0]), Decimal(native[1]))
                if native is not None
                else (invoice.amount_seen, invoice.amount_confirmed)
            )
            # First noticed after expiry with nothing seen before: late.
            late = seen > 0 and (
                invoice.exception == Invoice.EXCEPTION_PAID_LATE
                or (now > invoice.expires_at and invoice.amount_seen == 0)
            )
        else:
            counted = list(invoice.transfers.exclude(status=Transfer.STATUS_ORPHANED))
            seen = sum((t.amount for t in counted), Decimal(0))
            confirmed = sum(
                (t.amount for t in counted if t.status == Transfer.STATUS_CONFIRMED), Decimal(0)
            )
            late = any(t.block_time > invoice.expires_at for t in counted) and not any(
                t.block_time <= invoice.expires_at for t in counted
            )
        due = invoice.amount_due
        if confirmed >= due and not late:
            status = Invoice.STATUS_SETTLED
            exception = Invoice.EXCEPTION_PAID_OVER if confirmed > due else ""
        elif seen > 0 and late:
            status, exception = Invoice.STATUS_EXPIRED, Invoice.EXCEPTION_PAID_LATE
        elif seen > 0:
            status = Invoice.STATUS_PROCESSING
            exception = Invoice.EXCEPTION_PAID_PARTIAL if seen < due else ""
        elif now > invoice.expires_at:
            status, exception = Invoice.STATUS_EXPIRED, ""
        else:
            status, exception = Invoice.STATUS_NEW, ""
        if status == Invoice.STATUS_SETTLED:
            symbol = invoice.asset.symbol
            paid = reservations.mark_paid(
                order,
                actor=reservations.system("payment scanner"),
                reason=f"invoice {invoice.pk}: {invoice.asset.from_units(confirmed)} {symbol}",
            )
            if not paid:  # the hold ended meanwhile: the operator decides
                status, exception = Invoice.STATUS_EXPIRED, Invoice.EXCEPTION_PAID_LATE
        Invoice.objects.filter(pk=invoice.pk).update(
            status=status,
            exception=exception,
            amount_seen=seen,
            amount_confirmed=confirmed,
            last_checked_at=now,
            check_delayed=False,
            settled_at=now if status == Invoice.STATUS_SETTLED else None,
        )
    if status == Invoice.STATUS_SETTLED:
        log.info("invoice settled", extra={"invoice": invoice.pk, "order": order.reference})
        from provisioning.services import auto_approve

        auto_approve(order)
    return status == Invoice.STATUS_SETTLED


def accept_late_payment(invoice: Invoice, *, actor: reservations.Actor) -> None:
    """The operator accepts a payment that arrived after expiry: the order is paid — its
    window booked again if the lots are still free (else LotUnavailable: refund instead)."""
    with transaction.atomic():
        # Locks: the order's row, then the invoice's.
        order = Order.objects.select_for_update().get(pk=invoice.order_id)
        locked = Invoice.objects.select_for_update().get(pk=invoice.pk)
        if (
            locked.status != Invoice.STATUS_EXPIRED
            or locked.exception != Invoice.EXCEPTION_PAID_LATE
            or locked.amount_confirmed < locked.amount_due
        ):
            raise BookingRefused({"invoice": [refusal("not_a_late_payment")]})
        reason = f"late payment accepted (invoice {locked.pk})"
        if order.status == Order.STATUS_AWAITING_PAYMENT:
            reservations.mark_paid(order, actor=actor, reason=reason)
        else:
            reservations.reinstate_paid(order, actor=actor, reason=reason)
        Invoice.objects.filter(pk=locked.pk).update(
            status=Invoice.STATUS_SETTLED, settled_at=timezone.now()
        )


def mark_refunded(invoice: Invoice, *, actor: reservations.Actor, reason: str) -> None:
    """The operator refunded what reached an expired invoice (paid late, or partly) from the
    operator's wallet: the invoice is closed (invalid) and the order's history says why."""
    if not reason.strip():
        raise BookingRefused({"reason": [refusal("required")]})
    with transaction.atomic():
        changed = Invoice.objects.filter(
            pk=invoice.pk, status=Invoice.STATUS_EXPIRED, amount_seen__gt=0
        ).update(status=Invoice.STATUS_INVALID)
        if not changed:
            raise BookingRefused({"invoice": [refusal("nothing_to_refund")]})
        reservations.record_note(invoice.order, actor=actor, reason=f"refunded: {reason}")


def check_claim(invoice: Invoice, client: RpcClient) -> str:
    """What the claimed transaction shows, in words for the researcher (empty: no claim)."""
    if not invoice.claim_tx_hash:
        return ""
    receipt = client.receipt(invoice.claim_tx_hash)
    if receipt is None:
        return "not_found"
    if int(receipt.get("status", "0x0"), 16) != 1:
        return "reverted"
    address = invoice.deposit_address.address.lower()
    asset = invoice.asset
    if asset.is_native:
        return "pays_invoice" if (receipt.get("to") or "").lower() == address else "unrelated"
    for entry in receipt.get("logs", []):
        topics = entry.get("topics", [])
        if (
            entry.get("address", "").lower() == asset.contract_address.lower()
            and len(topics) == 3
            and topics[2][-40:].lower() == address[2:]
        ):
            return "pays_invoice"
    return "unrelated"
