"""Refunds: money an invoice does not keep, sent back to an address the researcher gives.

The flow. An invoice owes money (``owed_units``: paid beyond the amount due, paid late or
partly before it expired, a second invoice of a paid order, money after the order was
cancelled or after an earlier refund) → the researcher is mailed ("refund due") and gives
an address on the order page or in the API (``set_refund_address``) → the operator sends
the amount from the operator's wallet and pastes the transaction's hash in the desk
(``record_refund``; mailed "refund sent") → the scanner reads that transaction on the
chain (``verify_refund``) and counts it only if it matches — it succeeded; for a token, a
Transfer log of the invoice's own contract from the refund wallet to the address of at
least the amount; for the native coin, a transaction from the wallet to the address with
at least that value; in a block with the chain's confirmations — and then records it
(``apply_refund``; mailed "refund confirmed"). A transaction that does not match is
rejected with the reason; one not mined or not confirmed yet stays "sent" and is read
again next cycle. The server holds no key: it only checks what the operator's wallet did.

Everything a step needs is in the database (the Refund rows and the mail stamps), so a lost
task or broker loses nothing: beat's ``check_refunds`` takes up whatever is left. The mails
themselves: payments.refund_mails.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from web3 import Web3

from payments import nodes, rpc
from payments.events import refund_sent
from payments.models import Asset, Chain, DepositAddress, Invoice, Refund, units
from payments.nodes import NodeClient
from payments.refund_due import (
    in_flight,
    owed_units,
    owing,
)
from payments.refund_mails import send_refund_mails
from payments.rpc import TRANSFER_TOPIC, RpcError, RpcUnavailable, topic_address
from reservations import services as reservations
from reservations.errors import BookingRefused, refusal
from reservations.models import Order

log = logging.getLogger(__name__)

ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")
ZERO_ADDRESS = "0x" + "0" * 40
UNSEEN_AFTER = timedelta(hours=1)
"""A refund whose transaction the node still does not know this long after it was recorded
(a mistyped hash, a transaction dropped from the mempool) is rejected, so that the operator
can record the right one; a transaction that is known but waits to be mined stays sent."""
VERIFY_BATCH = 100
"""Refunds verified per beat cycle at most (the oldest first)."""

# --------------------------------------------------------------------------- the address


def parse_address(raw: str) -> str:
    """The refund address in ``raw``, checksummed (EIP-55), or BookingRefused (field
    ``address``) saying what is wrong with it.

    Accepted: 0x and 40 hexadecimal digits, all in lower (or all in upper) case, or in
    mixed case that is its valid checksum — mixed case that is not is a typo, refused.
    Refused too: the zero address, our own deposit addresses, a chain's refund wallet, a
    coin's contract (money sent to any of those would not reach the researcher)."""
    text = raw.strip()
    if not text:
        raise BookingRefused({"address": [refusal("required")]})
    if not ADDRESS.match(text):
        raise BookingRefused({"address": [refusal("invalid_refund_address")]})
    digits = text[2:]
    if digits not in (digits.lower(), digits.upper()) and not Web3.is_checksum_address(text):
        raise BookingRefused({"address": [refusal("refund_address_checksum")]})
    address = str(Web3.to_checksum_address(text.lower()))
    if address.lower() == ZERO_ADDRESS:
        raise BookingRefused({"address": [refusal("refund_address_zero")]})
    ours = (
        DepositAddress.objects.filter(address__iexact=address).exists()
        or Chain.objects.filter(refund_from_address__iexact=address).exists()
    )
    if ours:
        raise BookingRefused({"address": [refusal("refund_address_ours")]})
    if Asset.objects.filter(
        Q(contract_address__iexact=address) | Q(price_feed_address__iexact=address)
    ).exists():
        raise BookingRefused({"address": [refusal("refund_address_contract")]})
    return address


