"""The scanner as public networks need it, on a real anvil behind a provider-like proxy:
a cursor per chain, bounded ranges split when refused, a re-check window for reorgs, a
deeper reorganisation reported, catch-up after downtime in bounded steps, several endpoints
with failover, and a quorum that a lying endpoint cannot pass."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.core.cache import cache
from django.test import override_settings
from django.utils import timezone

from payments import devchain, invoicing, scanning
from payments.devchain import DevChain
from payments.devproxy import ProviderProxy
from payments.models import Chain, Invoice, RpcEndpoint, Transfer
from payments.nodes import client_for
from payments.rpc import TRANSFER_TOPIC, RpcUnavailable
from reservations.models import Order, OrderEvent
from reservations.services import place_order
from tests.conftest import Payments, RequestFactory

pytestmark = pytest.mark.django_db


def chain_of(payments: Payments) -> Chain:
    return Chain.objects.get(pk=payments.chain.pk)


def scan(payments: Payments) -> scanning.ScanReport:
    return scanning.scan_chain(chain_of(payments))


def configure(payments: Payments, **fields: object) -> None:
    Chain.objects.filter(pk=payments.chain.pk).update(**fields)


def head(dev: DevChain) -> int:
    return int(dev.w3.eth.block_number)


@pytest.fixture
def proxy(payments: Payments) -> Iterator[ProviderProxy]:
    """A provider in front of the test chain: 2,000 blocks and 10,000 results per query."""
    with ProviderProxy(payments.dev.url) as running:
        configure(payments, rpc_url=running.url)
        yield running


def test_each_cycle_reads_the_new_blocks_and_the_recheck_window_only(
    payments: Payments, order: Order, proxy: ProviderProxy
) -> None:
    configure(payments, reorg_window=4)
    invoice = invoicing.create_invoice(order, payments.usdc)
    first = scan(payments)
    assert first.to_block == first.head == head(payments.dev)
    assert chain_of(payments).scanned_block == first.head
    payments.dev.mine(20)
    proxy.ranges.clear()
    second = scan(payments)
    # From the cursor on (the window, 4 blocks back from the head, starts later).
    assert (second.from_block, second.to_block) == (first.head + 1, first.head + 20)
    assert proxy.ranges == [(first.head + 1, first.head + 20)]
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(1)
    proxy.ranges.clear()
    third = scan(payments)
    # Fewer new blocks than the window: the window is read again (reorgs within it are seen).
    assert third.head == second.head + 2
    assert proxy.ranges == [(third.head - 3, third.head)]
    invoice.refresh_from_db()
    assert invoice.status == Invoice.STATUS_SETTLED


def test_a_refused_range_is_split_until_the_provider_answers(
    payments: Payments, order: Order, make_request: RequestFactory, proxy: ProviderProxy
) -> None:
    proxy.max_range, proxy.max_results = 50, 2
    # Configured above what this provider allows: the scanner learns from its refusals.
    configure(payments, block_range_limit=400, reorg_window=300)
    invoices = [invoicing.create_invoice(order, payments.usdc)]
    for k in range(2):
        later = order.starts_at + timedelta(days=10 * (k + 1))
        other = place_order(make_request(lot_count=1, window_days=3, starts_at=later))
        invoices.append(invoicing.create_invoice(other, payments.usdc))
    payments.dev.mine(300)
    for invoice in invoices:  # three transfers: more results than one query may return
        payments.dev.pay_invoice(invoice)
    payments.dev.mine(2)
    report = scan(payments)
    assert proxy.refused > 0
    assert all(high - low + 1 <= 50 for low, high in proxy.ranges)
    assert report.to_block == report.head
    assert sorted(report.settled) == sorted(i.pk for i in invoices)


def test_a_scanner_back_from_downtime_catches_up_in_bounded_steps(order: Order) -> None:
    """Down for 1,600 blocks behind a provider that answers 100 blocks per query (the
    benchmark does 50,000 behind 2,000): each cycle reads a bounded step on from the cursor,
    never more than the provider allows per query, until it is back at the head."""
    port = devchain.free_port()
    node = devchain.start_anvil(port, prune_history=True)
    try:
        dev = DevChain(f"http://127.0.0.1:{port}")
        dev.deploy()
        with ProviderProxy(dev.url, max_range=100) as provider:
            chain = devchain.configure(provider.url, confirmations=2)
            Chain.objects.filter(pk=chain.pk).update(block_range_limit=100, reorg_window=8)
            chain.refresh_from_db()
            usdc = chain.assets.get(symbol="USDC")
            invoice = invoicing.create_invoice(order, usdc)
            # anvil stamps mined blocks a second apart: they run ahead of the wall, so the
            # deadline is moved past them (on time is not the point here).
            later = timezone.now() + timedelta(days=1)
            Invoice.objects.filter(pk=invoice.pk).update(expires_at=later)
            scanning.scan_chain(chain)  # the cursor at the invoice's block
            # Down for 1,601 blocks; the payment lands in the middle.
            dev.mine(800)
            paid_at = head(dev) + 1
            dev.pay_invoice(invoice)
            dev.mine(800)
            provider.ranges.clear()
            steps: list[tuple[int, int, bool]] = []
            with override_settings(PAYMENT_SCAN_RANGES_PER_CYCLE=2):
                for _ in range(12):
                    report = scanning.scan_chain(Chain.objects.get(pk=chain.pk))
                    assert report.from_block is not None
                    assert report.to_block is not None
                    steps.append((report.from_block, report.to_block, report.caught_up))
                    invoice.refresh_from_db()
                    if report.caught_up:
                        break
                    assert Chain.objects.get(pk=chain.pk).scanned_block == report.to_block
    finally:
        node.terminate()
        node.wait(timeout=10)
    assert all(high - low + 1 <= 100 for low, high in provider.ranges)
    assert provider.refused == 0
    # Bounded steps of 2 × 100 blocks, each from the last one's end.
    assert [to - start + 1 for start, to, _ in steps[:-1]] == [200] * (len(steps) - 1)
    assert all(steps[i + 1][0] == steps[i][1] + 1 for i in range(len(steps) - 2))
    # The last one, at the head, reads the re-check window (8 blocks) again too.
    assert steps[-1][0] == steps[-1][1] - 8 + 1
    assert len(steps) == 9
    assert steps[-1][2]
    settled_in = next(i for i, (start, to, _) in enumerate(steps) if start <= paid_at <= to)
    assert settled_in == 4
    assert invoice.status == Invoice.STATUS_SETTLED


def test_a_reorganisation_within_the_window_is_seen_and_one_deeper_is_reported(
    payments: Payments, order: Order
) -> None:
    configure(payments, reorg_window=2)
    invoice = invoicing.create_invoice(order, payments.usdc)
    before = payments.dev.snapshot()
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(10)
    scan(payments)
    invoice.refresh_from_db()
    assert invoice.status == Invoice.STATUS_SETTLED
    checkpoint = chain_of(payments).checkpoint_block
    assert checkpoint is not None
    assert checkpoint > invoice.transfers.get().block_number
    # A reorganisation replaces the payment's block and the checkpoint's: 11 blocks deep,
    # far beyond the window of 2 that each cycle reads again.
    payments.dev.revert(before)
    payments.dev.pay_eth(devchain.DEPLOYER, 1)  # a different first block
    payments.dev.mine(12)
    report = scan(payments)
    assert report.deep_reorg
    chain = chain_of(payments)
    assert chain.deep_reorg_at is not None
    assert f"block {checkpoint} changed" in chain.deep_reorg_note
    assert chain.scanned_block is None  # every open invoice's blocks are read again
    again = scan(payments)
    assert again.from_block == invoice.created_block
    assert Transfer.objects.get().status == Transfer.STATUS_ORPHANED
    note = OrderEvent.objects.filter(order=order, reason__contains="removed by a reorganisation")
    assert note.exists()  # the order stays paid: the operator is told, never silently
    assert chain_of(payments).scanned_block == again.head


def test_the_scanner_fails_over_to_a_live_endpoint_and_records_the_dead_ones_health(
    payments: Payments, order: Order, make_request: RequestFactory
) -> None:
    dead = f"http://127.0.0.1:{devchain.free_port()}"
    configure(payments, rpc_url=dead)
    RpcEndpoint.objects.create(chain=payments.chain, url=payments.dev.url, label="second")
    broken = RpcEndpoint.objects.create(
        chain=payments.chain, url=f"http://127.0.0.1:{devchain.free_port()}", priority=20
    )
    invoice = invoicing.create_invoice(order, payments.usdc)
    later = order.starts_at + timedelta(days=10)
    other = invoicing.create_invoice(
        place_order(make_request(lot_count=1, window_days=3, starts_at=later)), payments.usdc
    )
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(2)
    report = scan(payments)
    assert report.settled == [invoice.pk]
    second = RpcEndpoint.objects.get(label="second")
    assert second.last_ok_at is not None
    assert second.failures == 0
    # The dead first one is tried after the healthy ones for a while: no time lost on it.
    nodes = client_for(chain_of(payments))
    assert nodes.endpoints[0].url == payments.dev.url
    # With every endpoint dead, the cycle fails and the invoices say checking is delayed.
    RpcEndpoint.objects.filter(pk=second.pk).update(is_active=False)
    cache.clear()
    with pytest.raises(RpcUnavailable):
        scan(payments)
    other.refresh_from_db()
    assert other.check_delayed
    broken.refresh_from_db()
    assert broken.failures >= 1
    assert broken.last_error_at is not None
    assert "ConnectionError" in broken.last_error


def fabricated_payment(dev: DevChain, invoice: Invoice, block: int) -> dict[str, object]:
    """A Transfer log paying ``invoice`` in full, in a real block (its real hash), by a
    transaction that does not exist: what a lying or compromised provider would return."""
    found = dev.w3.eth.get_block(block)
    word = "0x" + "0" * 24
    return {
        "address": invoice.asset.contract_address.lower(),
        "topics": [
            TRANSFER_TOPIC,
            word + devchain.PAYER[2:].lower(),
            word + invoice.deposit_address.address[2:].lower(),
        ],
        "data": "0x" + format(int(invoice.amount_due), "064x"),
        "blockNumber": hex(block),
        "blockHash": "0x" + bytes(found["hash"]).hex().removeprefix("0x"),
        "transactionHash": "0x" + secrets.token_hex(32),
        "transactionIndex": "0x0",
        "logIndex": "0x0",
        "removed": False,
    }


def test_a_lying_endpoint_cannot_settle_an_order_when_a_quorum_is_asked(
    payments: Payments, order: Order, make_request: RequestFactory, proxy: ProviderProxy
) -> None:
    # Without a quorum the lie is believed: this is what the quorum is for.
    control = invoicing.create_invoice(order, payments.usdc)
    payments.dev.mine(1)
    proxy.fabricated.append(fabricated_payment(payments.dev, control, head(payments.dev)))
    payments.dev.mine(2)
    assert scan(payments).settled == [control.pk]

    RpcEndpoint.objects.create(chain=payments.chain, url=payments.dev.url, label="honest")
    configure(payments, quorum=2)
    later = order.starts_at + timedelta(days=10)
    lied_to = invoicing.create_invoice(
        place_order(make_request(lot_count=1, window_days=3, starts_at=later)), payments.usdc
    )
    payments.dev.mine(1)
    proxy.fabricated.append(fabricated_payment(payments.dev, lied_to, head(payments.dev)))
    payments.dev.mine(3)
    report = scan(payments)
    assert lied_to.pk not in report.settled
    lied_to.refresh_from_db()
    assert lied_to.status == Invoice.STATUS_PROCESSING  # seen, never confirmed
    transfer = lied_to.transfers.get()
    assert (transfer.status, transfer.attested_by) == (Transfer.STATUS_SEEN, 1)
    # A real payment is returned by both: it settles.
    payments.dev.pay_invoice(lied_to)
    payments.dev.mine(2)
    scan(payments)
    lied_to.refresh_from_db()
    assert lied_to.status == Invoice.STATUS_SETTLED
    real = lied_to.transfers.exclude(pk=transfer.pk).get()
    assert (real.status, real.attested_by) == (Transfer.STATUS_CONFIRMED, 2)


def test_with_a_quorum_a_dead_witness_holds_confirmation_until_it_answers_again(
    payments: Payments, order: Order
) -> None:
    with ProviderProxy(payments.dev.url) as witness:
        RpcEndpoint.objects.create(chain=payments.chain, url=witness.url, label="witness")
        configure(payments, quorum=2)
        invoice = invoicing.create_invoice(order, payments.usdc)
        payments.dev.pay_invoice(invoice)
        payments.dev.mine(2)
        witness.stop()
        scan(payments)
        invoice.refresh_from_db()
        assert invoice.status == Invoice.STATUS_PROCESSING
        assert RpcEndpoint.objects.get(label="witness").failures >= 1
        witness.start()  # back on the same port
        cache.clear()  # its back-off over
        scan(payments)
    invoice.refresh_from_db()
    assert invoice.status == Invoice.STATUS_SETTLED


def test_read_through_follows_the_cursor_while_it_catches_up(
    payments: Payments, order: Order, proxy: ProviderProxy
) -> None:
    configure(payments, block_range_limit=10, reorg_window=2)
    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.mine(50)
    # Down since the invoice was made: nothing read since its block.
    configure(payments, scanned_block=invoice.created_block, read_through=None)
    with override_settings(PAYMENT_SCAN_RANGES_PER_CYCLE=2):
        report = scan(payments)
    assert not report.caught_up
    assert report.to_block is not None
    block = payments.dev.w3.eth.get_block(report.to_block)
    assert report.to_block == invoice.created_block + 20
    chain = chain_of(payments)
    assert chain.read_through == datetime.fromtimestamp(block["timestamp"], tz=UTC)
    assert chain.scanned_block == report.to_block
