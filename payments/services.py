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
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone

from payments import derivation, integrity
from payments.models import Asset, Chain, CoinChoice, Invoice, Transfer, units
from payments.nodes import ChainMismatch, NodeClient, Nodes
from payments.prices import PriceUnavailable, usd_per_unit
from payments.rpc import (
    TRANSFER_TOPIC,
    Log,
    LogFilter,
    RangeTooLarge,
    RpcClient,
    RpcError,
    RpcUnavailable,
)
from reservations import services as reservations
from reservations.errors import BookingRefused, RateLimited, refusal
from reservations.models import Order

log = logging.getLogger(__name__)

TX_HASH = re.compile(r"^0x[0-9a-fA-F]{64}$")
ADDRESS_CHUNK = 500
"""Deposit addresses per eth_getLogs OR filter."""
LOG_ADDRESSES_PER_REQUEST = 5000
"""Deposit addresses in one batched eth_getLogs request at most (about 350 kB of JSON)."""
NATIVE_STEP = 10**12
"""Native amounts due are rounded up to 10⁻⁶ ETH, so they can be typed."""


def client_for(chain: Chain) -> Nodes:
    """The chain's RPC endpoints as one client (failover: payments.nodes), after checking
    that one of them serves that chain id (ChainMismatch when none does)."""
    nodes = Nodes(chain)
    nodes.chain_id()
    return nodes


