"""Refunds as a flow, against a real anvil: the researcher gives an address (page, API), the
operator pastes the outgoing transaction, the scanner verifies it on the chain before the
invoice counts as refunded — and refuses a transaction that is not the refund; mails at
each step, in the order's language."""

from __future__ import annotations

import contextlib
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.core import mail
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from web3 import Web3

from accounts.models import User
from payments import devchain, invoicing, refund_due, refunds, scanning
from payments.models import Chain, Invoice, Refund
from reservations.models import Order, OrderEvent
from reservations.services import Actor, place_order
from tests.concurrency import at_once
from tests.conftest import Payments, RequestFactory, build_inventory
from tests.workers import start_worker, wait_for

pytestmark = pytest.mark.django_db

WALLET = Web3.to_checksum_address("0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc")
"""anvil's third dev account: the operator's refund wallet."""
RESEARCHER = Web3.to_checksum_address("0x90f79bf6eb2c4f870365e785982e1f101e93b906")
"""anvil's fourth dev account: the researcher's own wallet."""
STRANGER = Web3.to_checksum_address("0x15d34aaf54267db7d7c367839aaf71a00a2c6a65")
CHANGELIST = "admin:payments_invoice_changelist"


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def order(db: None, make_request: RequestFactory, ada: tuple[User, str]) -> Order:
    """Ada's order (placed with her account, so the API answers her for it)."""
    build_inventory()
    return place_order(make_request(lot_count=1, window_days=3), user=ada[0])


@pytest.fixture
def another_order(order: Order, make_request: RequestFactory, ada: tuple[User, str]) -> Order:
    """A second order of Ada's, for a second invoice."""
    return place_order(make_request(lot_count=1, window_days=3), user=ada[0])


@pytest.fixture
def desk(db: None) -> Client:
    operator = User.objects.create_superuser("operator@example.org", "a-long-operator-password")
    client = Client()
    client.force_login(operator)
    return client


@pytest.fixture
def wallet(payments: Payments) -> str:
    """The chain's refund wallet configured, holding USDC and the fake USDC."""
    Chain.objects.filter(pk=payments.chain.pk).update(refund_from_address=WALLET)
    for token in (devchain.USDC, devchain.FAKE_USDC):
        payments.dev.wait(
            payments.dev.contract("TestToken", token)
            .functions.mint(WALLET, 10**6 * 10**6)
            .transact({"from": devchain.DEPLOYER})
        )
    return WALLET


def scan(payments: Payments) -> None:
    scanning.scan_chain(Chain.objects.get(pk=payments.chain.pk))


def fresh(invoice: Invoice) -> Invoice:
    return Invoice.objects.select_related("asset__chain", "deposit_address").get(pk=invoice.pk)


def overpaid(payments: Payments, order: Order) -> Invoice:
    """A USDC invoice paid twice: settled, with the second 500 USDC to send back."""
    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice)
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(1)
    scan(payments)
    invoice = fresh(invoice)
    assert (invoice.status, int(invoice.amount_to_refund)) == (
        Invoice.STATUS_SETTLED,
        int(invoice.amount_due),
    )
    return invoice


def with_address(invoice: Invoice) -> Invoice:
    refunds.set_refund_address(invoice, RESEARCHER, actor=Actor("researcher"))
    return fresh(invoice)


def page(client: Client, order: Order, language: str = "en") -> str:
    return client.get(f"/{language}/orders/{order.reference}/{order.secret}/").content.decode()


def give_on_page(client: Client, order: Order, invoice: Invoice, address: str) -> str:
    """The panel's refund form, submitted; the page it leads back to."""
    response = client.post(
        f"/en/orders/{order.reference}/{order.secret}/payment/refund-address/",
        {"invoice": invoice.pk, "address": address},
        follow=True,
    )
    assert response.status_code == 200
    return response.content.decode()


def api_post(client: Client, path: str, body: Any, token: str) -> Any:
    return client.post(
        path,
        json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )


def act(desk: Client, action: str, invoice: Invoice, **extra: str) -> list[str]:
    """An admin action on one invoice, as the operator clicks it; the messages it answers."""
    response = desk.post(
        reverse(CHANGELIST),
        {"action": action, "_selected_action": [invoice.pk], **extra},
        follow=True,
    )
    assert [status for _url, status in response.redirect_chain] == [302]
    return [str(m) for m in get_messages(response.wsgi_request)]


