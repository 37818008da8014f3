"""The scanner: what the chain shows for the watched invoices, recorded once per transfer.

What counts as payment is decided here and only here: a Transfer log of the invoice asset's
own contract (or, for the native coin, the address's balance) into the invoice's own
address, in a block at or after the invoice was made, on the configured chain, with enough
confirmations, in blocks that are still canonical. Each transfer is a row keyed by (chain,
tx hash, log index): the same transfer can never be credited twice. What the amounts mean
for the invoice and its order is payments.settlement's.

One module over 600 lines, on purpose: the cursor, the range splitting, the reorganisation
check and the ETH balances are one pass over a chain and share its state."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Q, Sum
from django.utils import timezone

from payments.models import Chain, Invoice, Transfer, units
from payments.nodes import ChainMismatch, NodeClient, Nodes, client_for, confirmed_height
from payments.rpc import (
    TRANSFER_TOPIC,
    Log,
    LogFilter,
    RangeTooLarge,
    RpcClient,
    RpcError,
    RpcUnavailable,
    topic_address,
)
from payments.settlement import recompute
from reservations import services as reservations
from reservations.models import Order

log = logging.getLogger(__name__)


ADDRESS_CHUNK = 500
"""Deposit addresses per eth_getLogs OR filter."""
LOG_ADDRESSES_PER_REQUEST = 5000
"""Deposit addresses in one batched eth_getLogs request at most (about 350 kB of JSON)."""


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
        waiting = [i.pk for i in invoices if i.status not in Invoice.CLOSED_STATUSES]
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
        if amounts is not None and invoice.status in Invoice.CLOSED_STATUSES:
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
    address = topic_address(transfer.invoice.deposit_address.address)
    for entry in receipt.get("logs", []):
        topics = [str(t).lower() for t in entry.get("topics", [])]
        if (
            int(str(entry.get("logIndex") or "0x0"), 16) == transfer.log_index
            and str(entry.get("address", "")).lower() == token
            and len(topics) == 3
            and topics[0] == TRANSFER_TOPIC
            and topic_address(topics[2]) == address
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
        if head_time > invoice.expires_at and invoice.status not in Invoice.CLOSED_STATUSES:
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
