"""Faults lose nothing: a dead node, a restarted node, two workers at once, a real worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from payments import claims, devchain, invoicing, scanning
from payments.devchain import DevChain
from payments.models import Chain, Invoice
from payments.tasks import scan_open_invoices
from reservations.models import Order, OrderEvent
from reservations.services import place_order
from tests.concurrency import at_once
from tests.conftest import Payments, RequestFactory, build_inventory
from tests.workers import WorkerProcess, wait_for


def paid_and_confirmed(payments: Payments, order: Order) -> Invoice:
    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(2)
    return invoice


@pytest.mark.django_db
def test_a_dead_node_delays_the_check_and_nothing_is_lost(payments: Payments, order: Order) -> None:
    invoice = paid_and_confirmed(payments, order)
    Chain.objects.filter(pk=payments.chain.pk).update(
        rpc_url=f"http://127.0.0.1:{devchain.free_port()}"
    )
    assert scan_open_invoices() == 0  # no exception: the next beat tries again
    invoice.refresh_from_db()
    assert invoice.check_delayed
    assert invoice.status == Invoice.STATUS_NEW

    Chain.objects.filter(pk=payments.chain.pk).update(rpc_url=payments.dev.url)
    assert scan_open_invoices() == 1
    invoice.refresh_from_db()
    assert (invoice.status, invoice.check_delayed) == (Invoice.STATUS_SETTLED, False)


@pytest.mark.django_db
def test_an_anvil_restart_is_survived(tmp_path: Path, order: Order) -> None:
    port = devchain.free_port()
    state = tmp_path / "anvil-state.json"
    node = devchain.start_anvil(port, state=state)
    dev = DevChain(f"http://127.0.0.1:{port}")
    dev.deploy()
    chain = devchain.configure(dev.url, confirmations=2)
    usdc = chain.assets.get(symbol="USDC")
    invoice = invoicing.create_invoice(order, usdc)
    dev.pay_invoice(invoice)
    node.terminate()  # anvil writes its state on the way out
    node.wait(timeout=10)

    assert scan_open_invoices() == 0
    assert Invoice.objects.get(pk=invoice.pk).check_delayed

    node = devchain.start_anvil(port, state=state)
    try:
        dev.mine(2)
        assert scan_open_invoices() == 1
        assert Invoice.objects.get(pk=invoice.pk).status == Invoice.STATUS_SETTLED
    finally:
        node.terminate()
        node.wait(timeout=10)


@pytest.mark.django_db(transaction=True)
def test_two_workers_settle_an_invoice_exactly_once(
    committed_payments: Payments, make_request: RequestFactory
) -> None:
    build_inventory()
    order = place_order(make_request(lot_count=1, window_days=3))
    invoice = paid_and_confirmed(committed_payments, order)
    chain = Chain.objects.get(pk=committed_payments.chain.pk)
    scans = at_once(3, lambda _: scanning.scan_chain(chain, only=[invoice.pk]).settled)
    settled = [pk for scan in scans for pk in scan]  # type: ignore[union-attr]
    assert settled == [invoice.pk]
    assert OrderEvent.objects.filter(order=order, to_status=Order.STATUS_PAID).count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_ive_paid_is_verified_by_a_real_worker(
    committed_payments: Payments, celery_worker: WorkerProcess, make_request: RequestFactory
) -> None:
    build_inventory()
    order = place_order(make_request(lot_count=1, window_days=3))
    invoice = invoicing.create_invoice(order, committed_payments.usdc)
    tx = committed_payments.dev.pay_invoice(invoice)
    committed_payments.dev.mine(2)

    claims.claim_payment(invoice, tx)  # enqueues verify_invoice after commit

    assert wait_for(lambda: Order.objects.get(pk=order.pk).status == Order.STATUS_PAID), (
        celery_worker.log()
    )
    invoice.refresh_from_db()
    assert (invoice.status, invoice.claim_result) == (Invoice.STATUS_SETTLED, "pays_invoice")
    assert "payments.tasks.verify_invoice" in celery_worker.log()


@pytest.mark.django_db
def test_a_lost_verification_message_loses_nothing(
    payments: Payments, order: Order, django_capture_on_commit_callbacks: object
) -> None:
    invoice = paid_and_confirmed(payments, order)
    with django_capture_on_commit_callbacks() as callbacks:  # type: ignore[operator]
        claims.claim_payment(invoice, "")
    assert len(callbacks) == 1  # the verification task that would have been sent: dropped
    assert scan_open_invoices() == 1  # beat's scanner finds the payment from the database
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_PAID
