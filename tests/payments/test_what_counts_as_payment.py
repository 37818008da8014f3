"""Against a real anvil: what settles an invoice, and everything that must never count."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from payments import claims, devchain, invoicing, nodes, refunds, scanning, settlement
from payments.derivation import address_at
from payments.devchain import DevChain
from payments.models import Chain, DepositAddress, Invoice, Transfer
from reservations.errors import BookingRefused, LotUnavailable
from reservations.models import Hold, Order
from reservations.services import Actor
from tests.conftest import Payments

pytestmark = pytest.mark.django_db


def scan(payments: Payments) -> scanning.ScanReport:
    return scanning.scan_chain(Chain.objects.get(pk=payments.chain.pk))


def state(invoice: Invoice) -> tuple[str, str]:
    invoice.refresh_from_db()
    return invoice.status, invoice.exception


def test_usdc_is_due_at_face_value_at_a_fresh_address(payments: Payments, order: Order) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    assert invoice.amount_due == Decimal(order.total_usd) * 10**6
    assert invoice.deposit_address.address == address_at(invoice.deposit_address.index)
    other = invoicing.create_invoice(order, payments.eth)
    assert other.deposit_address.address != invoice.deposit_address.address
    assert not Invoice.objects.get(pk=invoice.pk).is_current


def test_eth_is_priced_by_the_feed_and_not_offered_when_it_is_stale(
    payments: Payments, order: Order
) -> None:
    invoice = invoicing.create_invoice(order, payments.eth)
    assert invoice.usd_per_unit == devchain.ETH_USD
    assert order.total_usd == Decimal("500.00")
    assert invoice.amount_due == Decimal("0.166667") * 10**18  # 500 / 3000, up to 10⁻⁶ ETH
    payments.dev.set_price(devchain.ETH_USD, updated_at=1_000_000)  # 1970: stale
    Invoice.objects.filter(pk=invoice.pk).update(is_current=False)
    with pytest.raises(BookingRefused) as info:
        invoicing.create_invoice(order, payments.eth)
    assert info.value.error_dict["asset"][0].code == "asset_unpriced"
    assert invoicing.create_invoice(order, payments.usdc).asset == payments.usdc  # still works


def test_a_usdc_payment_settles_once_it_has_enough_confirmations(
    payments: Payments, order: Order
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice)
    scan(payments)
    assert state(invoice) == (Invoice.STATUS_PROCESSING, "")  # 1 of 2 confirmations
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_AWAITING_PAYMENT

    payments.dev.mine(1)
    report = scan(payments)
    assert report.settled == [invoice.pk]
    assert state(invoice) == (Invoice.STATUS_SETTLED, "")
    order.refresh_from_db()
    assert order.status == Order.STATUS_PAID
    assert set(order.holds.values_list("status", flat=True)) == {Hold.Status.BOOKED}
    assert order.events.filter(
        to_status=Order.STATUS_PAID, actor_label__contains="payment"
    ).exists()
    assert scan(payments).settled == []  # settled once


def test_eth_sent_by_a_contract_counts(payments: Payments, order: Order) -> None:
    invoice = invoicing.create_invoice(order, payments.eth)
    payments.dev.pay_invoice(invoice, via_contract=True)
    payments.dev.mine(1)
    scan(payments)
    assert state(invoice) == (Invoice.STATUS_SETTLED, "")


def test_a_fake_usdc_never_counts(payments: Payments, order: Order) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.pay_token(
        invoice.deposit_address.address, int(invoice.amount_due), token=devchain.FAKE_USDC
    )
    payments.dev.mine(3)
    scan(payments)
    assert state(invoice) == (Invoice.STATUS_NEW, "")
    assert not Transfer.objects.exists()


def test_a_reverted_transaction_never_counts(payments: Payments, order: Order) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    tx = payments.dev.pay_token_reverted(invoice.deposit_address.address, int(invoice.amount_due))
    payments.dev.mine(3)
    scan(payments)
    assert state(invoice) == (Invoice.STATUS_NEW, "")
    client = nodes.client_for(payments.chain)
    invoice.claim_tx_hash = tx
    assert claims.check_claim(invoice, client) == "reverted"


def test_a_transfer_on_another_chain_never_counts(payments: Payments, order: Order) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    port = devchain.free_port()
    other = devchain.start_anvil(port, chain_id=31338)
    try:
        elsewhere = DevChain(f"http://127.0.0.1:{port}")
        elsewhere.deploy()  # the same contract addresses, on another chain
        elsewhere.pay_token(invoice.deposit_address.address, int(invoice.amount_due))
        elsewhere.mine(3)
        payments.dev.mine(3)
        scan(payments)
        assert state(invoice) == (Invoice.STATUS_NEW, "")
        # and a node serving that other chain is refused outright
        Chain.objects.filter(pk=payments.chain.pk).update(rpc_url=f"http://127.0.0.1:{port}")
        with pytest.raises(nodes.ChainMismatch):
            scan(payments)
    finally:
        other.terminate()
        other.wait(timeout=10)


def test_a_transfer_older_than_the_invoice_never_counts(payments: Payments, order: Order) -> None:
    upcoming = address_at(DepositAddress.objects.filter(chain=payments.chain).count())
    payments.dev.pay_token(upcoming, int(order.total_usd) * 10**6)
    payments.dev.pay_eth(upcoming, 10**18)
    payments.dev.mine(3)
    invoice = invoicing.create_invoice(order, payments.usdc)
    assert invoice.deposit_address.address == upcoming
    scan(payments)
    assert state(invoice) == (Invoice.STATUS_NEW, "")
    # The same for the native coin: what was at the address before is not credited.
    Invoice.objects.filter(pk=invoice.pk).update(is_current=False)
    next_address = address_at(invoice.deposit_address.index + 1)
    payments.dev.pay_eth(next_address, 10**18)
    eth_invoice = invoicing.create_invoice(order, payments.eth)
    assert eth_invoice.deposit_address.address == next_address
    assert eth_invoice.starting_balance == 10**18
    payments.dev.mine(3)
    scan(payments)
    assert state(eth_invoice) == (Invoice.STATUS_NEW, "")


def test_one_transfer_is_never_credited_to_two_invoices(
    payments: Payments, order: Order, make_request: object
) -> None:
    first = invoicing.create_invoice(order, payments.usdc)
    tx = payments.dev.pay_invoice(first)
    payments.dev.mine(2)
    scan(payments)
    second_order = Order.objects.exclude(pk=order.pk).first() or _another_order(make_request)
    second = invoicing.create_invoice(second_order, payments.usdc)
    second.claim_tx_hash = tx
    client = nodes.client_for(payments.chain)
    assert claims.check_claim(second, client) == "unrelated"
    scan(payments)
    assert state(second) == (Invoice.STATUS_NEW, "")
    transfer = Transfer.objects.get()
    with pytest.raises(IntegrityError), transaction.atomic():
        Transfer.objects.create(
            chain=transfer.chain,
            tx_hash=transfer.tx_hash,
            log_index=transfer.log_index,
            invoice=second,
            from_address=transfer.from_address,
            amount=transfer.amount,
            block_number=transfer.block_number,
            block_hash=transfer.block_hash,
            block_time=transfer.block_time,
        )


def _another_order(make_request: object) -> Order:
    from reservations.services import place_order

    request = make_request(lot_count=1, window_days=3)  # type: ignore[operator]
    request.starts_at += timedelta(days=20)
    return place_order(request)


def test_a_transfer_removed_by_a_reorganisation_stops_counting(
    payments: Payments, order: Order
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    before = payments.dev.snapshot()
    payments.dev.pay_invoice(invoice)
    scan(payments)
    assert state(invoice) == (Invoice.STATUS_PROCESSING, "")
    payments.dev.revert(before)  # the block with the payment is gone
    payments.dev.mine(3)
    scan(payments)
    assert state(invoice) == (Invoice.STATUS_NEW, "")
    assert Transfer.objects.get().status == Transfer.STATUS_ORPHANED


def test_partial_then_complete_payment(payments: Payments, order: Order) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    half = invoice.asset.from_units(invoice.amount_due) / 2
    payments.dev.pay_invoice(invoice, half)
    payments.dev.mine(2)
    scan(payments)
    assert state(invoice) == (Invoice.STATUS_PROCESSING, Invoice.EXCEPTION_PAID_PARTIAL)
    assert invoice.amount_outstanding == invoice.amount_due / 2
    payments.dev.pay_invoice(invoice, half)
    payments.dev.mine(2)
    scan(payments)
    assert state(invoice) == (Invoice.STATUS_SETTLED, "")


def test_an_overpayment_settles_and_is_flagged(payments: Payments, order: Order) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice, invoice.asset.from_units(invoice.amount_due) + 5)
    payments.dev.mine(2)
    scan(payments)
    assert state(invoice) == (Invoice.STATUS_SETTLED, Invoice.EXCEPTION_PAID_OVER)


def test_a_payment_after_expiry_is_left_to_the_operator(payments: Payments, order: Order) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    Invoice.objects.filter(pk=invoice.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(2)
    scan(payments)
    assert state(invoice) == (Invoice.STATUS_EXPIRED, Invoice.EXCEPTION_PAID_LATE)
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_AWAITING_PAYMENT


def test_a_claim_with_a_malformed_hash_is_refused(payments: Payments, order: Order) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    for bad in ("0x123", "hello", "0x" + "g" * 64):
        with pytest.raises(BookingRefused) as info:
            claims.claim_payment(invoice, bad)
        assert info.value.error_dict["tx_hash"][0].code == "invalid_tx_hash"
    assert Invoice.objects.get(pk=invoice.pk).claimed_at is None


def test_the_scanner_makes_a_bounded_number_of_requests(payments: Payments, order: Order) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(2)
    report = scan(payments)
    # chainId, blockNumber, one getLogs, one block batch
    assert report.rpc_requests == 4


def test_an_asset_can_shorten_how_long_its_invoices_are_payable(
    payments: Payments, order: Order
) -> None:
    payments.eth.invoice_minutes = 15
    payments.eth.save(update_fields=["invoice_minutes"])
    invoice = invoicing.create_invoice(order, payments.eth)
    assert invoice.expires_at <= timezone.now() + timedelta(minutes=15)
    assert invoice.expires_at < order.hold_expires_at
    usdc = invoicing.create_invoice(order, payments.usdc)
    assert usdc.expires_at == order.hold_expires_at


def _late(payments: Payments, order: Order) -> Invoice:
    invoice = invoicing.create_invoice(order, payments.usdc)
    Invoice.objects.filter(pk=invoice.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    Order.objects.filter(pk=order.pk).update(hold_expires_at=timezone.now() - timedelta(minutes=1))
    from payments.expiry import expire_unpaid_holds

    assert expire_unpaid_holds() == 1  # nothing seen yet: the hold ends, the lots are freed
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(2)
    scan(payments)
    assert state(invoice) == (Invoice.STATUS_EXPIRED, Invoice.EXCEPTION_PAID_LATE)
    return invoice


def test_the_operator_accepts_a_late_payment_while_the_lots_are_free(
    payments: Payments, order: Order
) -> None:
    invoice = _late(payments, order)
    operator = Actor("operator@example.org")
    settlement.accept_late_payment(invoice, actor=operator)
    order.refresh_from_db()
    assert order.status == Order.STATUS_PAID
    assert order.holds.filter(status=Hold.Status.BOOKED).count() == 1
    assert state(invoice)[0] == Invoice.STATUS_SETTLED
    with pytest.raises(BookingRefused):
        settlement.accept_late_payment(Invoice.objects.get(pk=invoice.pk), actor=operator)


def test_a_late_payment_whose_lots_are_gone_is_refunded(
    payments: Payments, order: Order, make_request: Any
) -> None:
    invoice = _late(payments, order)
    from reservations.services import place_order

    taker = make_request(lot_count=2, window_days=3, starts_at=order.starts_at)  # all H200 lots
    place_order(taker)
    operator = Actor("operator@example.org")
    with pytest.raises(LotUnavailable):
        settlement.accept_late_payment(invoice, actor=operator)
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_EXPIRED
    with pytest.raises(BookingRefused):
        refunds.mark_refunded(invoice, actor=operator, reason=" ")
    refunds.mark_refunded(invoice, actor=operator, reason="sent back 500 USDC, tx 0xabc")
    assert state(invoice)[0] == Invoice.STATUS_INVALID
    assert order.events.filter(reason__startswith="refunded: sent back").exists()


def test_an_expired_unpaid_invoice_is_replaced_while_the_hold_lasts(
    payments: Payments, order: Order
) -> None:
    payments.usdc.invoice_minutes = 5
    payments.usdc.save(update_fields=["invoice_minutes"])
    first = invoicing.create_invoice(order, payments.usdc)
    Invoice.objects.filter(pk=first.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    scan(payments)
    assert state(first) == (Invoice.STATUS_EXPIRED, "")
    second = invoicing.create_invoice(order, payments.usdc)
    assert second.pk != first.pk
    assert second.deposit_address != first.deposit_address
    payments.dev.pay_invoice(second)
    payments.dev.mine(2)
    scan(payments)
    assert state(second) == (Invoice.STATUS_SETTLED, "")


def test_a_second_invoice_paid_after_the_order_is_paid_is_left_for_a_refund(
    payments: Payments, order: Order
) -> None:
    old = invoicing.create_invoice(order, payments.usdc)
    current = invoicing.create_invoice(order, payments.eth)  # replaces the USDC invoice
    payments.dev.pay_invoice(current)
    payments.dev.pay_invoice(old)  # someone pays the replaced address too
    payments.dev.mine(2)
    scan(payments)
    # Exactly one of the two settles the order; the other waits for the operator's refund.
    assert sorted([state(current), state(old)]) == [
        (Invoice.STATUS_EXPIRED, Invoice.EXCEPTION_PAID_LATE),
        (Invoice.STATUS_SETTLED, ""),
    ]
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_PAID


def test_fewer_confirmations_than_required_never_settle(payments: Payments, order: Order) -> None:
    Chain.objects.filter(pk=payments.chain.pk).update(confirmations=5)
    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice)
    for _ in range(3):  # 1, 2, 3, 4 confirmations
        scan(payments)
        assert state(invoice)[0] == Invoice.STATUS_PROCESSING
        payments.dev.mine(1)
    scan(payments)
    assert state(invoice)[0] == Invoice.STATUS_PROCESSING  # 4 of 5
    payments.dev.mine(1)
    scan(payments)
    assert state(invoice)[0] == Invoice.STATUS_SETTLED  # the 5th


def test_a_claim_naming_an_unrelated_transaction_says_so(payments: Payments, order: Order) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    elsewhere = payments.dev.pay_token(address_at(999), 10**6)
    invoice.claim_tx_hash = elsewhere
    assert claims.check_claim(invoice, nodes.client_for(payments.chain)) == "unrelated"
    invoice.claim_tx_hash = "0x" + "ab" * 32
    assert claims.check_claim(invoice, nodes.client_for(payments.chain)) == "not_found"
    scan(payments)
    assert state(invoice) == (Invoice.STATUS_NEW, "")


def test_the_dev_chain_keeps_the_walls_time_after_a_revert(anvil_url: str) -> None:
    """Anvil's revert rewinds its clock to the snapshot: every test after the first would
    mine blocks dated in the past, and a payment after a deadline would count as on time."""
    import time as wall

    from payments.devchain import DevChain

    dev = DevChain(anvil_url)
    snapshot = dev.snapshot()
    wall.sleep(3)
    dev.revert(snapshot)
    dev.mine(1)
    mined_at = dev.w3.eth.get_block("latest")["timestamp"]
    assert mined_at >= int(wall.time()) - 1