def set_refund_address(invoice: Invoice, raw: str, *, actor: reservations.Actor) -> Invoice:
    """Where this invoice's money is to go back: stored on the invoice, with a note in the
    order's history (the old address too, when it changes).

    Refused (BookingRefused, nothing changed): an address parse_address refuses; an invoice
    with nothing to send back; while a refund of it is on its way (the address it was sent
    to is final for that refund). The same address again changes nothing."""
    address = parse_address(raw)
    with transaction.atomic():
        # Locks: the order's row, then the invoice's (the order every payment service takes).
        order = Order.objects.select_for_update().get(pk=invoice.order_id)
        locked = Invoice.objects.select_for_update().get(pk=invoice.pk)
        if owed_units(locked) == 0:
            raise BookingRefused({"address": [refusal("nothing_to_refund")]})
        sending = in_flight(locked)
        if sending is not None:
            refused = refusal("refund_in_flight", address=sending.to_address)
            raise BookingRefused({"address": [refused]})
        if address != locked.refund_address:
            Invoice.objects.filter(pk=locked.pk).update(
                refund_address=address, refund_address_set_at=timezone.now()
            )
            was = f" (was {locked.refund_address})" if locked.refund_address else ""
            reservations.record_note(
                order, actor=actor, reason=f"refund address of invoice {locked.pk}: {address}{was}"
            )
    return Invoice.objects.select_related("asset__chain").get(pk=invoice.pk)


def set_order_refund_address(
    order: Order, raw: str, *, actor: reservations.Actor, invoice_id: int | None = None
) -> list[Invoice]:
    """The refund address for one invoice of the order (``invoice_id``), or for each of its
    invoices that owe money and have no refund on its way. Refused as set_refund_address
    (an unknown invoice id: Invoice.DoesNotExist); nothing to apply it to: BookingRefused."""
    address = parse_address(raw)  # before anything: a bad address changes nothing
    if invoice_id is not None:
        return [set_refund_address(order.invoices.get(pk=invoice_id), address, actor=actor)]
    owed = list(owing().filter(order=order).order_by("pk"))
    free = [i for i in owed if in_flight(i) is None]
    if not free:
        if owed:
            sending = in_flight(owed[0])
            assert sending is not None
            refused = refusal("refund_in_flight", address=sending.to_address)
            raise BookingRefused({"address": [refused]})
        raise BookingRefused({"address": [refusal("nothing_to_refund")]})
    return [set_refund_address(invoice, address, actor=actor) for invoice in free]


# --------------------------------------------------------------------------- the operator


def record_refund(invoice: Invoice, tx_hash: str, *, actor: reservations.Actor) -> Refund:
    """The operator sent this invoice's money back in transaction ``tx_hash``: a Refund of
    what is owed now, to the researcher's address, from the chain's refund wallet (if one is
    configured), "sent" until the scanner has verified it on the chain. A note in the
    order's history; ``refund_sent`` is announced after commit (its receiver has it
    verified and the researcher mailed at once: check_refunds).

    Refused (BookingRefused, nothing changed): a malformed hash; an open invoice; nothing
    owed; no refund address given yet; a refund of it already being verified; a
    transaction already recorded as a refund on this chain."""
    tx_hash = tx_hash.strip().lower()
    if not rpc.TX_HASH.match(tx_hash):
        raise BookingRefused({"tx_hash": [refusal("invalid_tx_hash")]})
    with transaction.atomic():
        # Locks: the order's row, then the invoice's.
        order = Order.objects.select_for_update().get(pk=invoice.order_id)
        locked = (
            Invoice.objects.select_for_update().select_related("asset__chain").get(pk=invoice.pk)
        )
        if locked.status in Invoice.OPEN_STATUSES:
            raise BookingRefused({"invoice": [refusal("invoice_still_open")]})
        owed = owed_units(locked)
        if owed == 0:
            raise BookingRefused({"invoice": [refusal("nothing_to_refund")]})
        if not locked.refund_address:
            raise BookingRefused({"invoice": [refusal("refund_address_missing")]})
        if in_flight(locked) is not None:
            raise BookingRefused({"invoice": [refusal("refund_being_verified")]})
        chain = locked.asset.chain
        if Refund.objects.filter(chain=chain, tx_hash=tx_hash).exists():
            raise BookingRefused({"tx_hash": [refusal("refund_tx_used")]})
        try:
            with transaction.atomic():
                refund = Refund.objects.create(
                    invoice=locked,
                    chain=chain,
                    amount=Decimal(owed),
                    to_address=locked.refund_address,
                    from_address=chain.refund_from_address,
                    tx_hash=tx_hash,
                    created_by=actor.user,
                )
        except IntegrityError:  # the same hash recorded concurrently, for another invoice
            raise BookingRefused({"tx_hash": [refusal("refund_tx_used")]}) from None
        asset = locked.asset
        reservations.record_note(
            order,
            actor=actor,
            reason=f"refund sent: {asset.from_units(owed)} {asset.symbol} to "
            f"{locked.refund_address}, tx {tx_hash} (invoice {locked.pk}); counted once "
            "verified on-chain",
        )
        refund_sent.announce(refund_id=refund.pk)
    return refund


