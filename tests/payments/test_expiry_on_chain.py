"""A hold ends by the chain, up to its deadline, by block time (issue 11, items 6 and 7).

On an anvil of its own per test (block times are set here), driven by a simulated clock:
each tick runs what beat runs — the expiry first (the order that lost bookings: a worker
that resumes after the deadline), then a scan cycle and the expiries it triggers — and
checks the invariants after every step: no lot is both released and paid for, and a
payment mined before the deadline never ends "paid late".
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.conf import settings
from django.test import Client, override_settings
from django.utils import timezone

from payments import devchain, expiry, invoicing, scanning
from payments.devchain import DevChain
from payments.expiry import expire_unpaid_holds
from payments.models import Asset, Chain, Invoice
from payments.rpc import RpcUnavailable
from payments.tasks import scan_open_invoices
from reservations.models import Hold, Order
from tests.conftest import Payments

pytestmark = pytest.mark.django_db

HOLD_LEFT = timedelta(minutes=10)
"""The hold's deadline, from the start of the simulated clock."""


@pytest.fixture
def own_chain(db: None) -> Iterator[Payments]:
    """A fresh anvil: these tests move its block time forward, which must not leak."""
    port = devchain.free_port()
    node = devchain.start_anvil(port)
    try:
        dev = DevChain(f"http://127.0.0.1:{port}")
        dev.deploy()
        chain = devchain.configure(dev.url, confirmations=2)
        yield Payments(
            dev=dev,
            chain=chain,
            usdc=Asset.objects.get(chain=chain, symbol="USDC"),
            eth=Asset.objects.get(chain=chain, symbol="ETH"),
        )
    finally:
        node.terminate()
        node.wait(timeout=10)


@dataclass
class Beat:
    """Beat and the chain on one simulated clock."""

    chain: Payments
    order: Order
    invoice: Invoice
    now: datetime
    deadline: datetime
    log: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, chain: Payments, order: Order, asset: Asset) -> Beat:
        invoice = invoicing.create_invoice(order, asset)
        head = chain.dev.w3.eth.get_block("latest")["timestamp"]
        now = datetime.fromtimestamp(head + 2, tz=UTC)
        deadline = now + HOLD_LEFT
        Order.objects.filter(pk=order.pk).update(hold_expires_at=deadline)
        Invoice.objects.filter(pk=invoice.pk).update(
            expires_at=deadline,
            monitor_until=deadline + timedelta(hours=settings.PAYMENT_MONITOR_HOURS),
        )
        invoice.refresh_from_db()
        return cls(chain, order, invoice, now, deadline)

    # ------------------------------------------------------------------ the chain

    def _next_block_at(self, moment: datetime) -> None:
        self.chain.dev.w3.provider.make_request(
            "evm_setNextBlockTimestamp",  # type: ignore[arg-type]
            [int(moment.timestamp())],
        )

    def pay_at(self, moment: datetime, amount: Decimal | None = None) -> None:
        """A payment mined in a block of time ``moment``."""
        self._next_block_at(moment)
        self.chain.dev.pay_invoice(self.invoice, amount)

    def block_at(self, moment: datetime) -> None:
        self._next_block_at(moment)
        self.chain.dev.mine(1)

    def node_down(self) -> None:
        dead = f"http://127.0.0.1:{devchain.free_port()}"
        Chain.objects.filter(pk=self.chain.chain.pk).update(rpc_url=dead)

    def node_up(self) -> None:
        Chain.objects.filter(pk=self.chain.chain.pk).update(rpc_url=self.chain.dev.url)

    # ------------------------------------------------------------------ beat

    def at(self, moment: datetime) -> Beat:
        self.now = moment
        return self

    def expire(self) -> int:
        expired = expire_unpaid_holds(now=self.now)
        self.check()
        return expired

    def scan(self) -> None:
        chain = Chain.objects.get(pk=self.chain.chain.pk)
        try:
            scanning.scan_chain(chain, now=self.now)
        except RpcUnavailable:
            pass  # the task logs "scan delayed"; the next cycle tries again
        else:
            expiry.expire_due_orders(chain=chain, now=self.now)
        self.check()

    def tick(self) -> None:
        self.expire()
        self.scan()

    def ticks(self, until: datetime, every: timedelta = timedelta(minutes=1)) -> None:
        while self.now + every <= until:
            self.at(self.now + every).tick()

    # ------------------------------------------------------------------ invariants

    def check(self) -> None:
        order = Order.objects.get(pk=self.order.pk)
        holds = list(order.holds.values_list("status", flat=True))
        if order.status == Order.STATUS_PAID:
            assert holds == [Hold.Status.BOOKED] * order.lot_count, (self.now, holds)
        elif order.status == Order.STATUS_EXPIRED:
            assert Hold.Status.BOOKED not in holds, holds
            assert Hold.Status.HELD not in holds, holds
        else:
            assert order.status == Order.STATUS_AWAITING_PAYMENT
            assert holds == [Hold.Status.HELD] * order.lot_count, (self.now, holds)
        late = Invoice.objects.filter(
            order=order, exception=Invoice.EXCEPTION_PAID_LATE, unverified_at_expiry=False
        )
        for invoice in late.select_related("asset"):
            on_time = expiry.on_time_amount(invoice)
            assert on_time < invoice.amount_due, f"paid in time, called late at {self.now}"

    def state(self) -> tuple[str, str, str]:
        self.invoice.refresh_from_db()
        self.order.refresh_from_db()
        return self.order.status, self.invoice.status, self.invoice.exception


