"""Celery entry points for payments: thin, idempotent, retried; the database is the truth."""

from __future__ import annotations

import logging

from celery import shared_task
from celery.app.task import Task
from django.core.cache import cache
from django.utils import timezone

from payments import services
from payments.models import Chain, Invoice
from payments.rpc import RpcError, RpcUnavailable

log = logging.getLogger(__name__)

SCAN_LOCK_SECONDS = 120


@shared_task(name="payments.tasks.scan_open_invoices", acks_late=True)
def scan_open_invoices() -> int:
    """Beat, every few seconds: one scan cycle per active chain. A chain being scanned by
    another worker is skipped (its lock expires if that worker died)."""
    settled = 0
    for chain in Chain.objects.filter(is_active=True):
        lock = f"payments:scan:{chain.pk}"
        if not cache.add(lock, "1", timeout=SCAN_LOCK_SECONDS):
            continue
        try:
            settled += len(services.scan_chain(chain).settled)
            services.refresh_prices(chain)
        except (RpcUnavailable, RpcError, services.ChainMismatch) as exc:
            log.warning("scan delayed", extra={"chain": chain.chain_id, "error": str(exc)})
        finally:
            cache.delete(lock)
    return settled


@shared_task(bind=True, name="payments.tasks.verify_invoice", acks_late=True, max_retries=None)
def verify_invoice(self: Task, invoice_id: int) -> str:
    """After "I've paid": check the claimed transaction and the invoice's address now, then
    again with growing pauses until it settles or its monitoring window ends. A lost task
    loses nothing: the beat scanner watches every open invoice anyway."""
    invoice = Invoice.objects.select_related("asset__chain", "deposit_address").get(pk=invoice_id)
    if invoice.status in (Invoice.STATUS_SETTLED, Invoice.STATUS_INVALID):
        return invoice.status
    if timezone.now() > invoice.monitor_until:
        return invoice.status
    try:
        client = services.client_for(invoice.asset.chain)
        result = services.check_claim(invoice, client)
        if result:
            Invoice.objects.filter(pk=invoice.pk).update(claim_result=result)
        services.scan_chain(invoice.asset.chain, client=client, only=[invoice.pk])
    except (RpcUnavailable, RpcError, services.ChainMismatch) as exc:
        Invoice.objects.filter(pk=invoice.pk).update(check_delayed=True)
        log.warning("verification delayed", extra={"invoice": invoice.pk, "error": str(exc)})
    invoice.refresh_from_db()
    if invoice.status != Invoice.STATUS_SETTLED:
        raise self.retry(countdown=min(300, 3 * 2 ** min(self.request.retries, 7)))
    return invoice.status