def paste(desk: Client, invoice: Invoice, tx_hash: str) -> list[str]:
    return act(desk, "record_refund", invoice, tx_hash=tx_hash)


def refund_of(invoice: Invoice) -> Refund:
    return Refund.objects.get(invoice=invoice)


def subjects() -> list[str]:
    return [str(m.subject) for m in mail.outbox]


# --------------------------------------------------------------------------- end to end


def test_an_overpayment_goes_back_to_the_researchers_address_once_verified_on_chain(
    payments: Payments,
    order: Order,
    wallet: str,
    client: Client,
    desk: Client,
    ada: tuple[User, str],
    eve: tuple[User, str],
) -> None:
    invoice = overpaid(payments, order)
    due = int(invoice.amount_due)

    # 1. The researcher is mailed that money is owed, with the order page's link.
    refunds.check_refunds()
    assert subjects() == [f"Money to send back for {order.reference}: your refund address"]
    asked = mail.outbox[0]
    assert asked.to == ["ada@example.org"]
    assert "500 USDC on Local dev chain (anvil)" in asked.body
    assert "you paid more than was due" in asked.body
    assert f"/en/orders/{order.reference}/{order.secret}/" in asked.body
    refunds.check_refunds()
    assert len(mail.outbox) == 1  # once

    # 2. The page asks for the address, with a label and what it is for.
    html = page(client, order)
    assert "Refund address" in html
    assert "The address on Local dev chain (anvil) to send 500 USDC back to" in html
    html = give_on_page(client, order, invoice, RESEARCHER.lower())
    assert fresh(invoice).refund_address == RESEARCHER  # stored with its checksum
    assert f"We will send it to {RESEARCHER}" in html
    assert OrderEvent.objects.filter(
        order=order, reason=f"refund address of invoice {invoice.pk}: {RESEARCHER}"
    ).exists()

    # ... and the API: someone else's order is not found, the owner's is answered.
    path = f"/api/v1/orders/{order.reference}/refund-address/"
    assert api_post(client, path, {"address": STRANGER}, eve[1]).status_code == 404
    assert fresh(invoice).refund_address == RESEARCHER
    answer = api_post(client, path, {"address": STRANGER}, ada[1])
    assert answer.status_code == 200, answer.json()
    (line,) = answer.json()
    assert line["invoice"] == invoice.pk
    assert (line["asset"], line["chain_id"], line["amount_owed"]) == ("USDC", 31337, str(due))
    assert (line["refund_address"], line["address_can_change"], line["reason"]) == (
        STRANGER,
        True,
        "overpaid",
    )
    assert api_post(client, path, {"address": RESEARCHER}, ada[1]).status_code == 200
    assert fresh(invoice).refund_address == RESEARCHER
    listed = client.get(
        f"/api/v1/orders/{order.reference}/refunds/", headers={"Authorization": f"Bearer {ada[1]}"}
    )
    assert listed.json()[0]["refund_address"] == RESEARCHER
    other = client.get(
        f"/api/v1/orders/{order.reference}/refunds/", headers={"Authorization": f"Bearer {eve[1]}"}
    )
    assert other.status_code == 404

    # 3. The operator sees exactly what to send, sends it from the wallet, pastes the hash.
    change = desk.get(reverse("admin:payments_invoice_change", args=[invoice.pk])).content.decode()
    assert "500 USDC" in change
    assert f"<code>{due}</code> base units" in change
    assert devchain.USDC in change
    assert "Local dev chain (anvil) (chain id 31337)" in change
    assert f"to <code>{RESEARCHER}</code>" in change
    assert f"from the refund wallet <code>{WALLET}</code>" in change
    listing = desk.get(reverse(CHANGELIST), {"refund_owed": "yes"}).content.decode()
    assert RESEARCHER in listing

    tx = payments.dev.pay_token(RESEARCHER, due, sender=WALLET)
    assert paste(desk, invoice, tx) == [
        f"{invoice}: refund recorded; it is being verified on-chain."
    ]
    refund = refund_of(invoice)
    assert (refund.status, int(refund.amount), refund.to_address, refund.from_address) == (
        Refund.STATUS_SENT,
        due,
        RESEARCHER,
        WALLET,
    )
    assert refund.created_by is not None
    assert refund.created_by.email == "operator@example.org"
    assert int(fresh(invoice).amount_refunded) == 0  # nothing counts before the chain says so

    # 4. Mined but not confirmed yet: still sent; the researcher hears it was sent.
    assert refunds.check_refunds() == 0
    assert refund_of(invoice).status == Refund.STATUS_SENT
    assert "1 of 2 confirmations" in refund_of(invoice).last_check
    assert subjects()[-1] == f"Refund sent for {order.reference}"
    assert tx in mail.outbox[-1].body
    refused = give_on_page(client, order, invoice, STRANGER)  # the address is final now
    assert f"A refund of this payment is on its way to {RESEARCHER}" in refused
    assert fresh(invoice).refund_address == RESEARCHER

    # 5. Confirmed: the invoice is refunded, the researcher mailed.
    payments.dev.mine(1)
    assert refunds.check_refunds() == 1
    refund = refund_of(invoice)
    assert (refund.status, int(refund.amount_sent or 0)) == (Refund.STATUS_CONFIRMED, due)
    assert refund.verified_at is not None
    invoice = fresh(invoice)
    assert (invoice.status, int(invoice.amount_to_refund), int(invoice.amount_refunded)) == (
        Invoice.STATUS_SETTLED,
        0,
        due,
    )
    assert OrderEvent.objects.filter(
        order=order,
        reason=f"refund confirmed on-chain: tx {tx} to {RESEARCHER} "
        f"(500 USDC, invoice {invoice.pk})",
    ).exists()
    assert subjects()[-1] == f"Refund confirmed for {order.reference}"
    assert tx in mail.outbox[-1].body
    html = page(client, order)
    assert f"Refunded: 500 USDC to {RESEARCHER}" in html
    assert 'name="address"' not in html  # nothing more to give

    # 6. Idempotent: again, nothing changes.
    events, mails = OrderEvent.objects.filter(order=order).count(), len(mail.outbox)
    assert refunds.check_refunds() == 0
    assert refunds.verify_refund(refund.pk) == Refund.STATUS_CONFIRMED
    assert (OrderEvent.objects.filter(order=order).count(), len(mail.outbox)) == (events, mails)
    assert int(fresh(invoice).amount_refunded) == due
    payments.dev.mine(1)
    scan(payments)
    assert int(fresh(invoice).amount_to_refund) == 0  # not flagged again