@pytest.mark.parametrize("symbol", ["USDC", "ETH"])
def test_a_payment_mined_before_the_deadline_counts_though_the_worker_stalled_across_it(
    own_chain: Payments, order: Order, symbol: str
) -> None:
    asset = own_chain.usdc if symbol == "USDC" else own_chain.eth
    beat = Beat.start(own_chain, order, asset)
    beat.ticks(until=beat.deadline - timedelta(minutes=2))  # the worker, healthy
    assert beat.state() == (Order.STATUS_AWAITING_PAYMENT, Invoice.STATUS_NEW, "")

    # The worker stalls; meanwhile the payment is mined 30 s before the deadline and
    # confirmed by a block after it.
    beat.pay_at(beat.deadline - timedelta(seconds=30))
    beat.block_at(beat.deadline + timedelta(seconds=60))

    # It resumes 5 minutes after the deadline, the expiry first.
    beat.at(beat.deadline + timedelta(minutes=5)).expire()
    assert beat.state() == (Order.STATUS_PAID, Invoice.STATUS_SETTLED, "")
    beat.scan()
    beat.ticks(until=beat.deadline + timedelta(minutes=30))
    assert beat.state() == (Order.STATUS_PAID, Invoice.STATUS_SETTLED, "")
    assert beat.invoice.amount_on_time == beat.invoice.amount_due
    assert not order.events.filter(to_status=Order.STATUS_EXPIRED).exists()


def test_a_payment_mined_after_the_deadline_is_still_late(
    own_chain: Payments, order: Order
) -> None:
    beat = Beat.start(own_chain, order, own_chain.eth)
    beat.ticks(until=beat.deadline - timedelta(minutes=2))
    beat.pay_at(beat.deadline + timedelta(seconds=30))  # stalled worker, but too late
    beat.block_at(beat.deadline + timedelta(seconds=60))
    beat.at(beat.deadline + timedelta(minutes=5)).expire()
    assert beat.state() == (Order.STATUS_EXPIRED, Invoice.STATUS_EXPIRED, "paid_late")
    assert beat.invoice.amount_on_time == 0
    assert beat.invoice.amount_seen == beat.invoice.amount_due


def test_a_dust_payment_does_not_pin_the_lots(own_chain: Payments, order: Order) -> None:
    beat = Beat.start(own_chain, order, own_chain.usdc)
    beat.ticks(until=beat.now + timedelta(minutes=2))
    beat.pay_at(beat.now + timedelta(seconds=10), Decimal("0.000001"))  # one unit
    beat.ticks(until=beat.deadline - timedelta(seconds=30))
    assert beat.state() == (
        Order.STATUS_AWAITING_PAYMENT,
        Invoice.STATUS_PROCESSING,
        Invoice.EXCEPTION_PAID_PARTIAL,
    )

    beat.ticks(until=beat.deadline + timedelta(minutes=1))  # the first tick after it
    assert beat.state() == (
        Order.STATUS_EXPIRED,
        Invoice.STATUS_EXPIRED,
        Invoice.EXCEPTION_PAID_PARTIAL,  # flagged: the unit is to be refunded
    )
    assert beat.invoice.amount_seen == 1
    assert order.holds.get().status == Hold.Status.RELEASED
    event = order.events.get(to_status=Order.STATUS_EXPIRED)
    assert "partial payment" in event.reason
    assert "to refund" in event.reason

    # And after the monitoring window: still released, still flagged.
    beat.ticks(until=beat.invoice.monitor_until + timedelta(minutes=2), every=timedelta(hours=6))
    assert beat.state() == (Order.STATUS_EXPIRED, Invoice.STATUS_EXPIRED, "paid_partial")