def apply_refund(
    invoice: Invoice,
    *,
    actor: reservations.Actor,
    note: str,
    refund: Refund | None = None,
    sent: int = 0,
) -> int:
    """Record money sent back for ``invoice``: what it has refunded grows, what it owes
    drops (to 0, unless more arrived meanwhile), an expired invoice is closed (invalid),
    and the order's history gets ``note`` with the amount. One transaction, with the
    order's, then the invoice's, then the refund's row locked. Returns the base units
    recorded.

    Two callers. The scanner, for ``refund`` verified on-chain: ``sent`` is what its
    transaction moved to the address; the refund becomes confirmed; a refund no longer
    "sent" (verified by a concurrent cycle) changes nothing and returns 0 — idempotent.
    The operator's override (``refund`` None, refunds.mark_refunded): what is owed now
    counts as sent; refused (BookingRefused, nothing changed) while the invoice is open,
    while a refund of it is being verified, or when it has nothing to refund.
    """
    now = timezone.now()
    with transaction.atomic():
        # Locks: the order's row, then the invoice's, then the refund's.
        order = Order.objects.select_for_update().get(pk=invoice.order_id)
        locked = Invoice.objects.select_for_update().select_related("asset").get(pk=invoice.pk)
        if refund is not None:
            current = Refund.objects.select_for_update().get(pk=refund.pk)
            if current.status != Refund.STATUS_SENT:
                return 0
        else:
            if locked.status in Invoice.OPEN_STATUSES:
                raise BookingRefused({"invoice": [refusal("invoice_still_open")]})
            if in_flight(locked) is not None:
                raise BookingRefused({"invoice": [refusal("refund_being_verified")]})
            expired_paid = locked.status == Invoice.STATUS_EXPIRED and units(locked.amount_seen) > 0
            if not expired_paid and units(locked.amount_to_refund) == 0:
                raise BookingRefused({"invoice": [refusal("nothing_to_refund")]})
            sent = owed_units(locked)
        status = locked.status
        if status == Invoice.STATUS_EXPIRED:
            status = Invoice.STATUS_INVALID
        Invoice.objects.filter(pk=locked.pk).update(
            status=status,
            amount_refunded=Decimal(units(locked.amount_refunded) + sent),
            amount_to_refund=Decimal(max(0, units(locked.amount_to_refund) - sent)),
            refund_requested_at=None,  # money arriving after this is announced again
        )
        if refund is not None:
            need = units(refund.amount)
            Refund.objects.filter(pk=refund.pk).update(
                status=Refund.STATUS_CONFIRMED,
                amount_sent=Decimal(sent),
                verified_at=now,
                note=f"{sent - need} base units more than the {need} owed" if sent > need else "",
            )
        amount = f"{locked.asset.from_units(sent)} {locked.asset.symbol}"
        reservations.record_note(
            order, actor=actor, reason=f"{note} ({amount}, invoice {locked.pk})"
        )
    return sent


# --------------------------------------------------------------------------- the scanner


SCANNER = reservations.system("refund verification")


@dataclass(frozen=True)
class Reading:
    """What the chain shows of a refund's transaction."""

    outcome: str
    """WAITING (not mined, not confirmed, or not known yet), MATCHES or REJECTED."""
    says: str
    sent: int = 0
    """MATCHES: the base units it moved to the refund address."""


WAITING, MATCHES, REJECTED = "waiting", "matches", "rejected"