def test_a_late_payment_refunded_closes_its_expired_invoice(
    payments: Payments, order: Order, wallet: str, desk: Client
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    Invoice.objects.filter(pk=invoice.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    payments.dev.pay_token(invoice.deposit_address.address, 123_456)
    payments.dev.mine(1)
    scan(payments)
    late = with_address(fresh(invoice))
    assert (late.status, refund_due.owed_units(late)) == (Invoice.STATUS_EXPIRED, 123_456)
    assert refund_due.lines_for(order)[0].why == "late"

    tx = payments.dev.pay_token(RESEARCHER, 123_456, sender=WALLET)
    payments.dev.mine(1)
    paste(desk, late, tx)
    assert refunds.check_refunds() == 1
    closed = fresh(invoice)
    assert (closed.status, int(closed.amount_refunded), int(closed.amount_to_refund)) == (
        Invoice.STATUS_INVALID,
        123_456,
        0,
    )


def test_an_eth_refund_is_verified_by_the_transactions_value(
    payments: Payments, order: Order, wallet: str, desk: Client
) -> None:
    invoice = invoicing.create_invoice(order, payments.eth)
    due = int(invoice.amount_due)
    payments.dev.pay_invoice(invoice)
    payments.dev.pay_eth(invoice.deposit_address.address, 10**15)
    payments.dev.mine(2)
    scan(payments)
    invoice = with_address(fresh(invoice))
    assert (invoice.status, refund_due.owed_units(invoice)) == (Invoice.STATUS_SETTLED, 10**15)

    stranger = payments.dev.pay_eth(RESEARCHER, 10**15, sender=devchain.PAYER)
    payments.dev.mine(1)
    paste(desk, invoice, stranger)
    refunds.check_refunds()
    assert refund_of(invoice).status == Refund.STATUS_REJECTED
    assert refund_of(invoice).rejection_reason == (
        f"it comes from {devchain.PAYER.lower()}, not from the refund wallet {WALLET.lower()}"
    )

    right = payments.dev.pay_eth(RESEARCHER, 10**15 + 1, sender=WALLET)
    payments.dev.mine(1)
    paste(desk, invoice, right)
    assert refunds.check_refunds() == 1
    confirmed = Refund.objects.get(tx_hash=right)
    assert (confirmed.status, int(confirmed.amount_sent or 0)) == (
        Refund.STATUS_CONFIRMED,
        10**15 + 1,
    )
    assert confirmed.note == f"1 base units more than the {10**15} owed"
    assert (int(fresh(invoice).amount_refunded), int(fresh(invoice).amount_to_refund)) == (
        10**15 + 1,
        0,
    )
    assert int(fresh(invoice).amount_confirmed) == due + 10**15


# --------------------------------------------------------------------------- not the refund


def reverted_from_wallet(payments: Payments, to: str, units: int) -> str:
    """A transaction from the wallet that emits a USDC Transfer to ``to`` and then reverts."""
    dev = payments.dev
    token = dev.contract("TestToken", devchain.USDC)
    dev.wait(token.functions.approve(devchain.FORWARDER, units).transact({"from": WALLET}))
    forwarder = dev.contract("Forwarder", devchain.FORWARDER)
    tx = forwarder.functions.transferThenRevert(
        devchain.USDC, Web3.to_checksum_address(to), units
    ).transact({"from": WALLET, "gas": 200_000})
    assert dev.wait(tx)["status"] == 0
    return "0x" + tx.hex().removeprefix("0x")


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("short", "it sends {short} base units, less than the {due} owed"),
        ("elsewhere", "it sends USDC to {stranger}, not to the refund address {to}"),
        (
            "fake token",
            "it sends another token (contract {fake}) to the refund address, not USDC "
            "(contract {usdc})",
        ),
        ("reverted", "the transaction failed on-chain (reverted): nothing was sent"),
        ("other sender", "its USDC comes from {payer}, not from the refund wallet {wallet}"),
        ("no transfer", "it moves no USDC (contract {usdc}) to the refund address {to}"),
    ],
)
def test_a_transaction_that_is_not_the_refund_is_rejected_with_the_reason(
    payments: Payments, order: Order, wallet: str, desk: Client, case: str, reason: str
) -> None:
    invoice = with_address(overpaid(payments, order))
    due = int(invoice.amount_due)
    dev = payments.dev
    tx = {
        "short": lambda: dev.pay_token(RESEARCHER, due - 1, sender=WALLET),
        "elsewhere": lambda: dev.pay_token(STRANGER, due, sender=WALLET),
        "fake token": lambda: dev.pay_token(
            RESEARCHER, due, token=devchain.FAKE_USDC, sender=WALLET
        ),
        "reverted": lambda: reverted_from_wallet(payments, RESEARCHER, due),
        "other sender": lambda: dev.pay_token(RESEARCHER, due, sender=devchain.PAYER),
        "no transfer": lambda: dev.pay_eth(RESEARCHER, 1, sender=WALLET),
    }[case]()
    dev.mine(1)
    events = OrderEvent.objects.filter(order=order).count()
    paste(desk, invoice, tx)

    refunds.check_refunds()
    refund = refund_of(invoice)
    expected = reason.format(
        short=due - 1,
        due=due,
        stranger=STRANGER.lower(),
        to=RESEARCHER.lower(),
        fake=devchain.FAKE_USDC.lower(),
        usdc=devchain.USDC.lower(),
        payer=devchain.PAYER.lower(),
        wallet=WALLET.lower(),
    )
    assert (refund.status, refund.rejection_reason) == (Refund.STATUS_REJECTED, expected)
    invoice = fresh(invoice)
    assert (int(invoice.amount_refunded), int(invoice.amount_to_refund)) == (0, due)
    assert OrderEvent.objects.filter(order=order).count() == events + 2  # sent, rejected
    assert OrderEvent.objects.filter(order=order, reason__contains=expected).exists()
    # The desk shows why; the researcher's address may change again; no "confirmed" mail.
    change = desk.get(reverse("admin:payments_invoice_change", args=[invoice.pk])).content.decode()
    assert expected in change
    assert refund_due.lines_for(order)[0].can_change
    assert not any("confirmed" in s for s in subjects())
    refunds.check_refunds()  # and it stays rejected
    assert refund_of(invoice).status == Refund.STATUS_REJECTED