def confirmed_height(chain: Chain, client: NodeClient, head: int) -> int:
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
            changes.update(claim_tx_hash=tx_hash, claim_result="", claim_amount=None)
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
            answer = read_claim(invoice, client)
            if answer.code:
                Invoice.objects.filter(pk=invoice.pk, claim_tx_hash=invoice.claim_tx_hash).update(
                    claim_result=answer.code, claim_amount=answer.amount
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
    from_block: int | None = None
    to_block: int | None = None
    """The blocks this cycle read for Transfer logs (None: none to read)."""
    head: int = 0
    caught_up: bool = True
    """False while the cursor is still catching up with the head (after downtime)."""
    deep_reorg: bool = False


CLOSED_STATUSES = (Invoice.STATUS_SETTLED, Invoice.STATUS_INVALID)


def open_invoices(chain: Chain, now: datetime | None = None) -> list[Invoice]:
    """The invoices whose addresses are watched: every one inside its monitoring window,
    whatever its state — money sent to a settled, expired or refunded invoice is recorded
    too (and flagged for refund), never left unseen."""
    now = now or timezone.now()
    return list(
        Invoice.objects.filter(asset__chain=chain, monitor_until__gt=now).select_related(
            "asset", "deposit_address"
        )
    )


@dataclass(frozen=True)
class _Span:
    """The blocks a cycle reads for logs: [first, last]; ``last`` is the head once caught up."""

    first: int
    last: int
    head: int

    @property
    def caught_up(self) -> bool:
        return self.last == self.head


def _span(chain: Chain, invoices: list[Invoice], head: int) -> _Span | None:
    """New blocks since the cursor plus the re-check window (the last ``reorg_window``
    blocks, read again every cycle: a reorganisation within it is seen), never before the
    oldest invoice's first block; at most PAYMENT_SCAN_RANGES_PER_CYCLE ranges of the chain's
    block range limit, so a scanner back from downtime catches up in bounded steps. None:
    nothing to read (invoices younger than the chain's head: a reset dev chain)."""
    oldest = min((i.created_block for i in invoices), default=head)
    window_start = max(0, head - chain.reorg_window + 1)
    cursor = chain.scanned_block
    first = oldest if cursor is None else min(cursor + 1, window_start)
    first = max(first, oldest)
    if first > head:
        return None
    budget = chain.block_range_limit * settings.PAYMENT_SCAN_RANGES_PER_CYCLE
    return _Span(first=first, last=min(head, first + budget - 1), head=head)


def scan_chain(
    chain: Chain,
    *,
    client: NodeClient | None = None,
    only: list[int] | None = None,
    now: datetime | None = None,
) -> ScanReport:
    """One scan cycle over the chain's open invoices (or just ``only``).

    Token payments are read incrementally from a cursor (``Chain.scanned_block``): the
    blocks since it, plus the re-check window for reorganisations, in ranges of at most the
    chain's ``block_range_limit`` (a range the node still refuses is split), all batched.
    Blocks below the window are never read again: what they paid is recorded. The block
    just below the window is a checkpoint: if its hash changes, a reorganisation deeper than
    the window happened — the operator is told (``Chain.deep_reorg_at``) and every open
    invoice's blocks are read again, so no payment it removed is silently kept. The native
    coin is credited by balance (read at the head for every invoice; at the confirmed height
    and the deadline only where money arrived).

    RPC cost: one eth_chainId, one latest block, batches of eth_getLogs (one filter per
    token per chunk of addresses per range), one block batch (the logs' blocks, the span's
    last block, the checkpoints), balance batches — never one request per invoice (a native
    invoice past its deadline with money at its address adds one short search for its
    deadline block, once). With ``Chain.quorum`` above one, a confirmed transfer is asked of
    the other endpoints too (one receipt batch each) and counts only when enough agree.

    A full cycle (``only`` None) moves the cursor and records how far the chain has been read
    (``read_through``): an order's hold is decided only once that reaches its deadline
    (payments.expiry). Raises RpcUnavailable (the invoices are marked "checking is delayed").
    """
    now = now or timezone.now()
    report = ScanReport()
    invoices = open_invoices(chain, now)
    if only is not None:
        invoices = [i for i in invoices if i.pk in only]
    report.invoices = len(invoices)
    full = only is None
    tokens = [i for i in invoices if not i.asset.is_native]
    natives = [i for i in invoices if i.asset.is_native]
    deep = False
    try:
        client = client or client_for(chain)
        head, head_timestamp = client.head()
        head_time = datetime.fromtimestamp(head_timestamp, tz=UTC)
        confirmed = confirmed_height(chain, client, head)
        span = _span(chain, tokens, head)
        logs = _read_logs(client, _filters(chain, tokens, span)) if span and tokens else []
        # One request for every block this cycle needs to know.
        wanted = {entry.block_number for entry in logs}
        checkpoint = None
        if span is not None:
            wanted.add(span.last)
            checkpoint = span.last - chain.reorg_window if full else None
            if checkpoint is not None and checkpoint >= 0:
                wanted.add(checkpoint)
        if full and chain.checkpoint_block is not None and chain.checkpoint_block <= head:
            wanted.add(chain.checkpoint_block)
        blocks = client.blocks(sorted(wanted)) if wanted else {}
        deep = full and _deep_reorg(chain, blocks, head, now)
        witnesses: list[RpcClient] = []
        if chain.quorum > 1 and isinstance(client, Nodes):
            witnesses = client.witnesses(chain.quorum - 1)
        recorded, touched, complete = _record_transfers(
            chain, tokens, logs, blocks, span, confirmed, client, witnesses
        )
        report.transfers_recorded = recorded
        native = _scan_native(chain, client, witnesses, natives, head, head_time, confirmed)
    except (RpcUnavailable, RpcError, ChainMismatch) as exc:
        # The page says "checking is delayed" (for invoices still to be paid: a settled or
        # refunded one has nothing to wait for); the next cycle starts from the database again.
        waiting = [i.pk for i in invoices if i.status not in CLOSED_STATUSES]
        Invoice.objects.filter(pk__in=waiting).update(check_delayed=True)
        record_scan_failure(chain, exc)
        raise
    report.head = head
    if span is not None:
        report.from_block, report.to_block, report.caught_up = span.first, span.last, span.caught_up
    report.deep_reorg = deep
    for invoice in invoices:
        # Only invoices whose state can have changed: new transfers, other balances, a
        # pending payment, a deadline passed, or a direct request. A closed (settled or
        # refunded) invoice's native balance counts only when it grew: a sweep from the
        # address lowers it, and money once confirmed stays counted.
        amounts = native.get(invoice.pk)
        stored = (
            units(invoice.amount_seen),
            units(invoice.amount_confirmed),
            units(invoice.amount_on_time),
        )
        if amounts is not None and invoice.status in CLOSED_STATUSES:
            balance_changed = amounts[0] > stored[0] or amounts[1] > stored[1]
        else:
            balance_changed = amounts is not None and amounts != stored
        if (
            only is not None
            or invoice.pk in touched
            or invoice.status == Invoice.STATUS_PROCESSING
            or (invoice.status == Invoice.STATUS_NEW and now > invoice.expires_at)
            or balance_changed
        ) and recompute(invoice.pk, native=amounts, now=now):
            report.settled.append(invoice.pk)
    # The rest changed nothing: their "checking is delayed" ends in one statement.
    delayed = [i.pk for i in invoices if i.check_delayed]
    Invoice.objects.filter(pk__in=delayed, check_delayed=True).update(check_delayed=False)
    if full:
        _advance(chain, span, blocks, checkpoint, head_time, now, complete=complete and not deep)
    elif span is not None and chain.scanned_block is None:
        Chain.objects.filter(pk=chain.pk, scanned_block__isnull=True).update(scanned_block=head)
    report.rpc_requests = client.requests_made
    return report


def _advance(
    chain: Chain,
    span: _Span | None,
    blocks: dict[int, dict[str, Any]],
    checkpoint: int | None,
    head_time: datetime,
    now: datetime,
    *,
    complete: bool,
) -> None:
    """After a full cycle (its invoices recomputed): the cursor to the span's last block,
    the new checkpoint, and how far the chain is read (``read_through``, never back)."""
    changes: dict[str, object] = {"last_scan_at": timezone.now(), "last_scan_error": ""}
    if span is not None and complete:
        changes["scanned_block"] = span.last
        block = blocks.get(checkpoint) if checkpoint is not None else None
        if block is not None:
            changes.update(checkpoint_block=checkpoint, checkpoint_hash=block["hash"])
    Chain.objects.filter(pk=chain.pk).update(**changes)
    if not complete:
        return
    if span is None or span.caught_up:
        # Every block up to the head's time is read, and up to a moment the propagation
        # delay ago: a block older than that would be on the node (an idle chain has none).
        read_through = max(head_time, now - settings.PAYMENT_BLOCK_PROPAGATION)
    elif span.last in blocks:  # catching up: read up to the span's last block
        read_through = datetime.fromtimestamp(int(blocks[span.last]["timestamp"], 16), tz=UTC)
    else:
        return  # a block the node does not have (below its genesis): nothing to tell
    Chain.objects.filter(
        Q(read_through__isnull=True) | Q(read_through__lt=read_through), pk=chain.pk
    ).update(read_through=read_through)  # never back (two cycles at once)


def _deep_reorg(chain: Chain, blocks: dict[int, dict[str, Any]], head: int, now: datetime) -> bool:
    """Has the block below the last cycle's re-check window changed (or vanished)? Then a
    reorganisation went deeper than the window: the operator is told, and the cursor is
    dropped so that the next cycles read every open invoice's blocks again (a payment it
    removed is then orphaned, and a settled order that loses its payment is noted)."""
    if chain.checkpoint_block is None:
        return False
    block = blocks.get(chain.checkpoint_block)
    if block is not None and block["hash"] == chain.checkpoint_hash:
        return False
    now_hash = block["hash"][:12] + "…" if block is not None else "gone (head " + str(head) + ")"
    note = (
        f"block {chain.checkpoint_block} changed: was {chain.checkpoint_hash[:12]}…, now "
        f"{now_hash}. A reorganisation deeper than the re-check window ({chain.reorg_window} "
        "blocks), or a node far behind: every open invoice's blocks are read again."
    )
    Chain.objects.filter(pk=chain.pk).update(
        deep_reorg_at=now,
        deep_reorg_note=note[:300],
        scanned_block=None,
        checkpoint_block=None,
        checkpoint_hash="",
    )
    log.error("deep reorganisation", extra={"chain": chain.chain_id, "note": note})
    return True


def record_scan_failure(chain: Chain, exc: Exception) -> None:
    """What the chain's last failed scan said, for the operator's desk (the delay itself is
    read from ``last_scan_at``, the last success: see payments.panel.delayed_since)."""
    Chain.objects.filter(pk=chain.pk).update(
        last_scan_error=f"{type(exc).__name__}: {exc}"[:300], last_scan_error_at=timezone.now()
    )


def _chunks(items: list[Invoice]) -> list[list[Invoice]]:
    return [items[i : i + ADDRESS_CHUNK] for i in range(0, len(items), ADDRESS_CHUNK)]


def _filters(chain: Chain, invoices: list[Invoice], span: _Span) -> list[LogFilter]:
    """eth_getLogs filters covering ``span`` for the invoices' addresses: per token, per chunk
    of addresses (youngest invoices together, so that their chunks start later), per range
    of at most the chain's block range limit."""
    limit = chain.block_range_limit
    by_token: dict[str, list[Invoice]] = {}
    for invoice in invoices:
        by_token.setdefault(invoice.asset.contract_address, []).append(invoice)
    filters = []
    for token, group in by_token.items():
        for chunk in _chunks(sorted(group, key=lambda i: i.created_block)):
            first = max(span.first, chunk[0].created_block)
            addresses = tuple(i.deposit_address.address.lower() for i in chunk)
            for start in range(first, span.last + 1, limit):
                end = min(start + limit - 1, span.last)
                filters.append(LogFilter(token, addresses, start, end))
    return filters


def _read_logs(client: NodeClient, filters: list[LogFilter]) -> list[Log]:
    """The filters' logs, PAYMENT_RPC_BATCH_LIMIT filters per request (and at most
    LOG_ADDRESSES_PER_REQUEST addresses); a query the node
    refuses as too large is split — its blocks in halves, down to one block, then its
    addresses — and asked again."""
    pending = list(filters)
    found: list[Log] = []
    limit = settings.PAYMENT_RPC_BATCH_LIMIT
    while pending:
        # At most `limit` queries and LOG_ADDRESSES_PER_REQUEST addresses in one request
        # (nodes refuse large bodies: anvil above ~2 MB, providers lower).
        size, addresses = 0, 0
        while size < min(limit, len(pending)) and (
            size == 0 or addresses + len(pending[size].recipients) <= LOG_ADDRESSES_PER_REQUEST
        ):
            addresses += len(pending[size].recipients)
            size += 1
        batch, pending = pending[:size], pending[size:]
        for query, answer in zip(batch, client.logs_many(batch), strict=True):
            if isinstance(answer, RangeTooLarge):
                pending.extend(_split(query, answer))
            elif isinstance(answer, RpcError):
                raise answer
            else:
                found.extend(answer)
    return found


def _split(query: LogFilter, refusal: RangeTooLarge) -> list[LogFilter]:
    if query.to_block > query.from_block:
        middle = (query.from_block + query.to_block) // 2
        return [replace(query, to_block=middle), replace(query, from_block=middle + 1)]
    if len(query.recipients) > 1:
        half = len(query.recipients) // 2
        return [
            replace(query, recipients=query.recipients[:half]),
            replace(query, recipients=query.recipients[half:]),
        ]
    raise RangeTooLarge(f"refused for one block and one address: {refusal}")


def _record_transfers(
    chain: Chain,
    invoices: list[Invoice],
    logs: list[Log],
    blocks: dict[int, dict[str, Any]],
    span: _Span | None,
    confirmed: int,
    client: NodeClient,
    witnesses: list[RpcClient],
) -> tuple[int, set[int], bool]:
    """Record the Transfer logs of each invoice asset's own contract into its address.
    Returns how many were recorded, the invoices whose transfers changed, and whether every
    log was read (False: a block changed while we looked; the next cycle reads it)."""
    if span is None:
        return 0, set(), True
    by_address = {i.deposit_address.address.lower(): i for i in invoices}
    found: list[Transfer] = []
    complete = True
    for entry in logs:
        invoice = by_address.get(entry.to_address)
        if invoice is None or entry.address != invoice.asset.contract_address.lower():
            continue  # another contract (a fake token) or another address: not payment
        if entry.block_number < invoice.created_block:
            continue  # older than the invoice
        block = blocks.get(entry.block_number)
        if block is None or block["hash"] != entry.block_hash:
            complete = False
            continue  # the block changed while we looked: the next cycle sees it settled
        status = (
            Transfer.STATUS_CONFIRMED if entry.block_number <= confirmed else Transfer.STATUS_SEEN
        )
        found.append(
            Transfer(
                chain=chain,
                tx_hash=entry.tx_hash,
                log_index=entry.log_index,
                invoice=invoice,
                from_address=entry.from_address,
                amount=Decimal(entry.amount),  # exact: Decimal(int) never rounds
                block_number=entry.block_number,
                block_hash=entry.block_hash,
                block_time=datetime.fromtimestamp(int(block["timestamp"], 16), tz=UTC),
                status=status,
            )
        )
    ids = {i.pk for i in invoices}
    # What was recorded in the span before this cycle (the span reaches the head once caught
    # up: a transfer recorded in a block the chain no longer has is in it too).
    # Only the open invoices' transfers: a year of settled ones stays in the database.
    # One array parameter, not one placeholder per invoice: a cycle watches up to 10,000.
    in_span = Transfer.objects.filter(chain=chain, block_number__gte=span.first).extra(
        where=['"payments_transfer"."invoice_id" = ANY(%s)'], params=[sorted(ids)]
    )
    if not span.caught_up:
        in_span = in_span.filter(block_number__lte=span.last)
    known = {
        (t.tx_hash, t.log_index): t
        for t in in_span.only(
            "tx_hash", "log_index", "status", "block_hash", "attested_by", "invoice"
        )
    }
    _attest_quorum(chain, found, known, client, witnesses)
    # One upsert on the (chain, tx hash, log index) key: concurrent scans cannot both insert
    # a transfer, and a re-included transfer takes its new block.
    Transfer.objects.bulk_create(
        found,
        update_conflicts=True,
        unique_fields=["chain", "tx_hash", "log_index"],
        update_fields=["block_number", "block_hash", "block_time", "status", "attested_by"],
    )
    # Changed: a transfer new, confirmed or moved since the last cycle, or one orphaned — not
    # every invoice with a transfer: settled ones stay watched and would all be recomputed.
    changed = set()
    for t in found:
        before = known.get((t.tx_hash, t.log_index))
        if before is None or (before.status, before.block_hash) != (t.status, t.block_hash):
            changed.add(t.invoice_id)
    # A transfer recorded in the span that the chain no longer shows was removed by a
    # reorganisation: it is orphaned and stops counting.
    kept = {(t.tx_hash, t.log_index) for t in found}
    gone = [
        t for key, t in known.items() if key not in kept and t.status != Transfer.STATUS_ORPHANED
    ]
    if gone:
        Transfer.objects.filter(pk__in=[t.pk for t in gone]).update(status=Transfer.STATUS_ORPHANED)
        changed |= {t.invoice_id for t in gone}
        _note_lost_after_settling(invoices, gone)
    # Sums that differ from the invoice's (a recompute that failed is retried next cycle).
    touched = {t.invoice_id for t in found}
    sums = (
        Transfer.objects.filter(invoice_id__in=touched)
        .exclude(status=Transfer.STATUS_ORPHANED)
        .values("invoice_id")
        .annotate(
            seen=Sum("amount"), confirmed=Sum("amount", filter=Q(status=Transfer.STATUS_CONFIRMED))
        )
    )
    stored = {i.pk: (units(i.amount_seen), units(i.amount_confirmed)) for i in invoices}
    for row in sums:
        if (units(row["seen"] or 0), units(row["confirmed"] or 0)) != stored[row["invoice_id"]]:
            changed.add(row["invoice_id"])
    return len(found), changed, complete


def _attest_quorum(
    chain: Chain,
    found: list[Transfer],
    known: dict[tuple[str, int], Transfer],
    client: NodeClient,
    witnesses: list[RpcClient],
) -> None:
    """With a quorum above one, a transfer confirmed by height counts as confirmed only when
    that many endpoints returned it: the other endpoints are asked for its receipt (one batch
    each), which must hold the same log (emitter, recipient, amount) in the same block. One
    attested before, in the same block, is not asked again. Short of the quorum it stays
    "seen" (waiting): a lying endpoint's fabricated log never settles an order."""
    if chain.quorum <= 1:
        return
    asking = []
    for t in found:
        before = known.get((t.tx_hash, t.log_index))
        if t.status != Transfer.STATUS_CONFIRMED:
            continue
        if (
            before is not None
            and before.block_hash == t.block_hash
            and before.attested_by >= chain.quorum
        ):
            t.attested_by = before.attested_by
            continue
        asking.append(t)
    hashes = sorted({t.tx_hash for t in asking})
    agree: dict[tuple[str, int], int] = {}
    limit = settings.PAYMENT_RPC_BATCH_LIMIT
    for witness in witnesses:
        receipts: dict[str, dict[str, Any] | None] = {}
        try:
            for start in range(0, len(hashes), limit):
                part = hashes[start : start + limit]
                calls = [("eth_getTransactionReceipt", [h]) for h in part]
                receipts.update(zip(part, witness.batch(calls), strict=True))
        except (RpcUnavailable, RpcError) as exc:
            if isinstance(client, Nodes):
                client.witness_failed(witness, exc)
            continue
        for t in asking:
            if _receipt_shows(receipts.get(t.tx_hash), t):
                key = (t.tx_hash, t.log_index)
                agree[key] = agree.get(key, 0) + 1
    for t in asking:
        t.attested_by = 1 + agree.get((t.tx_hash, t.log_index), 0)
        if t.attested_by < chain.quorum:
            t.status = Transfer.STATUS_SEEN
            log.warning(
                "transfer short of quorum",
                extra={"tx": t.tx_hash, "attested_by": t.attested_by, "quorum": chain.quorum},
            )


def _receipt_shows(receipt: dict[str, Any] | None, transfer: Transfer) -> bool:
    """Does this receipt hold ``transfer``'s log: same block, emitter, recipient, amount?"""
    if not receipt or int(receipt.get("status") or "0x0", 16) != 1:
        return False
    if str(receipt.get("blockHash", "")).lower() != transfer.block_hash.lower():
        return False
    token = transfer.invoice.asset.contract_address.lower()
    address = _word(transfer.invoice.deposit_address.address)
    for entry in receipt.get("logs", []):
        topics = [str(t).lower() for t in entry.get("topics", [])]
        if (
            int(str(entry.get("logIndex") or "0x0"), 16) == transfer.log_index
            and str(entry.get("address", "")).lower() == token
            and len(topics) == 3
            and topics[0] == TRANSFER_TOPIC
            and _word(topics[2]) == address
            and int(str(entry.get("data") or "0x0"), 16) == units(transfer.amount)
        ):
            return True
    return False


def _note_lost_after_settling(invoices: list[Invoice], gone: list[Transfer]) -> None:
    """A confirmed transfer of a settled invoice removed by a reorganisation (deeper than
    the confirmations): the order stays paid, so the operator must be told — never silent."""
    settled = {i.pk: i for i in invoices if i.status == Invoice.STATUS_SETTLED}
    for t in gone:
        invoice = settled.get(t.invoice_id)
        if invoice is None or t.status != Transfer.STATUS_CONFIRMED:
            continue
        order = Order.objects.get(pk=invoice.order_id)
        reservations.record_note(
            order,
            actor=reservations.system("payment scanner"),
            reason=(
                f"invoice {invoice.pk}: its confirmed payment {t.tx_hash} was removed by a "
                "reorganisation after the order was paid: check the payment by hand"
            ),
        )
        log.error(
            "settled payment reorganised away", extra={"invoice": invoice.pk, "tx": t.tx_hash}
        )


def _scan_native(
    chain: Chain,
    client: NodeClient,
    witnesses: list[RpcClient],
    invoices: list[Invoice],
    head: int,
    head_time: datetime,
    confirmed: int,
) -> dict[int, tuple[int, int, int]]:
    """The native coin is credited by balance, so coins sent by a contract count too.
    Returns (seen, confirmed, on time) amounts per invoice id: the balance at the latest
    block for every invoice, and where money is at the address (or was counted before),
    the balance at the confirmed height (re-read every cycle: a reorganisation that removes
    a payment lowers it again; with a quorum, the lowest the endpoints report) and at the
    invoice's deadline block — the last block whose time is at or before its deadline, once
    the chain is past it (before: all seen is on time). Who pays a block before the
    deadline has paid on time, whenever we look."""
    if not invoices:
        return {}
    at_head = _balances(client, [(i.deposit_address.address, head) for i in invoices])
    amounts: dict[int, tuple[int, int, int]] = {}
    funded = []
    for invoice in invoices:
        seen = max(
            0, at_head[(invoice.deposit_address.address, head)] - int(invoice.starting_balance)
        )
        if seen > 0 or units(invoice.amount_seen) or units(invoice.amount_confirmed):
            funded.append(invoice)
        else:
            amounts[invoice.pk] = (0, 0, 0)
    deadline_blocks: dict[int, int] = {}
    for invoice in funded:
        if head_time > invoice.expires_at and invoice.status not in CLOSED_STATUSES:
            if invoice.deadline_block is None:
                invoice.deadline_block = _block_at(
                    client, invoice.expires_at, invoice.created_block, head
                )
                Invoice.objects.filter(pk=invoice.pk).update(deadline_block=invoice.deadline_block)
            deadline_blocks[invoice.pk] = invoice.deadline_block
    wanted = [(i.deposit_address.address, confirmed) for i in funded]
    wanted += [
        (i.deposit_address.address, max(0, deadline_blocks[i.pk]))
        for i in funded
        if i.pk in deadline_blocks
    ]
    read = _balances(client, wanted)
    at_confirmed = {i.pk: read[(i.deposit_address.address, confirmed)] for i in funded}
    for witness in witnesses:  # a quorum: the lowest balance any endpoint reports
        try:
            other = _balances(witness, [(i.deposit_address.address, confirmed) for i in funded])
        except (RpcUnavailable, RpcError) as exc:
            if isinstance(client, Nodes):
                client.witness_failed(witness, exc)
            at_confirmed = {i.pk: 0 for i in funded}  # short of the quorum: nothing confirmed
            continue
        for i in funded:
            at_confirmed[i.pk] = min(
                at_confirmed[i.pk], other[(i.deposit_address.address, confirmed)]
            )
    if chain.quorum > 1 and len(witnesses) < chain.quorum - 1:
        at_confirmed = {i.pk: 0 for i in funded}
    for invoice in funded:
        start = int(invoice.starting_balance)
        seen = max(0, at_head[(invoice.deposit_address.address, head)] - start)
        on_time = seen
        if invoice.pk in deadline_blocks:
            block = deadline_blocks[invoice.pk]
            at_deadline = read[(invoice.deposit_address.address, max(0, block))]
            on_time = 0 if block < invoice.created_block else max(0, at_deadline - start)
        amounts[invoice.pk] = (seen, max(0, at_confirmed[invoice.pk] - start), on_time)
    return amounts


def _balances(client: NodeClient, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Native balances of (address, block) pairs, PAYMENT_RPC_BATCH_LIMIT per request."""
    pairs = list(dict.fromkeys(wanted))
    found: dict[tuple[str, int], int] = {}
    limit = settings.PAYMENT_RPC_BATCH_LIMIT
    for start in range(0, len(pairs), limit):
        part = pairs[start : start + limit]
        results = client.batch([("eth_getBalance", [a, hex(b)]) for a, b in part])
        found.update((pair, int(result, 16)) for pair, result in zip(part, results, strict=True))
    return found


DEADLINE_SEARCH_FANOUT = 16
"""Blocks probed per request when looking for a deadline's block (log16 of the range)."""


def _block_at(client: NodeClient, moment: datetime, low: int, high: int) -> int:
    """The last block in [low - 1, high] whose timestamp is at or before ``moment``; the
    head ``high`` is known to be after it. Probes a few blocks per batched request."""
    limit = moment.timestamp()
    before, after = low - 1, high
    while after - before > 1:
        step = max(1, (after - before) // DEADLINE_SEARCH_FANOUT)
        probes = list(range(before + step, after, step))
        found = client.blocks(probes)
        for number in probes:
            block = found.get(number)
            if block is None:
                raise RpcUnavailable(f"{client.url}: block {number} missing")
            if int(block["timestamp"], 16) > limit:
                after = number
                break
            before = number
    return before


# --------------------------------------------------------------------------- states


def _counted(invoice: Invoice, native: tuple[int, int, int] | None) -> tuple[int, int, int, int]:
    """(seen, confirmed, mined by the deadline, confirmed of that): exact integers of base
    units, from the native scan or the invoice's transfers (summed as Python ints: never a
    Decimal context's rounding). What counts as on time is what was mined by the invoice's
    deadline, by block time."""
    stored = (
        units(invoice.amount_seen),
        units(invoice.amount_confirmed),
        units(invoice.amount_on_time),
    )
    if invoice.asset.is_native:
        seen, confirmed, on_time = native if native is not None else stored
        if invoice.status in CLOSED_STATUSES:
            # A sweep from the address lowers its balance: what was confirmed stays counted.
            seen = max(seen, stored[0])
            confirmed = max(confirmed, stored[1])
            on_time = max(on_time, stored[2])
        # The balance only grows at a deposit address: what was there by the deadline and
        # is confirmed is the smaller of the two.
        return seen, confirmed, on_time, min(on_time, confirmed)
    counted = list(invoice.transfers.exclude(status=Transfer.STATUS_ORPHANED))
    seen = sum(units(t.amount) for t in counted)
    confirmed = sum(units(t.amount) for t in counted if t.status == Transfer.STATUS_CONFIRMED)
    in_time = [t for t in counted if t.block_time <= invoice.expires_at]
    on_time = sum(units(t.amount) for t in in_time)
    on_time_confirmed = sum(
        units(t.amount) for t in in_time if t.status == Transfer.STATUS_CONFIRMED
    )
    return seen, confirmed, on_time, on_time_confirmed


def refund_owed(
    status: str, *, due: int, confirmed: int, refunded: int, cancelled: bool = False
) -> int:
    """What is to be sent back, in base units: confirmed money beyond what the invoice keeps —
    the amount due once it is settled (nothing once its order was cancelled: all of it goes
    back); nothing while it is open (the payer may still complete it); nothing kept once it
    expired (paid late, or a second invoice of a paid order) or was refunded — less what was
    already sent back."""
    if status in Invoice.OPEN_STATUSES:
        return 0
    kept = due if status == Invoice.STATUS_SETTLED and not cancelled else 0
    return max(0, confirmed - kept - refunded)


def _refund_reason(order: Order, invoice: Invoice, status: str) -> str:
    if status == Invoice.STATUS_SETTLED and order.status == Order.STATUS_CANCELLED:
        return "the order was cancelled after it was paid"
    if status == Invoice.STATUS_SETTLED:
        return "paid beyond the amount due"
    if status == Invoice.STATUS_INVALID:
        return "arrived after the invoice was refunded"
    others = Invoice.objects.filter(order=order, status=Invoice.STATUS_SETTLED)
    if others.exclude(pk=invoice.pk).exists():
        return "the order is already paid by another invoice"
    if order.status == Order.STATUS_CANCELLED:
        return "the order was cancelled"
    return "arrived after the invoice expired: accept it, or refund it"


def recompute(
    invoice_id: int,
    *,
    native: tuple[int, int, int] | None = None,
    now: datetime | None = None,
) -> bool:
    """Derive the invoice's state from what the chain showed; True if this call settled it.

    ``native``: (seen, confirmed, on time) amounts a native-coin scan just read. What counts
    is what was mined by the invoice's deadline, by block time — not when we looked: a
    payment mined before it settles however late the scanner saw it. Settling is a
    conditional update (status not yet settled), done once, and moves the order to "paid"
    in the same transaction. Past the deadline with less than due mined by it, the invoice
    is expired: "paid_late" when money came after the deadline (the order is left to the
    operator: accept if capacity remains, or refund), "paid_partial" when only part of it
    came before (to refund). The order itself is decided by payments.expiry. A payment in
    a coin or on a chain that is no longer active is recorded, but held (waiting, then
    "paid_late" after the deadline) and never settled by itself; the operator is told
    (integrity.alert_held). A settled or refunded invoice keeps its state; only its
    amounts follow what arrives. Money beyond what the invoice keeps is flagged for refund
    (``amount_to_refund``, exact base units), with a note in the order's history each time
    it grows.
    """
    now = now or timezone.now()
    order_id = Invoice.objects.values_list("order_id", flat=True).get(pk=invoice_id)
    with transaction.atomic():
        # Locks: the order's row, then the invoice's (the order create_invoice takes too).
        order = Order.objects.select_for_update().get(pk=order_id)
        invoice = Invoice.objects.select_for_update().select_related("asset").get(pk=invoice_id)
        seen, confirmed, on_time, on_time_confirmed = _counted(invoice, native)
        due = units(invoice.amount_due)
        settled_at = invoice.settled_at
        status, exception = invoice.status, invoice.exception
        held = False
        if status == Invoice.STATUS_SETTLED:
            if confirmed > due:
                exception = Invoice.EXCEPTION_PAID_OVER
            elif exception == Invoice.EXCEPTION_PAID_OVER:
                exception = Invoice.EXCEPTION_NONE
        elif status != Invoice.STATUS_INVALID:
            status, exception = _decide(invoice, seen, on_time, on_time_confirmed, confirmed, now)
            held = status == Invoice.STATUS_SETTLED and not integrity.accepting(invoice)
            if held:
                # Its chain or coin was turned off (a retired network's tokens may cost
                # nothing): recorded and watched, never settled by itself; the operator decides.
                if now > invoice.expires_at:
                    status, exception = Invoice.STATUS_EXPIRED, Invoice.EXCEPTION_PAID_LATE
                else:
                    status, exception = Invoice.STATUS_PROCESSING, Invoice.EXCEPTION_NONE
            if status == Invoice.STATUS_SETTLED:
                symbol = invoice.asset.symbol
                paid = reservations.mark_paid(
                    order,
                    actor=reservations.system("payment scanner"),
                    reason=f"invoice {invoice.pk}: {invoice.asset.from_units(confirmed)} {symbol}",
                )
                if not paid:  # the hold ended meanwhile: the operator decides
                    status, exception = Invoice.STATUS_EXPIRED, Invoice.EXCEPTION_PAID_LATE
            settled_at = now if status == Invoice.STATUS_SETTLED else None
        owed = refund_owed(
            status,
            due=due,
            confirmed=confirmed,
            refunded=units(invoice.amount_refunded),
            cancelled=order.status == Order.STATUS_CANCELLED,
        )
        if owed > units(invoice.amount_to_refund):
            amount = invoice.asset.from_units(owed)
            why = _refund_reason(order, invoice, status)
            reservations.record_note(
                order,
                actor=reservations.system("payment scanner"),
                reason=f"invoice {invoice.pk}: {amount} {invoice.asset.symbol} to refund ({why})",
            )
            log.warning("refund owed", extra={"invoice": invoice.pk, "units": str(owed)})
        Invoice.objects.filter(pk=invoice.pk).update(
            status=status,
            exception=exception,
            amount_seen=Decimal(seen),
            amount_confirmed=Decimal(confirmed),
            amount_on_time=Decimal(on_time),
            amount_to_refund=Decimal(owed),
            last_checked_at=now,
            check_delayed=False,
            settled_at=settled_at,
        )
    if held:
        integrity.alert_held(invoice)
    settled = invoice.status != Invoice.STATUS_SETTLED and status == Invoice.STATUS_SETTLED
    if settled:
        log.info("invoice settled", extra={"invoice": invoice.pk, "order": order.reference})
        from provisioning.services import auto_approve

        auto_approve(order)
    return settled


def _decide(
    invoice: Invoice, seen: int, on_time: int, on_time_confirmed: int, confirmed: int, now: datetime
) -> tuple[str, str]:
    """The state of an invoice not yet settled nor refunded, from its exact amounts: what
    was mined by its deadline counts, however late the scanner saw it."""
    due = units(invoice.amount_due)
    if on_time_confirmed >= due:
        over = Invoice.EXCEPTION_PAID_OVER if confirmed > due else Invoice.EXCEPTION_NONE
        return Invoice.STATUS_SETTLED, over
    if on_time >= due:
        return Invoice.STATUS_PROCESSING, Invoice.EXCEPTION_NONE  # paid in time, confirming
    if seen > on_time:
        return Invoice.STATUS_EXPIRED, Invoice.EXCEPTION_PAID_LATE
    if now > invoice.expires_at:
        partial = Invoice.EXCEPTION_PAID_PARTIAL if seen > 0 else Invoice.EXCEPTION_NONE
        return Invoice.STATUS_EXPIRED, partial
    if seen > 0:
        return Invoice.STATUS_PROCESSING, Invoice.EXCEPTION_PAID_PARTIAL
    return Invoice.STATUS_NEW, Invoice.EXCEPTION_NONE


def order_cancelled(order: Order) -> None:
    """A cancelled order keeps none of its money: each invoice that received some is
    recomputed, so what it holds is flagged for refund (``amount_to_refund``, a note, the
    researcher asked for an address). Called by reservations.cancel_order in its
    transaction."""
    received = Invoice.objects.filter(order=order).filter(
        Q(amount_confirmed__gt=0) | Q(amount_seen__gt=0)
    )
    for pk in received.values_list("pk", flat=True):
        recompute(pk)


PAID_ORDER_STATUSES = (
    Order.STATUS_PAID,
    Order.STATUS_APPROVED,
    Order.STATUS_ACTIVE,
    Order.STATUS_COMPLETED,
)


def accept_late_payment(invoice: Invoice, *, actor: reservations.Actor) -> None:
    """The operator accepts a payment that arrived after expiry: the order is paid — its
    window booked again if the lots are still free (else LotUnavailable: refund instead).

    Where accepting does not apply it is refused (BookingRefused with the reason) and
    nothing changes: an invoice already settled; an order already paid (by another invoice:
    this payment is to be refunded) or cancelled; an invoice without a late payment, or
    whose late payment is less than was due, or whose refund is being verified.
    """
    with transaction.atomic():
        # Locks: the order's row, then the invoice's.
        order = Order.objects.select_for_update().get(pk=invoice.order_id)
        locked = Invoice.objects.select_for_update().select_related("asset").get(pk=invoice.pk)
        paid_elsewhere = (
            Invoice.objects.filter(order=order, status=Invoice.STATUS_SETTLED)
            .exclude(pk=locked.pk)
            .exists()
        )
        if locked.status == Invoice.STATUS_SETTLED:
            raise BookingRefused({"invoice": [refusal("already_settled")]})
        if paid_elsewhere or order.status in PAID_ORDER_STATUSES:
            raise BookingRefused({"invoice": [refusal("already_paid")]})
        if order.status == Order.STATUS_CANCELLED:
            raise BookingRefused({"invoice": [refusal("order_cancelled")]})
        if (
            locked.status != Invoice.STATUS_EXPIRED
            or locked.exception != Invoice.EXCEPTION_PAID_LATE
        ):
            raise BookingRefused({"invoice": [refusal("not_a_late_payment")]})
        due, confirmed = units(locked.amount_due), units(locked.amount_confirmed)
        if confirmed < due:
            raise BookingRefused({"invoice": [refusal("late_payment_short")]})
        if locked.refunds.filter(status="sent").exists():  # the money is on its way back
            raise BookingRefused({"invoice": [refusal("refund_being_verified")]})
        reason = f"late payment accepted (invoice {locked.pk})"
        if order.status == Order.STATUS_AWAITING_PAYMENT:
            reservations.mark_paid(order, actor=actor, reason=reason)
        else:  # expired: booked again if the lots are free, else LotUnavailable
            reservations.reinstate_paid(order, actor=actor, reason=reason)
        owed = refund_owed(
            Invoice.STATUS_SETTLED,
            due=due,
            confirmed=confirmed,
            refunded=units(locked.amount_refunded),
        )
        Invoice.objects.filter(pk=locked.pk).update(
            status=Invoice.STATUS_SETTLED, settled_at=timezone.now(), amount_to_refund=owed
        )


def mark_refunded(invoice: Invoice, *, actor: reservations.Actor, reason: str) -> None:
    """The operator's override: records, with a note, a refund made outside the verified
    flow (payments.refunds: the researcher's address, the pasted transaction, checked
    on-chain) — what this invoice does not keep counts as sent back from the operator's
    wallet: all of what reached an expired invoice (paid late or partly, or a second
    invoice of a paid order) — the invoice is then closed (invalid) —, or what a settled
    invoice received beyond the amount due, or what arrived after an earlier refund.

    Refused (BookingRefused with the reason, nothing changed) without a note, while the
    invoice is still open, while a refund of it is being verified, or when there is
    nothing to refund. What it records: refunds.apply_refund, shared with the flow.
    """
    if not reason.strip():
        raise BookingRefused({"reason": [refusal("required")]})
    from payments import refunds

    refunds.apply_refund(invoice, actor=actor, note=f"refunded: {reason}")


# --------------------------------------------------------------------------- claims' answers

CLAIM_RESULTS = {
    "pays_invoice": "pays this invoice claim_amount base units (what the scanner credits)",
    "no_value": "involves this address but moves nothing to it: an approve(), 0 wei, 0 units",
    "other_token": "sends another token than the invoice's to this address: not credited",
    "before_invoice": "paid this address in a block before the invoice was made: not credited",
    "not_direct": "sends ETH to another address; counted only if a contract forwards it here "
    "(the address's balance shows it)",
    "unrelated": "moves nothing to this address",
    "reverted": "failed on-chain: nothing moved",
    "pending": "known to the node, not mined yet",
    "not_found": "not known to the node (yet)",
}
"""What a claimed transaction did for the invoice: the codes of ``claim_result``."""


@dataclass(frozen=True)
class ClaimAnswer:
    code: str
    amount: int | None = None
    """Base units the transaction pays this invoice (``pays_invoice`` only)."""


def _word(topic: str) -> str:
    return topic.lower()[-40:]


def read_claim(invoice: Invoice, client: NodeClient) -> ClaimAnswer:
    """What the claimed transaction did for this invoice, decoded from the node's receipt
    (one request: the transaction and its receipt). Empty code: no claimed hash.

    A token invoice is paid by Transfer events of its own contract to its address (the sum
    of their amounts); the native coin by the transaction's value to the address. An
    approve(), a 0-wei or 0-unit transfer, another token, another address, a block before
    the invoice: each says so, never ``pays_invoice``.
    """
    if not invoice.claim_tx_hash:
        return ClaimAnswer("")
    tx, receipt = client.transaction_and_receipt(invoice.claim_tx_hash)
    if receipt is None:
        return ClaimAnswer("pending" if tx is not None else "not_found")
    if int(receipt.get("status") or "0x0", 16) != 1:
        return ClaimAnswer("reverted")
    address = _word(invoice.deposit_address.address)
    early = int(receipt.get("blockNumber") or "0x0", 16) < invoice.created_block
    asset = invoice.asset
    if asset.is_native:
        to = _word(str((tx or {}).get("to") or receipt.get("to") or ""))
        value = int((tx or {}).get("value") or "0x0", 16)
        if to != address:
            return ClaimAnswer("not_direct" if value > 0 else "unrelated")
        if value == 0:
            return ClaimAnswer("no_value")
        return ClaimAnswer("before_invoice") if early else ClaimAnswer("pays_invoice", value)
    token = asset.contract_address.lower()
    credited, involved, other_token = 0, False, False
    for entry in receipt.get("logs", []):
        topics = [str(t) for t in entry.get("topics", [])]
        emitter = str(entry.get("address", "")).lower()
        to_us = (
            len(topics) == 3 and topics[0].lower() == TRANSFER_TOPIC and _word(topics[2]) == address
        )
        if emitter != token:
            other_token = other_token or to_us
            continue
        data = str(entry.get("data") or "0x")
        if to_us:
            credited += int(data, 16) if len(data) > 2 else 0
        involved = involved or any(_word(t) == address for t in topics[1:])
    if credited > 0:
        return ClaimAnswer("before_invoice") if early else ClaimAnswer("pays_invoice", credited)
    if involved:
        return ClaimAnswer("no_value")
    if other_token:
        return ClaimAnswer("other_token")
    return ClaimAnswer("unrelated")


def check_claim(invoice: Invoice, client: NodeClient) -> str:
    """The code of what the claimed transaction did (read_claim; empty: no claim)."""
    return read_claim(invoice, client).code