def judge(refund: Refund, asset: Asset, tx: dict[str, Any], receipt: dict[str, Any]) -> Reading:
    """Whether a mined transaction is this refund: succeeded; for a token, Transfer logs of
    the invoice's own contract to the refund address (from the refund wallet, when one is
    configured) that add up to at least the amount; for the native coin, the transaction's
    own value from the wallet to the address, at least the amount. MATCHES with what it
    sent, or REJECTED with the reason."""
    if int(str(receipt.get("status") or "0x0"), 16) != 1:
        return Reading(REJECTED, "the transaction failed on-chain (reverted): nothing was sent")
    to, wallet, need = refund.to_address.lower(), refund.from_address.lower(), units(refund.amount)
    symbol = asset.symbol
    if asset.is_native:
        sender = str(tx.get("from") or "").lower()
        recipient = str(tx.get("to") or "").lower()
        sent = int(str(tx.get("value") or "0x0"), 16)
        if recipient != to:
            if sent == 0:
                return Reading(REJECTED, f"it moves no {symbol} to the refund address {to}")
            where = recipient or "a new contract"
            return Reading(
                REJECTED, f"it sends {sent} wei to {where}, not to the refund address {to}"
            )
        if wallet and sender != wallet:
            return Reading(REJECTED, f"it comes from {sender}, not from the refund wallet {wallet}")
    else:
        token = asset.contract_address.lower()
        sent = 0
        elsewhere: set[str] = set()
        senders: set[str] = set()
        tokens: set[str] = set()
        for entry in receipt.get("logs") or []:
            topics = [str(t).lower() for t in entry.get("topics") or []]
            if len(topics) != 3 or topics[0] != TRANSFER_TOPIC:
                continue
            emitter = str(entry.get("address") or "").lower()
            source, target = topic_address(topics[1]), topic_address(topics[2])
            data = str(entry.get("data") or "0x")
            value = int(data, 16) if len(data) > 2 else 0
            if emitter != token:
                if target == to:
                    tokens.add(emitter)
            elif target != to:
                elsewhere.add(target)
            elif wallet and source != wallet:
                senders.add(source)
            else:
                sent += value
        if sent == 0:
            if senders:
                return Reading(
                    REJECTED,
                    f"its {symbol} comes from {', '.join(sorted(senders))}, not from the "
                    f"refund wallet {wallet}",
                )
            if elsewhere:
                return Reading(
                    REJECTED,
                    f"it sends {symbol} to {', '.join(sorted(elsewhere))}, not to the refund "
                    f"address {to}",
                )
            if tokens:
                return Reading(
                    REJECTED,
                    f"it sends another token (contract {', '.join(sorted(tokens))}) to the "
                    f"refund address, not {symbol} (contract {token})",
                )
            return Reading(
                REJECTED, f"it moves no {symbol} (contract {token}) to the refund address {to}"
            )
    if sent < need:
        return Reading(REJECTED, f"it sends {sent} base units, less than the {need} owed")
    more = f"; {sent - need} base units more than owed" if sent > need else ""
    return Reading(MATCHES, f"it sends {sent} base units to {to}{more}", sent)


def read_refund(refund: Refund, client: NodeClient, *, now: datetime) -> Reading:
    """The refund's transaction as the chain shows it now (one request for the transaction
    and its receipt, one for the head; the finalized block too with ``use_finalized_tag``).
    Raises RpcUnavailable / RpcError: nothing is decided then."""
    chain = refund.invoice.asset.chain
    tx, receipt = client.transaction_and_receipt(refund.tx_hash)
    if tx is None:
        if receipt is None and now - refund.created_at > UNSEEN_AFTER:
            return Reading(
                REJECTED,
                f"the node does not know this transaction {UNSEEN_AFTER} after it was "
                "recorded: a mistyped hash, or a transaction that was dropped",
            )
        return Reading(WAITING, "not known to the node yet")
    if receipt is None or receipt.get("blockNumber") is None:
        return Reading(WAITING, "waiting to be mined")
    block = int(str(receipt["blockNumber"]), 16)
    head = client.block_number()
    if block > nodes.confirmed_height(chain, client, head):
        if chain.use_finalized_tag:
            return Reading(WAITING, f"mined in block {block}, not finalized yet")
        found = max(0, head - block + 1)
        return Reading(
            WAITING, f"mined in block {block}: {found} of {chain.confirmations} confirmations"
        )
    return judge(refund, refund.invoice.asset, tx, receipt)