def test_without_a_refund_wallet_the_sender_is_not_checked_and_the_desk_warns(
    payments: Payments, order: Order, desk: Client
) -> None:
    invoice = with_address(overpaid(payments, order))
    change = desk.get(reverse("admin:payments_invoice_change", args=[invoice.pk])).content.decode()
    assert "no refund wallet is set on this chain: the sender is not checked" in change
    tx = payments.dev.pay_token(RESEARCHER, int(invoice.amount_due), sender=devchain.PAYER)
    payments.dev.mine(1)
    paste(desk, invoice, tx)
    assert refund_of(invoice).from_address == ""
    assert refunds.check_refunds() == 1
    assert fresh(invoice).amount_to_refund == 0


def test_a_refund_not_on_the_chain_yet_stays_sent_and_an_unknown_one_is_rejected_later(
    payments: Payments, order: Order, another_order: Order, wallet: str, desk: Client
) -> None:
    invoice = with_address(overpaid(payments, order))
    w3 = payments.dev.w3
    w3.provider.make_request("evm_setAutomine", [False])  # type: ignore[arg-type]
    try:
        token = payments.dev.contract("TestToken", devchain.USDC)
        waiting = token.functions.transfer(RESEARCHER, int(invoice.amount_due)).transact(
            {"from": WALLET}
        )
        pending = "0x" + waiting.hex().removeprefix("0x")
        paste(desk, invoice, pending)
        refunds.check_refunds()
        assert refund_of(invoice).status == Refund.STATUS_SENT
        assert refund_of(invoice).last_check == "waiting to be mined"
        later = timezone.now() + refunds.UNSEEN_AFTER * 2
        refunds.check_refunds(now=later)  # known to the node, just not mined: never given up
        assert refund_of(invoice).status == Refund.STATUS_SENT
    finally:
        w3.provider.make_request("evm_setAutomine", [True])  # type: ignore[arg-type]
    payments.dev.mine(2)
    assert refunds.check_refunds() == 1

    # A hash the node never heard of: sent while it may still come, then rejected.
    second = with_address(overpaid(payments, another_order))
    unknown = "0x" + "ab" * 32
    paste(desk, second, unknown)
    refunds.check_refunds()
    assert refund_of(second).last_check == "not known to the node yet"
    assert refund_of(second).status == Refund.STATUS_SENT
    refunds.check_refunds(now=timezone.now() + refunds.UNSEEN_AFTER + timedelta(minutes=1))
    assert refund_of(second).status == Refund.STATUS_REJECTED
    assert "does not know this transaction" in refund_of(second).rejection_reason


