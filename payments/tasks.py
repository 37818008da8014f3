"""Celery entry points for payments: thin, idempotent, retried; the database is the truth."""

from __future__ import annotations

import logging

from celery import shared_task
from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone

from infra.beat import once_per_slot
from payments import claims, expiry, invoicing, nodes, refunds, scanning
from payments.models import Chain, Invoice
from payments.rpc import RpcError, RpcUnavailable

log = logging.getLogger(__name__)

SCAN_LOCK_SECONDS = 120


@shared_task(name="payments.tasks.scan_open_invoices", acks_late=True)
@once_per_slot  # one run a period, however many beats send it
def scan_open_invoices() -> int:
    """Beat, every few seconds: one scan cycle per active chain — and per inactive one while
    invoices made on it are watched, so that money sent there is recorded (never settled:
    settlement.recompute) — (a chain being scanned by another worker is skipped; its lock
    expires if that worker died) and the expiry of the holds it has now read up to, then
    the claims' verifications that are due are queued."""
    settled = 0
    watched = Invoice.objects.filter(monitor_until__gt=timezone.now()).exclude(
        status__in=(Invoice.STATUS_SETTLED, Invoice.STATUS_INVALID)
    )
    chains = Chain.objects.filter(Q(is_active=True) | Q(pk__in=watched.values("asset__chain")))
    for chain in chains:
        lock = f"payments:scan:{chain.pk}"
        if not cache.add(lock, "1", timeout=SCAN_LOCK_SECONDS):
            continue
        try:
            settled += len(scanning.scan_chain(chain).settled)
            expiry.expire_due_orders(chain=chain)  # the holds this cycle read up to
            if chain.is_active:
                invoicing.refresh_prices(chain)
        except (RpcUnavailable, RpcError, nodes.ChainMismatch) as exc:
            log.warning("scan delayed", extra={"chain": chain.chain_id, "error": str(exc)})
        finally:
            cache.delete(lock)
    claims.dispatch_verifications()
    return settled


@shared_task(name="payments.tasks.expire_unpaid_holds", acks_late=True)
@once_per_slot  # one run a period, however many beats send it
def expire_unpaid_holds() -> int:
    """Beat, every minute: the unpaid orders whose hold has ended, decided by the chain
    (payments.expiry); a missed run is caught up by the next one."""
    return expiry.expire_unpaid_holds()


@shared_task(name="payments.tasks.verify_invoice", acks_late=True)
def verify_invoice(invoice_id: int) -> str:
    """After "I've paid": the invoice's one pending verification (claims.verify_claim).
    It never retries itself: beat queues the next check when it is due, from the database."""
    return claims.verify_claim(invoice_id)


@shared_task(name="payments.tasks.check_refunds", acks_late=True)
@once_per_slot  # one run a period, however many beats send it
def check_refunds() -> int:
    """Beat, every PAYMENT_REFUND_CHECK_SECONDS (and once after the operator records a
    refund): verify the refunds sent on-chain and mail each step (refunds.check_refunds).
    Idempotent: what is decided is in the database, a second run changes nothing."""
    return refunds.check_refunds()