def verify_refund(
    refund_id: int, *, client: NodeClient | None = None, now: datetime | None = None
) -> str:
    """Read a sent refund's transaction on the chain and decide it: confirmed (and recorded
    on the invoice by apply_refund), rejected with the reason (shown in the desk, noted in
    the order's history), or still sent (not mined, not confirmed, or the chain could not
    be read: tried again next cycle, nothing lost). Returns the refund's status. A refund
    no longer sent is left as it is: running it twice changes nothing."""
    now = now or timezone.now()
    refund = Refund.objects.select_related("invoice__asset__chain", "invoice__order").get(
        pk=refund_id
    )
    if refund.status != Refund.STATUS_SENT:
        return refund.status
    try:
        client = client or nodes.client_for(refund.invoice.asset.chain)
        reading = read_refund(refund, client, now=now)
    except (RpcUnavailable, RpcError, nodes.ChainMismatch) as exc:
        _unreadable(refund.pk, exc, now)
        return Refund.STATUS_SENT
    if reading.outcome == WAITING:
        Refund.objects.filter(pk=refund.pk, status=Refund.STATUS_SENT).update(
            last_checked_at=now, last_check=reading.says[:300]
        )
        return Refund.STATUS_SENT
    if reading.outcome == MATCHES:
        apply_refund(
            refund.invoice,
            actor=SCANNER,
            note=f"refund confirmed on-chain: tx {refund.tx_hash} to {refund.to_address}",
            refund=refund,
            sent=reading.sent,
        )
        Refund.objects.filter(pk=refund.pk).update(
            last_checked_at=now, last_check=reading.says[:300]
        )
        log.info("refund confirmed", extra={"refund": refund.pk})
    else:
        with transaction.atomic():
            # A conditional update: of concurrent cycles, one rejects it.
            rejected = Refund.objects.filter(pk=refund.pk, status=Refund.STATUS_SENT).update(
                status=Refund.STATUS_REJECTED,
                rejection_reason=reading.says[:300],
                verified_at=now,
                last_checked_at=now,
                last_check=reading.says[:300],
            )
            if rejected:
                reservations.record_note(
                    refund.invoice.order,
                    actor=SCANNER,
                    reason=f"refund rejected: tx {refund.tx_hash} (invoice {refund.invoice_id}): "
                    f"{reading.says}"[:2000],
                )
        log.warning("refund rejected", extra={"refund": refund.pk, "reason": reading.says})
    return Refund.objects.values_list("status", flat=True).get(pk=refund.pk)


def check_refunds(*, now: datetime | None = None) -> int:
    """Beat: mail what is due, verify every refund being verified (the oldest first; one
    client per chain), then mail the confirmations. Returns how many it confirmed."""
    now = now or timezone.now()
    send_refund_mails(now=now)
    clients: dict[int, NodeClient | Exception] = {}
    confirmed = 0
    pending = Refund.objects.filter(status=Refund.STATUS_SENT).order_by("created_at", "pk")
    for refund_id, chain_id in pending.values_list("pk", "chain_id")[:VERIFY_BATCH]:
        if chain_id not in clients:
            try:
                clients[chain_id] = nodes.client_for(Chain.objects.get(pk=chain_id))
            except (RpcUnavailable, RpcError, nodes.ChainMismatch) as exc:
                clients[chain_id] = exc
        client = clients[chain_id]
        if isinstance(client, Exception):
            _unreadable(refund_id, client, now)
            continue
        confirmed += verify_refund(refund_id, client=client, now=now) == Refund.STATUS_CONFIRMED
    send_refund_mails(now=now)
    return confirmed


def _unreadable(refund_id: int, exc: Exception, now: datetime) -> None:
    """The chain could not be read: the refund stays sent, the desk says why."""
    says = f"the chain could not be read: {type(exc).__name__}: {exc}"
    Refund.objects.filter(pk=refund_id, status=Refund.STATUS_SENT).update(
        last_checked_at=now, last_check=says[:300]
    )
    log.warning("refund verification delayed", extra={"refund": refund_id, "error": str(exc)})


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
    apply_refund(invoice, actor=actor, note=f"refunded: {reason}")