def test_a_chain_that_cannot_be_read_loses_nothing(
    payments: Payments, order: Order, wallet: str, desk: Client
) -> None:
    invoice = with_address(overpaid(payments, order))
    tx = payments.dev.pay_token(RESEARCHER, int(invoice.amount_due), sender=WALLET)
    payments.dev.mine(1)
    paste(desk, invoice, tx)
    Chain.objects.filter(pk=payments.chain.pk).update(
        rpc_url=f"http://127.0.0.1:{devchain.free_port()}"
    )
    assert refunds.check_refunds() == 0
    refund = refund_of(invoice)
    assert refund.status == Refund.STATUS_SENT
    assert refund.last_check.startswith("the chain could not be read: RpcUnavailable")
    Chain.objects.filter(pk=payments.chain.pk).update(rpc_url=payments.dev.url)
    assert refunds.check_refunds() == 1
    assert refund_of(invoice).status == Refund.STATUS_CONFIRMED


# --------------------------------------------------------------------------- the address


@pytest.mark.parametrize(
    ("address", "code", "message"),
    [
        ("0x1234", "invalid_refund_address", "0x followed by 40 hexadecimal digits"),
        (
            "0x90F79bf6EB2c4f870365E785982E1f101E93B906",  # one letter's case flipped
            "refund_address_checksum",
            "do not match its checksum (EIP-55): it is probably mistyped",
        ),
        ("0x" + "0" * 40, "refund_address_zero", "This is the zero address"),
        ("deposit", "refund_address_ours", "one of our own addresses"),
        (WALLET, "refund_address_ours", "one of our own addresses"),
        (devchain.USDC, "refund_address_contract", "the address of a coin's contract"),
        ("", "required", "This field is required."),
    ],
)
def test_a_bad_refund_address_is_refused_with_a_clear_message_and_nothing_changes(
    payments: Payments,
    order: Order,
    wallet: str,
    client: Client,
    ada: tuple[User, str],
    address: str,
    code: str,
    message: str,
) -> None:
    invoice = with_address(overpaid(payments, order))
    if address == "deposit":
        address = invoice.deposit_address.address.lower()
    events = OrderEvent.objects.filter(order=order).count()

    html = give_on_page(client, order, invoice, address)
    assert message in html.replace("&#x27;", "'")
    answer = api_post(
        client, f"/api/v1/orders/{order.reference}/refund-address/", {"address": address}, ada[1]
    )
    if code == "required":  # the API's own parser says so first
        assert (answer.status_code, answer.json()["code"]) == (400, "blank")
    else:
        assert answer.status_code == 400
        body = answer.json()
        assert (body["code"], body["fields"]["address"][0]["code"]) == (code, code)
        assert message in body["detail"]
    assert fresh(invoice).refund_address == RESEARCHER
    assert OrderEvent.objects.filter(order=order).count() == events