def test_a_node_down_at_the_deadline_keeps_the_hold_until_the_chain_is_read(
    own_chain: Payments, order: Order, client: Client
) -> None:
    beat = Beat.start(own_chain, order, own_chain.usdc)
    beat.ticks(until=beat.deadline - timedelta(minutes=1))
    beat.pay_at(beat.deadline - timedelta(seconds=30))
    beat.block_at(beat.deadline - timedelta(seconds=20))  # confirmed before the deadline
    beat.node_down()

    beat.ticks(until=beat.deadline + timedelta(minutes=10))
    assert beat.state() == (Order.STATUS_AWAITING_PAYMENT, Invoice.STATUS_NEW, "")
    assert beat.invoice.check_delayed
    page = client.get(f"/en/orders/{order.reference}/{order.secret}/").content.decode()
    assert "Checking is delayed" in page

    beat.node_up()
    beat.at(beat.now + timedelta(minutes=1)).tick()
    assert beat.state() == (Order.STATUS_PAID, Invoice.STATUS_SETTLED, "")
    assert not beat.invoice.check_delayed


def test_a_chain_unread_past_the_longest_wait_ends_the_hold_and_flags_the_invoice(
    own_chain: Payments, order: Order
) -> None:
    beat = Beat.start(own_chain, order, own_chain.usdc)
    beat.ticks(until=beat.deadline - timedelta(minutes=1))
    beat.node_down()
    wait = settings.PAYMENT_EXPIRY_MAX_WAIT

    beat.ticks(until=beat.deadline + wait - timedelta(minutes=1))
    assert beat.state()[0] == Order.STATUS_AWAITING_PAYMENT
    assert order.holds.get().status == Hold.Status.HELD

    beat.ticks(until=beat.deadline + wait)
    assert beat.state()[0] == Order.STATUS_EXPIRED
    assert order.holds.get().status == Hold.Status.RELEASED
    assert beat.invoice.unverified_at_expiry
    assert "to check by hand" in order.events.get(to_status=Order.STATUS_EXPIRED).reason


def test_a_full_payment_still_confirming_keeps_the_hold_for_the_grace_only(
    own_chain: Payments, order: Order
) -> None:
    beat = Beat.start(own_chain, order, own_chain.usdc)
    beat.ticks(until=beat.deadline - timedelta(minutes=1))
    beat.pay_at(beat.deadline - timedelta(seconds=30))  # 1 of 2 confirmations, no more blocks
    grace = settings.PAYMENT_CONFIRMING_GRACE

    beat.ticks(until=beat.deadline + grace - timedelta(minutes=1))
    assert beat.state() == (Order.STATUS_AWAITING_PAYMENT, Invoice.STATUS_PROCESSING, "")

    beat.ticks(until=beat.deadline + grace)
    assert beat.state()[0] == Order.STATUS_EXPIRED
    assert beat.invoice.unverified_at_expiry
    assert order.holds.get().status == Hold.Status.RELEASED


def test_a_full_payment_confirming_across_the_deadline_is_paid(
    own_chain: Payments, order: Order
) -> None:
    beat = Beat.start(own_chain, order, own_chain.eth)
    beat.ticks(until=beat.deadline - timedelta(minutes=1))
    beat.pay_at(beat.deadline - timedelta(seconds=30))
    beat.ticks(until=beat.deadline + timedelta(minutes=3))
    assert beat.state() == (Order.STATUS_AWAITING_PAYMENT, Invoice.STATUS_PROCESSING, "")
    beat.block_at(beat.deadline + timedelta(minutes=3, seconds=10))
    beat.ticks(until=beat.deadline + timedelta(minutes=4))
    assert beat.state() == (Order.STATUS_PAID, Invoice.STATUS_SETTLED, "")


def test_the_scanner_ends_the_holds_it_has_read_up_to(payments: Payments, order: Order) -> None:
    """Beat's scan task, on the wall clock: after its cycle, the dust-paid order whose
    deadline it read past is expired, its lot released."""
    invoice = invoicing.create_invoice(order, payments.usdc)
    payments.dev.pay_invoice(invoice, Decimal("0.000001"))
    mined = payments.dev.w3.eth.get_block("latest")["timestamp"]
    deadline = datetime.fromtimestamp(mined + 1, tz=UTC)
    Order.objects.filter(pk=order.pk).update(hold_expires_at=deadline)
    Invoice.objects.filter(pk=invoice.pk).update(expires_at=deadline)
    while timezone.now() <= deadline:
        time.sleep(0.1)
    with override_settings(PAYMENT_BLOCK_PROPAGATION=timedelta(0)):
        scan_open_invoices()
    order.refresh_from_db()
    invoice.refresh_from_db()
    assert (order.status, invoice.status, invoice.exception) == (
        Order.STATUS_EXPIRED,
        Invoice.STATUS_EXPIRED,
        Invoice.EXCEPTION_PAID_PARTIAL,
    )
    assert order.holds.get().status == Hold.Status.RELEASED
