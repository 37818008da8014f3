"""The scanner on a database holding history (issue 15): a cycle reads the transfers of the
invoices it watches, not every transfer recorded in the blocks it re-reads."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.db.models.signals import post_init
from django.utils import timezone

from payments import invoicing, scanning
from payments.derivation import fingerprint
from payments.models import Chain, DepositAddress, Invoice, Transfer
from reservations.models import Order
from tests.conftest import Payments

pytestmark = pytest.mark.django_db

HISTORY = 2_000
ONE = Decimal(10**6)  # 1 USDC in base units


def history(payments: Payments, order: Order, head: int) -> None:
    """``HISTORY`` old invoices, no longer watched, each paid by a transfer recorded in the
    blocks the next cycle reads again (as a fresh chain's first blocks are)."""
    now = timezone.now()
    addresses = DepositAddress.objects.bulk_create(
        DepositAddress(
            chain=payments.chain,
            index=500_000 + i,
            address=f"0x{500_000 + i:040x}",
            xpub_fingerprint=fingerprint(),
        )
        for i in range(HISTORY)
    )
    invoices = Invoice.objects.bulk_create(
        Invoice(
            order=order,
            asset=payments.usdc,
            deposit_address=address,
            amount_due=ONE,
            usd_due=1,
            usd_per_unit=1,
            status=Invoice.STATUS_EXPIRED,
            amount_seen=ONE,
            amount_confirmed=ONE,
            amount_refunded=ONE,
            created_block=0,
            expires_at=now,
            monitor_until=now,
            is_current=False,
        )
        for address in addresses
    )
    Transfer.objects.bulk_create(
        Transfer(
            chain=payments.chain,
            tx_hash=f"0x{i:064x}",
            log_index=0,
            invoice=invoice,
            from_address="0x" + "ab" * 20,
            amount=ONE,
            block_number=head,
            block_hash="0x" + "cd" * 32,
            block_time=now,
            status=Transfer.STATUS_CONFIRMED,
        )
        for i, invoice in enumerate(invoices)
    )


def test_a_cycle_reads_only_the_transfers_of_the_invoices_it_watches(
    payments: Payments, order: Order
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    history(payments, order, head=payments.dev.w3.eth.block_number)
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(2)
    loaded: list[int] = []

    def count(sender: Any, instance: Transfer, **kwargs: Any) -> None:
        loaded.append(instance.pk)

    post_init.connect(count, sender=Transfer)
    try:
        report = scanning.scan_chain(Chain.objects.get(pk=payments.chain.pk))
    finally:
        post_init.disconnect(count, sender=Transfer)
    assert report.settled == [invoice.pk]  # the watched payment is found and settled
    # The cycle builds the transfer it found and reads back its own (a handful), never the
    # year of others recorded in the same blocks.
    assert len(loaded) < 10, len(loaded)
    assert Transfer.objects.filter(status=Transfer.STATUS_CONFIRMED).count() == HISTORY + 1