def test_lower_case_and_checksummed_addresses_are_accepted_and_stored_checksummed(
    payments: Payments, order: Order
) -> None:
    invoice = overpaid(payments, order)
    for given in (RESEARCHER.lower(), RESEARCHER, "0x" + RESEARCHER[2:].upper()):
        refunds.set_refund_address(invoice, f"  {given} ", actor=Actor("researcher"))
        assert fresh(invoice).refund_address == RESEARCHER
    # The same address again is no change: one note only.
    assert OrderEvent.objects.filter(order=order, reason__startswith="refund address").count() == 1


def test_no_address_is_asked_for_an_invoice_that_owes_nothing(
    payments: Payments, order: Order, client: Client, ada: tuple[User, str]
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(1)
    scan(payments)
    assert 'name="address"' not in page(client, order)
    answer = api_post(
        client, f"/api/v1/orders/{order.reference}/refund-address/", {"address": RESEARCHER}, ada[1]
    )
    assert (answer.status_code, answer.json()["code"]) == (400, "nothing_to_refund")
    refunds.check_refunds()
    assert mail.outbox == []


# --------------------------------------------------------------------------- the operator


def test_the_operator_cannot_record_a_refund_before_the_address_or_twice(
    payments: Payments, order: Order, another_order: Order, wallet: str, desk: Client
) -> None:
    invoice = overpaid(payments, order)
    tx = payments.dev.pay_token(RESEARCHER, int(invoice.amount_due), sender=WALLET)
    assert paste(desk, invoice, tx) == [
        f"{invoice}: No refund address has been given yet: the researcher was mailed to give "
        "one on the order page."
    ]
    assert paste(desk, invoice, "0x12") == [
        f"{invoice}: A transaction hash is 0x followed by 64 hexadecimal digits."
    ]
    invoice = with_address(invoice)
    paste(desk, invoice, tx)
    assert paste(desk, invoice, tx) == [
        f"{invoice}: A refund of this invoice is being verified on-chain: wait for its result."
    ]
    # The override waits for the verification too (it would count the money twice).
    assert act(desk, "mark_refunded", invoice, reason="sent by hand") == [
        f"{invoice}: A refund of this invoice is being verified on-chain: wait for its result."
    ]
    assert Refund.objects.count() == 1
    # The same transaction cannot refund another invoice.
    other = with_address(overpaid(payments, another_order))
    assert paste(desk, other, tx) == [f"{other}: This transaction is already recorded as a refund."]
    # One invoice at a time.
    response = desk.post(
        reverse(CHANGELIST),
        {"action": "record_refund", "_selected_action": [invoice.pk, other.pk], "tx_hash": tx},
        follow=True,
    )
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        "Select one invoice: a transaction refunds one."
    ]


