"""Against a real anvil: every transfer to a deposit address is recorded, after settlement
too, and money beyond what is due is flagged for refund; amounts are exact integers of base
units end to end; the claim's answer says what the transaction did; the operator's
late-payment actions answer every case with a message (issue 11, findings 4, 5, 8, 9)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from web3 import Web3
from web3.types import Wei

from accounts.models import User
from api.serializers import InvoiceSerializer
from payments import claims, devchain, invoicing, nodes, refunds, scanning
from payments.derivation import address_at
from payments.models import Chain, Invoice, Transfer
from reservations.models import Order, OrderEvent
from reservations.services import Actor
from tests.conftest import Payments

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:payments_invoice_changelist"


def scan(payments: Payments) -> scanning.ScanReport:
    return scanning.scan_chain(Chain.objects.get(pk=payments.chain.pk))


def fresh(invoice: Invoice) -> Invoice:
    return Invoice.objects.select_related("asset__chain", "deposit_address").get(pk=invoice.pk)


@pytest.fixture
def desk(client: Client) -> Client:
    operator = User.objects.create_superuser("operator@example.org", "a-long-operator-password")
    client.force_login(operator)
    return client


def act(desk: Client, action: str, invoice: Invoice, **extra: str) -> list[str]:
    """An admin action on one invoice, as the operator clicks it; the messages it answers."""
    response = desk.post(
        reverse(CHANGELIST),
        {"action": action, "_selected_action": [invoice.pk], **extra},
        follow=True,
    )
    assert [status for _url, status in response.redirect_chain] == [302]
    assert response.status_code == 200
    return [str(m) for m in get_messages(response.wsgi_request)]


# --------------------------------------------------------------------------- finding 4


def test_a_second_payment_to_a_settled_invoice_is_recorded_and_flagged_for_refund(
    payments: Payments, order: Order, desk: Client
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    due = int(invoice.amount_due)
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(1)
    assert scan(payments).settled == [invoice.pk]

    second = payments.dev.pay_invoice(invoice)  # the same 500 USDC, once more
    payments.dev.mine(1)
    assert scan(payments).settled == []  # settled once; the order stays paid

    assert Transfer.objects.filter(invoice=invoice).count() == 2
    assert Transfer.objects.filter(tx_hash=second, status=Transfer.STATUS_CONFIRMED).exists()
    invoice = fresh(invoice)
    assert (invoice.status, invoice.exception) == (
        Invoice.STATUS_SETTLED,
        Invoice.EXCEPTION_PAID_OVER,
    )
    assert int(invoice.amount_confirmed) == 2 * due
    assert int(invoice.amount_to_refund) == due
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_PAID
    note = OrderEvent.objects.get(order=order, reason__contains="to refund")
    assert note.reason == (f"invoice {invoice.pk}: 500 USDC to refund (paid beyond the amount due)")
    # The operator sees it in the invoice admin (filtered by what is owed), and records the
    # refund: the flag clears, the invoice stays settled.
    owed = desk.get(reverse(CHANGELIST), {"refund_owed": "yes"}).content.decode()
    assert order.reference in owed
    assert (
        order.reference not in desk.get(reverse(CHANGELIST), {"refund_owed": "no"}).content.decode()
    )
    assert act(desk, "mark_refunded", invoice, reason="sent 500 USDC back, tx 0xabc") == [
        f"{invoice}: marked refunded."
    ]
    invoice = fresh(invoice)
    assert (invoice.status, int(invoice.amount_to_refund), int(invoice.amount_refunded)) == (
        Invoice.STATUS_SETTLED,
        0,
        due,
    )
    assert order.events.filter(reason__startswith="refunded: sent 500 USDC back").exists()
    payments.dev.mine(1)
    scan(payments)
    assert int(fresh(invoice).amount_to_refund) == 0  # not flagged again


def test_money_reaching_a_refunded_invoice_is_flagged_again(
    payments: Payments, order: Order
) -> None:
    old = invoicing.create_invoice(order, payments.usdc)
    current = invoicing.create_invoice(order, payments.eth)  # replaces the USDC invoice
    payments.dev.pay_invoice(current)
    payments.dev.mine(1)
    scan(payments)
    payments.dev.pay_invoice(old)  # the replaced address is paid too, after the order
    payments.dev.mine(1)
    scan(payments)
    late = fresh(old)
    assert (late.status, late.exception) == (Invoice.STATUS_EXPIRED, Invoice.EXCEPTION_PAID_LATE)
    assert late.amount_to_refund == late.amount_confirmed == late.amount_due
    assert order.events.filter(
        reason=f"invoice {late.pk}: 500 USDC to refund (the order is already paid by another "
        "invoice)"
    ).exists()
    refunds.mark_refunded(late, actor=Actor("operator@example.org"), reason="sent back")
    assert (fresh(old).status, int(fresh(old).amount_to_refund)) == (Invoice.STATUS_INVALID, 0)
    payments.dev.pay_token(old.deposit_address.address, 7)  # and again, after the refund
    payments.dev.mine(1)
    scan(payments)
    refunded = fresh(old)
    assert (refunded.status, int(refunded.amount_to_refund)) == (Invoice.STATUS_INVALID, 7)
    assert Transfer.objects.filter(invoice=old).count() == 2


# --------------------------------------------------------------------------- finding 5


def test_amounts_are_summed_exactly_in_base_units(payments: Payments, order: Order) -> None:
    huge = 2**200  # 61 digits: the default Decimal context keeps 28
    token = payments.dev.contract("TestToken", devchain.USDC)
    payments.dev.wait(
        token.functions.mint(devchain.PAYER, 2 * huge).transact({"from": devchain.DEPLOYER})
    )
    invoice = invoicing.create_invoice(order, payments.usdc)
    Invoice.objects.filter(pk=invoice.pk).update(amount_due=Decimal(huge + 1))
    address = invoice.deposit_address.address

    payments.dev.pay_token(address, huge)
    payments.dev.mine(1)
    scan(payments)
    invoice = fresh(invoice)
    assert int(Transfer.objects.get(invoice=invoice).amount) == huge
    assert (invoice.status, invoice.exception) == (
        Invoice.STATUS_PROCESSING,
        Invoice.EXCEPTION_PAID_PARTIAL,
    )
    assert int(invoice.amount_seen) == huge
    assert int(invoice.amount_outstanding) == 1  # one unit short, exactly

    payments.dev.pay_token(address, 1)  # exactly what is due, in total
    payments.dev.mine(1)
    scan(payments)
    invoice = fresh(invoice)
    assert (invoice.status, invoice.exception) == (Invoice.STATUS_SETTLED, "")
    assert (int(invoice.amount_confirmed), int(invoice.amount_to_refund)) == (huge + 1, 0)
    data = InvoiceSerializer(invoice).data
    assert (data["amount_due"], data["amount_confirmed"]) == (str(huge + 1), str(huge + 1))
    whole, fraction = divmod(huge + 1, 10**6)
    assert invoice.asset.from_units(invoice.amount_confirmed) == Decimal(f"{whole}.{fraction:06}")

    payments.dev.pay_token(address, 1)  # one unit beyond
    payments.dev.mine(1)
    scan(payments)
    invoice = fresh(invoice)
    assert (invoice.status, invoice.exception) == (
        Invoice.STATUS_SETTLED,
        Invoice.EXCEPTION_PAID_OVER,
    )
    assert (int(invoice.amount_confirmed), int(invoice.amount_to_refund)) == (huge + 2, 1)


def test_amounts_just_around_the_due_amount(payments: Payments, order: Order) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    due = int(invoice.amount_due)
    payments.dev.pay_token(invoice.deposit_address.address, due - 1)
    payments.dev.mine(1)
    scan(payments)
    invoice = fresh(invoice)
    assert (invoice.status, invoice.exception, int(invoice.amount_outstanding)) == (
        Invoice.STATUS_PROCESSING,
        Invoice.EXCEPTION_PAID_PARTIAL,
        1,
    )
    payments.dev.pay_token(invoice.deposit_address.address, 1)
    payments.dev.mine(1)
    scan(payments)
    invoice = fresh(invoice)
    assert (invoice.status, invoice.exception, int(invoice.amount_to_refund)) == (
        Invoice.STATUS_SETTLED,
        "",
        0,
    )


# --------------------------------------------------------------------------- finding 8


@pytest.fixture(autouse=True)
def _claims_checked_at_once(settings: Any) -> None:
    """Each claim of these tests is verified at once (no pause between verifications)."""
    settings.PAYMENT_CLAIM_CHECK_SECONDS = 0


def claimed(payments: Payments, invoice: Invoice, tx_hash: str) -> Invoice:
    """ "I've paid" with ``tx_hash``, and its one verification run (as the worker does)."""
    claims.claim_payment(invoice, tx_hash)
    assert fresh(invoice).verification_queued_at is not None
    claims.verify_claim(invoice.pk)
    return fresh(invoice)


def test_the_claims_answer_says_what_a_token_transaction_did(
    payments: Payments, order: Order, client: Client
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    address = invoice.deposit_address.address
    due = int(invoice.amount_due)
    token = payments.dev.contract("TestToken", devchain.USDC)
    approval = token.functions.approve(Web3.to_checksum_address(address), due).transact(
        {"from": devchain.PAYER}
    )
    payments.dev.wait(approval)
    answer = claimed(payments, invoice, "0x" + approval.hex().removeprefix("0x"))
    assert answer.claim_result == "no_value"  # was "pays_invoice"
    assert answer.claim_amount is None
    assert (answer.status, int(answer.amount_seen)) == (Invoice.STATUS_NEW, 0)
    page = client.get(f"/en/orders/{order.reference}/{order.secret}/").content.decode()
    assert "moves no USDC to this address (an approval, or an amount of 0)" in page

    nothing = payments.dev.pay_token(address, 0)
    assert claimed(payments, invoice, nothing).claim_result == "no_value"
    fake = payments.dev.pay_token(address, due, token=devchain.FAKE_USDC)
    assert claimed(payments, invoice, fake).claim_result == "other_token"
    elsewhere = payments.dev.pay_token(address_at(999), due)
    assert claimed(payments, invoice, elsewhere).claim_result == "unrelated"

    half = payments.dev.pay_token(address, due // 2)
    answer = claimed(payments, invoice, half)
    assert answer.claim_result == "pays_invoice"
    assert answer.claim_amount == due // 2
    assert int(answer.amount_seen) == due // 2  # what the answer says is what is credited
    page = client.get(f"/en/orders/{order.reference}/{order.secret}/").content.decode()
    assert "The transaction you named pays 250 USDC to this invoice." in page
    assert InvoiceSerializer(answer).data["claim_amount"] == str(due // 2)


def test_the_claims_answer_says_what_an_eth_transaction_did(
    payments: Payments, order: Order
) -> None:
    invoice = invoicing.create_invoice(order, payments.eth)
    address = invoice.deposit_address.address
    zero = payments.dev.pay_eth(address, 0)
    answer = claimed(payments, invoice, zero)
    assert answer.claim_result == "no_value"  # was "pays_invoice"
    assert answer.claim_amount is None
    assert (answer.status, int(answer.amount_seen)) == (Invoice.STATUS_NEW, 0)

    forwarded = payments.dev.pay_eth(address, 10**15, via_contract=True)
    assert claimed(payments, invoice, forwarded).claim_result == "not_direct"
    direct = payments.dev.pay_eth(address, 10**15)
    answer = claimed(payments, invoice, direct)
    assert answer.claim_result == "pays_invoice"
    assert answer.claim_amount == 10**15

    w3 = payments.dev.w3
    w3.provider.make_request("evm_setAutomine", [False])
    try:
        waiting = w3.eth.send_transaction(
            {"from": devchain.PAYER, "to": Web3.to_checksum_address(address), "value": Wei(1)}
        )
        invoice.claim_tx_hash = "0x" + waiting.hex().removeprefix("0x")
        client = nodes.client_for(payments.chain)
        assert claims.check_claim(invoice, client) == "pending"
    finally:
        w3.provider.make_request("evm_setAutomine", [True])
    payments.dev.mine(1)
    assert claims.check_claim(invoice, client) == "pays_invoice"


# --------------------------------------------------------------------------- finding 9


def test_accepting_a_second_invoice_of_a_paid_order_is_refused_with_a_message(
    payments: Payments, order: Order, desk: Client
) -> None:
    old = invoicing.create_invoice(order, payments.usdc)
    current = invoicing.create_invoice(order, payments.eth)
    payments.dev.pay_invoice(current)
    payments.dev.mine(1)
    scan(payments)
    payments.dev.pay_invoice(old)  # a second payment, to the replaced invoice
    payments.dev.mine(1)
    scan(payments)
    second = fresh(old)
    assert (second.status, second.exception) == (
        Invoice.STATUS_EXPIRED,
        Invoice.EXCEPTION_PAID_LATE,
    )
    events = OrderEvent.objects.filter(order=order).count()

    answer = act(desk, "accept_late_payments", second)  # was: HTTP 500
    assert answer == [
        f"{second}: This order is already paid by another invoice: refund this payment instead."
    ]
    unchanged = fresh(old)
    assert (unchanged.status, unchanged.exception) == (
        Invoice.STATUS_EXPIRED,
        Invoice.EXCEPTION_PAID_LATE,
    )
    assert unchanged.amount_to_refund == unchanged.amount_due  # flagged for refund
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_PAID
    assert OrderEvent.objects.filter(order=order).count() == events

    # The paid invoice itself: settled already.
    assert act(desk, "accept_late_payments", current) == [
        f"{fresh(current)}: This invoice is settled already: there is no late payment to accept."
    ]
    # The refund of the second invoice goes through, once.
    assert act(desk, "mark_refunded", second, reason="sent 500 USDC back") == [
        f"{second}: marked refunded."
    ]
    assert (fresh(old).status, int(fresh(old).amount_refunded)) == (
        Invoice.STATUS_INVALID,
        int(second.amount_due),
    )
    assert act(desk, "mark_refunded", second, reason="again") == [
        f"{second}: This invoice has nothing to refund."
    ]


def test_the_late_payment_actions_answer_every_state_with_a_message(
    payments: Payments, order: Order, desk: Client
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    assert act(desk, "accept_late_payments", invoice) == [
        f"{invoice}: Only a confirmed payment that arrived late can be accepted."
    ]
    assert act(desk, "mark_refunded", invoice, reason="no") == [
        f"{invoice}: This invoice is still open for payment: refund only once it has expired or "
        "settled."
    ]
    # A late payment that is short: refused, nothing changed.
    Invoice.objects.filter(pk=invoice.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    payments.dev.pay_token(invoice.deposit_address.address, int(invoice.amount_due) - 1)
    payments.dev.mine(1)
    scan(payments)
    late = fresh(invoice)
    assert (late.status, late.exception) == (Invoice.STATUS_EXPIRED, Invoice.EXCEPTION_PAID_LATE)
    assert act(desk, "accept_late_payments", late) == [
        f"{late}: This late payment is less than was due: refund it, or wait until the rest is "
        "confirmed."
    ]
    assert fresh(invoice).status == Invoice.STATUS_EXPIRED
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_AWAITING_PAYMENT


def test_a_paid_order_cancelled_owes_its_whole_payment_back(
    payments: Payments, order: Order
) -> None:
    from payments import refund_due
    from reservations.services import cancel_order, system

    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(2)
    scan(payments)
    assert fresh(invoice).status == Invoice.STATUS_SETTLED
    assert fresh(invoice).amount_to_refund == 0
    cancel_order(order, actor=system("test"), reason="the researcher's grant fell through")
    cancelled = fresh(invoice)
    assert cancelled.status == Invoice.STATUS_SETTLED  # it was paid: the money is recorded
    assert cancelled.amount_to_refund == cancelled.amount_due
    assert refund_due.owed_units(cancelled) == int(cancelled.amount_due)
    note = OrderEvent.objects.filter(order=order, reason__contains="cancelled after it was paid")
    assert note.exists()
    # A later scan keeps it owed (the cancelled order keeps none of it).
    payments.dev.mine(1)
    scan(payments)
    assert fresh(invoice).amount_to_refund == cancelled.amount_due
