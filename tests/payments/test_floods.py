"""Floods of "I've paid" and of coin switches (issue 10, items 4 and 5), against the real
PostgreSQL, Redis broker, anvil and a real Celery worker.

Claims coalesce: an invoice has at most one verification queued or running, however many
claims arrive, and a later claim's hash is what it checks. Switching coins reuses the
order's earlier invoices and addresses, and is limited per order.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone
from redis import Redis

from accounts.models import User
from api.models import ApiToken
from payments import claims, devchain, invoicing, scanning
from payments.derivation import address_at
from payments.models import Asset, Chain, CoinChoice, DepositAddress, Invoice
from payments.tasks import scan_open_invoices, verify_invoice
from reservations.errors import BookingRefused, RateLimited
from reservations.models import Order
from reservations.services import place_order
from tests.concurrency import at_once
from tests.conftest import Payments, RequestFactory, build_inventory
from tests.workers import WorkerProcess, wait_for

VERIFY = "payments.tasks.verify_invoice"


@dataclass
class BrokerQueue:
    """A queue of its own in the real Redis broker: what .delay() sent, message by message."""

    name: str
    redis: Redis

    def messages(self) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self.redis.lrange(self.name, 0, -1)]

    def verifications(self, invoice: Invoice) -> int:
        return sum(
            1
            for m in self.messages()
            if m["headers"]["task"] == VERIFY
            and json.loads(base64.b64decode(m["body"]))[0] == [invoice.pk]
        )


@pytest.fixture
def broker_queue() -> Iterator[BrokerQueue]:
    from config.celery import app

    queue = BrokerQueue(
        f"test-floods-{uuid.uuid4().hex[:12]}", Redis.from_url(str(settings.CELERY_BROKER_URL))
    )
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue.name
    try:
        yield queue
    finally:
        app.conf.task_default_queue = previous
        queue.redis.delete(queue.name)


def new_order(make_request: RequestFactory) -> Order:
    build_inventory()
    return place_order(make_request(lot_count=1, window_days=3))


# --------------------------------------------------------------------------- "I've paid"


@pytest.mark.django_db(transaction=True)
def test_it_queues_one_verification_for_many_concurrent_claims(
    committed_payments: Payments, broker_queue: BrokerQueue, make_request: RequestFactory
) -> None:
    invoice = invoicing.create_invoice(new_order(make_request), committed_payments.usdc)
    hashes = [f"0x{i:064x}" for i in range(1, 26)]

    outcomes = at_once(len(hashes), lambda i: claims.claim_payment(invoice, hashes[i]))

    assert not [o for o in outcomes if isinstance(o, Exception)], outcomes
    assert broker_queue.verifications(invoice) == 1  # was one per claim
    invoice.refresh_from_db()
    assert invoice.claim_tx_hash in hashes  # the last claim's, recorded for that verification
    assert invoice.verification_queued_at is not None


@pytest.mark.django_db(transaction=True)
def test_a_later_claims_hash_is_checked_by_the_pending_verification(
    committed_payments: Payments, broker_queue: BrokerQueue, make_request: RequestFactory
) -> None:
    dev = committed_payments.dev
    order = new_order(make_request)
    invoice = invoicing.create_invoice(order, committed_payments.usdc)
    unrelated = dev.pay_token(address_at(999), 1)  # a real transfer, to someone else
    claims.claim_payment(invoice, unrelated)
    paying = dev.pay_invoice(invoice)
    dev.mine(2)
    claims.claim_payment(invoice, paying)  # the researcher corrects the hash

    (message,) = broker_queue.messages()  # still the one verification
    assert message["headers"]["task"] == VERIFY
    broker_queue.redis.delete(broker_queue.name)
    args = json.loads(base64.b64decode(message["body"]))[0]
    verify_invoice.apply(args=args)  # that message, run

    invoice.refresh_from_db()
    assert (invoice.claim_tx_hash, invoice.claim_result) == (paying, "pays_invoice")
    assert invoice.status == Invoice.STATUS_SETTLED
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_PAID
    assert broker_queue.verifications(invoice) == 0  # the task does not queue itself again
    assert invoice.verification_queued_at is None


@pytest.mark.django_db
def test_claims_right_after_a_check_wait_for_the_next_one(
    payments: Payments,
    order: Order,
    broker_queue: BrokerQueue,
    django_capture_on_commit_callbacks: Any,
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    with django_capture_on_commit_callbacks(execute=True):
        claims.claim_payment(invoice, "")
    verify_invoice.apply(args=(invoice.pk,))
    invoice.refresh_from_db()
    assert invoice.claim_checked_at is not None
    gap = timedelta(seconds=settings.PAYMENT_CLAIM_CHECK_SECONDS)
    assert invoice.verification_due_at == invoice.claim_checked_at + gap  # the next check

    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(50):
            claims.claim_payment(invoice, "")

    assert broker_queue.verifications(invoice) == 1  # the first claim's; 50 more wait
    assert Invoice.objects.get(pk=invoice.pk).verification_due_at == invoice.verification_due_at


@pytest.mark.django_db
def test_beat_queues_due_verifications_and_lost_ones_again(
    payments: Payments,
    order: Order,
    broker_queue: BrokerQueue,
    django_capture_on_commit_callbacks: Any,
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    with django_capture_on_commit_callbacks() as dropped:
        claims.claim_payment(invoice, "")
    assert len(dropped) == 1  # the message that would have been sent: lost
    assert claims.dispatch_verifications() == 0  # queued a moment ago: not yet taken as lost
    later = timezone.now() + claims.VERIFICATION_LEASE + timedelta(seconds=1)
    assert claims.dispatch_verifications(now=later) == 1
    assert claims.dispatch_verifications(now=later) == 0  # once
    assert broker_queue.verifications(invoice) == 1

    broker_queue.redis.delete(broker_queue.name)
    verify_invoice.apply(args=(invoice.pk,))  # nothing paid yet: it says when to look again
    due = Invoice.objects.get(pk=invoice.pk).verification_due_at
    assert due is not None
    assert due > timezone.now()
    assert scan_open_invoices() == 0
    assert broker_queue.verifications(invoice) == 0  # not due yet
    assert claims.dispatch_verifications(now=due) == 1  # beat queues the next check


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_flood_of_claims_is_verified_once_by_a_real_worker(
    committed_payments: Payments, celery_worker: WorkerProcess, make_request: RequestFactory
) -> None:
    order = new_order(make_request)
    invoice = invoicing.create_invoice(order, committed_payments.usdc)
    tx = committed_payments.dev.pay_invoice(invoice)
    committed_payments.dev.mine(2)
    seen = len(celery_worker.log())

    at_once(25, lambda _: claims.claim_payment(invoice, tx))

    paid = wait_for(lambda: Order.objects.get(pk=order.pk).status == Order.STATUS_PAID)
    assert paid, celery_worker.log()
    time.sleep(2)  # any further message would have been received by now
    received = [
        line
        for line in celery_worker.log()[seen:].splitlines()
        if f"{VERIFY}[" in line and "received" in line.lower()
    ]
    assert len(received) == 1, received  # was one per claim
    invoice.refresh_from_db()
    assert (invoice.status, invoice.claim_result) == (Invoice.STATUS_SETTLED, "pays_invoice")
    assert invoice.verification_queued_at is None


# --------------------------------------------------------------------------- coin switching


def choose(client: Client, order: Order, asset: Asset) -> Any:
    url = f"/en/orders/{order.reference}/{order.secret}/payment/asset/"
    return client.post(url, {"asset": asset.pk}, follow=True)


def current(order: Order) -> Invoice:
    return Invoice.objects.select_related("deposit_address").get(order=order, is_current=True)


@pytest.mark.django_db
def test_switching_fifty_times_between_two_coins_makes_two_invoices_and_addresses(
    client: Client, payments: Payments, order: Order, settings: Any
) -> None:
    settings.PAYMENT_COIN_SWITCHES_PER_HOUR = 100  # the reuse alone, not the limit
    addresses: dict[str, str] = {}
    for turn in range(50):
        asset = payments.eth if turn % 2 else payments.usdc
        assert choose(client, order, asset).status_code == 200
        chosen = current(order)
        assert chosen.asset == asset
        assert addresses.setdefault(asset.symbol, chosen.deposit_address.address) == (
            chosen.deposit_address.address
        )
    assert Invoice.objects.filter(order=order).count() == 2
    assert DepositAddress.objects.count() == 2
    assert CoinChoice.objects.filter(order=order).count() == 50  # the audit trail
    assert CoinChoice.objects.filter(order=order, reused=True).count() == 48


@pytest.mark.django_db(transaction=True)
def test_concurrent_switches_between_two_coins_make_two_invoices(
    committed_payments: Payments, make_request: RequestFactory, settings: Any
) -> None:
    settings.PAYMENT_COIN_SWITCHES_PER_HOUR = 100  # the reuse alone, not the limit
    order = new_order(make_request)
    coins = (committed_payments.usdc, committed_payments.eth)

    outcomes = at_once(16, lambda i: invoicing.create_invoice(order, coins[i % 2]))

    assert not [o for o in outcomes if isinstance(o, Exception)], outcomes
    assert Invoice.objects.filter(order=order).count() == 2
    assert Invoice.objects.filter(order=order, is_current=True).count() == 1
    assert DepositAddress.objects.count() == 2


@pytest.mark.django_db
def test_the_same_coin_or_one_chosen_before_needs_no_chain(
    payments: Payments, order: Order
) -> None:
    usdc = invoicing.create_invoice(order, payments.usdc)
    invoicing.create_invoice(order, payments.eth)
    Chain.objects.filter(pk=payments.chain.pk).update(
        rpc_url=f"http://127.0.0.1:{devchain.free_port()}"  # the node is down
    )
    asset = Asset.objects.get(pk=payments.usdc.pk)
    assert invoicing.create_invoice(order, asset).pk == usdc.pk
    assert invoicing.create_invoice(order, asset).pk == usdc.pk  # the same coin again
    assert current(order).pk == usdc.pk


@pytest.mark.django_db
def test_an_expired_invoice_is_not_reused(payments: Payments, order: Order) -> None:
    first = invoicing.create_invoice(order, payments.usdc)
    invoicing.create_invoice(order, payments.eth)
    Invoice.objects.filter(pk=first.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    again = invoicing.create_invoice(order, payments.usdc)
    assert again.pk != first.pk
    assert again.deposit_address != first.deposit_address


@pytest.mark.django_db
def test_it_refuses_switches_beyond_the_limit_with_a_clear_message_and_changes_nothing(
    client: Client, payments: Payments, order: Order, settings: Any
) -> None:
    settings.PAYMENT_COIN_SWITCHES_PER_HOUR = 3
    user = User.objects.create_user("ada@example.org")
    _record, token = ApiToken.issue(user, "pipeline")
    Order.objects.filter(pk=order.pk).update(user=user)
    for asset in (payments.usdc, payments.eth, payments.usdc):
        invoicing.create_invoice(order, asset)
    before = (Invoice.objects.count(), DepositAddress.objects.count(), current(order).pk)

    refused = client.post(
        f"/api/v1/orders/{order.reference}/invoice/",
        {"asset": "ETH"},
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert refused.status_code == 429
    assert refused.json()["code"] == "too_many_switches"
    assert "changed too often" in refused.json()["detail"]
    assert 3000 < int(refused["Retry-After"]) <= 3600
    page = choose(client, order, payments.eth).content.decode()
    assert "The coin of this order was changed too often" in page
    assert "choose another coin again in 60 minutes" in page
    with pytest.raises(RateLimited):
        invoicing.create_invoice(order, payments.eth)

    after = (Invoice.objects.count(), DepositAddress.objects.count(), current(order).pk)
    assert after == before
    assert CoinChoice.objects.filter(order=order).count() == 3
    # The coin in use again is no switch: still answered.
    assert invoicing.create_invoice(order, payments.usdc).pk == before[2]


@pytest.mark.django_db
def test_it_refuses_more_open_invoices_than_allowed(
    payments: Payments, order: Order, settings: Any
) -> None:
    settings.PAYMENT_OPEN_INVOICES_PER_ORDER = 2
    dai = Asset.objects.create(
        chain=payments.chain,
        symbol="DAI",
        contract_address=payments.dev.deploy_token("Dai", "DAI", 6),
        decimals=6,
    )
    first = invoicing.create_invoice(order, payments.usdc)
    invoicing.create_invoice(order, payments.eth)
    with pytest.raises(BookingRefused) as refused:
        invoicing.create_invoice(order, dai)
    assert refused.value.error_dict["asset"][0].code == "too_many_open_invoices"
    assert "already has 2 invoices waiting for payment" in refused.value.messages[0]
    assert Invoice.objects.filter(order=order).count() == 2

    Invoice.objects.filter(pk=first.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert invoicing.create_invoice(order, dai).asset == dai  # one expired: room again


@pytest.mark.django_db
def test_a_superseded_invoice_stays_watched(payments: Payments, order: Order) -> None:
    old = invoicing.create_invoice(order, payments.usdc)
    invoicing.create_invoice(order, payments.eth)
    payments.dev.pay_invoice(old)  # paid to the address shown before the switch
    payments.dev.mine(2)
    scanning.scan_chain(Chain.objects.get(pk=payments.chain.pk))
    assert Invoice.objects.get(pk=old.pk).status == Invoice.STATUS_SETTLED
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_PAID