def test_the_hash_form_says_what_to_send(
    payments: Payments, order: Order, wallet: str, desk: Client
) -> None:
    invoice = with_address(overpaid(payments, order))
    response = desk.post(
        reverse(CHANGELIST), {"action": "record_refund", "_selected_action": [invoice.pk]}
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert 'name="tx_hash"' in html
    assert f"<code>{int(invoice.amount_due)}</code> base units" in html
    assert f"to <code>{RESEARCHER}</code>" in html


# --------------------------------------------------------------------------- languages


def test_the_refund_form_and_mails_speak_german_and_french(
    payments: Payments, client: Client, make_request: RequestFactory, ada: tuple[User, str]
) -> None:
    build_inventory()
    german = place_order(make_request(lot_count=1, window_days=3, language="de"), user=ada[0])
    overpaid(payments, german)
    refunds.check_refunds()
    (asked,) = mail.outbox
    assert asked.subject == f"Geld zurück für {german.reference}: Ihre Erstattungsadresse"
    assert "Sie haben mehr als fällig bezahlt" in asked.body
    html = page(client, german, "de")
    assert "Erstattungsadresse" in html
    assert "Die Adresse auf Local dev chain (anvil), an die 500 USDC zurückgehen" in html
    html = page(client, german, "fr")
    assert "Adresse de remboursement" in html
    assert "L\u2019adresse sur Local dev chain (anvil) où renvoyer 500 USDC" in html


# --------------------------------------------------------------------------- workers


@pytest.mark.django_db(transaction=True)
def test_verifications_at_once_record_the_refund_exactly_once(
    committed_payments: Payments, make_request: RequestFactory
) -> None:
    build_inventory()
    order = place_order(make_request(lot_count=1, window_days=3))
    invoice = with_address(overpaid(committed_payments, order))
    due = int(invoice.amount_due)
    tx = committed_payments.dev.pay_token(RESEARCHER, due)  # no refund wallet set: any sender
    committed_payments.dev.mine(1)
    refund = refunds.record_refund(invoice, tx, actor=Actor("operator@example.org"))

    outcomes = at_once(3, lambda _: refunds.verify_refund(refund.pk))
    assert outcomes == [Refund.STATUS_CONFIRMED] * 3
    assert int(fresh(invoice).amount_refunded) == due
    assert (
        OrderEvent.objects.filter(order=order, reason__startswith="refund confirmed").count() == 1
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_beat_verifies_a_recorded_refund_once_it_is_confirmed(
    committed_payments: Payments, make_request: RequestFactory, tmp_path: Path
) -> None:
    build_inventory()
    order = place_order(make_request(lot_count=1, window_days=3))
    invoice = with_address(overpaid(committed_payments, order))
    tx = committed_payments.dev.pay_token(RESEARCHER, int(invoice.amount_due))
    environ = {"PAYMENT_REFUND_CHECK_SECONDS": "1"}
    worker_run = contextlib.contextmanager(start_worker)
    with worker_run(beat_schedule=tmp_path / "beat-schedule", environ=environ) as worker:
        refund = refunds.record_refund(invoice, tx, actor=Actor("operator@example.org"))
        assert wait_for(lambda: Refund.objects.get(pk=refund.pk).last_checked_at is not None), (
            worker.log()
        )
        assert Refund.objects.get(pk=refund.pk).status == Refund.STATUS_SENT  # 1 confirmation
        committed_payments.dev.mine(1)
        assert wait_for(lambda: Refund.objects.get(pk=refund.pk).confirmed_mailed_at is not None), (
            worker.log()
        )
    assert Refund.objects.get(pk=refund.pk).sent_mailed_at is not None
    assert fresh(invoice).amount_to_refund == 0


def test_a_late_payment_on_its_way_back_cannot_be_accepted(
    payments: Payments, order: Order, wallet: str, desk: Client
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    Invoice.objects.filter(pk=invoice.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    payments.dev.pay_invoice(invoice)
    payments.dev.mine(1)
    scan(payments)
    late = with_address(fresh(invoice))
    assert (late.status, late.exception) == (Invoice.STATUS_EXPIRED, Invoice.EXCEPTION_PAID_LATE)
    paste(desk, late, payments.dev.pay_token(RESEARCHER, int(late.amount_due), sender=WALLET))
    assert act(desk, "accept_late_payments", late) == [
        f"{late}: A refund of this invoice is being verified on-chain: wait for its result."
    ]
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_AWAITING_PAYMENT
    payments.dev.mine(1)
    assert refunds.check_refunds() == 1
    assert fresh(invoice).status == Invoice.STATUS_INVALID
