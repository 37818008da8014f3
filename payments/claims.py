""" "I've paid": a claim, its one verification at a time, and what the claimed transaction did.

A claim credits nothing by itself: the verification checks the claimed transaction and
scans the invoice's address at once; only what the chain shows counts (payments.scanning).
Claims of one invoice coalesce into one verification queued or running."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from payments.models import Invoice
from payments.nodes import ChainMismatch, NodeClient, client_for
from payments.rpc import (
    TRANSFER_TOPIC,
    TX_HASH,
    RpcError,
    RpcUnavailable,
    topic_address,
)
from payments.scanning import scan_chain
from reservations.errors import BookingRefused, refusal

log = logging.getLogger(__name__)


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
    try:
        _queue_verification(invoice_id)
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
    now = now or timezone.now()
    free = Q(verification_queued_at__isnull=True) | Q(
        verification_queued_at__lt=now - VERIFICATION_LEASE
    )
    due = Invoice.objects.filter(free, verification_due_at__lte=now)
    sent = 0
    for pk in due.order_by("verification_due_at").values_list("pk", flat=True)[:VERIFICATION_BATCH]:
        if due.filter(pk=pk).update(verification_queued_at=now):
            _queue_verification(pk)
            sent += 1
    return sent


def _queue_verification(invoice_id: int) -> None:
    # The task's module imports this one: its task is looked up when first queued.
    from payments.tasks import verify_invoice

    verify_invoice.delay(invoice_id)


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
    address = topic_address(invoice.deposit_address.address)
    early = int(receipt.get("blockNumber") or "0x0", 16) < invoice.created_block
    asset = invoice.asset
    if asset.is_native:
        to = topic_address(str((tx or {}).get("to") or receipt.get("to") or ""))
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
            len(topics) == 3
            and topics[0].lower() == TRANSFER_TOPIC
            and topic_address(topics[2]) == address
        )
        if emitter != token:
            other_token = other_token or to_us
            continue
        data = str(entry.get("data") or "0x")
        if to_us:
            credited += int(data, 16) if len(data) > 2 else 0
        involved = involved or any(topic_address(t) == address for t in topics[1:])
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
