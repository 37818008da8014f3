"""Domain events (infra.events): what each app announces, who sends it, who listens, and
what a receiver's failure does. The reactions that were upward calls (a settled payment
approving the order, a cancelled order's invoices flagged for refund) happen through
receivers: these tests break the receiver and watch the sender's change stay committed,
the failure recorded, and beat's retry finish the reaction."""

from __future__ import annotations

import ast
from datetime import timedelta
from pathlib import Path

import pytest
from django.core import mail
from django.db import transaction
from django.test import Client
from django.utils import timezone

from accounts.models import User
from desk import today
from infra import events
from infra.models import FailedReaction
from payments import invoicing, scanning, settlement
from payments.models import Invoice
from provisioning import services as provisioning_services
from reservations.models import Order, OrderEvent
from reservations.services import cancel_order, mark_paid, place_order, system
from tests.conftest import Payments, RequestFactory, build_inventory

ROOT = Path(__file__).resolve().parents[1]
APPS = (
    *("accounts", "api", "config", "desk", "infra", "pages", "payments", "provisioning"),
    "reservations",
    "webhooks",
)
EVENTS = {
    "order.placed",
    "order.paid",
    "order.paid_late",
    "order.cancelled",
    "order.expired",
    "order.ssh_keys_changed",
    "order.approved",
    "report.ready",
    "access.opened",
    "access.closed",
    "refund.sent",
    "account.address_proven",
    "lot.held",
    "access.closing_soon",
    "invoice.exception",
    "order.extension_placed",
    "order.extended",
    "lot.incident_opened",
    "lot.replaced",
    "order.credited",
    "credit.decided",
}
"""The documented events (docs/how-it-works/architecture.md): a new one is added here and there."""


class Broken(RuntimeError):
    """What a broken receiver raises in these tests."""


def announcers() -> dict[str, set[str]]:
    """Each event's name: the functions (``module.function``) whose body calls its
    ``announce``, found in the project's source as written."""
    variables = {
        (f"{app}.events", variable): event.name
        for app in APPS
        if (ROOT / app / "events.py").exists()
        for variable, event in vars(__import__(f"{app}.events", fromlist=["_"])).items()
        if isinstance(event, events.Event)
    }
    found: dict[str, set[str]] = {name: set() for name in events.catalogue()}
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            tree = ast.parse(path.read_text())
            imported = {
                alias.asname or alias.name: variables[(str(node.module), alias.name)]
                for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom)
                for alias in node.names
                if (str(node.module), alias.name) in variables
            }
            for function in tree.body:
                if not isinstance(function, ast.FunctionDef):
                    continue
                for call in ast.walk(function):
                    if (
                        isinstance(call, ast.Call)
                        and isinstance(call.func, ast.Attribute)
                        and call.func.attr == "announce"
                        and isinstance(call.func.value, ast.Name)
                        and call.func.value.id in imported
                    ):
                        found[imported[call.func.value.id]].add(f"{module}.{function.name}")
    return found


@pytest.fixture
def auto_approve(settings: object) -> None:
    settings.PROVISIONING_AUTO_APPROVE = True  # type: ignore[attr-defined]


@pytest.fixture
def broken_approval(monkeypatch: pytest.MonkeyPatch) -> None:
    """Approving raises (provisioning's receiver calls it) until the test mends it
    (``monkeypatch.undo()``)."""

    def approve(*_args: object, **_kwargs: object) -> None:
        raise Broken("the approval is broken")

    monkeypatch.setattr(provisioning_services, "approve_order", approve)


@pytest.fixture
def order(transactional_db: None, make_request: RequestFactory) -> Order:
    """An order awaiting payment, committed (the tests below watch after-commit delivery)."""
    build_inventory()
    return place_order(make_request(lot_count=1, window_days=3))


def pay(order: Order) -> None:
    """The order's invoice settles: mark_paid in the settling transaction, committed."""
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="invoice settled")


def status(order: Order) -> str:
    return Order.objects.values_list("status", flat=True).get(pk=order.pk)


# --------------------------------------------------------------------------- the catalogue


def test_every_documented_event_is_in_the_catalogue_with_its_meaning_and_payload() -> None:
    catalogue = events.catalogue()
    assert set(catalogue) == EVENTS
    for event in catalogue.values():
        assert len(event.meaning) > 40, event
        assert event.payload, event
        # primary keys only: a receiver reads the rows as they are when it runs
        assert all(key.endswith("_id") for key in event.payload), event


def test_each_event_is_announced_by_exactly_one_service_the_one_its_meaning_names() -> None:
    for name, senders in announcers().items():
        assert len(senders) == 1, (name, senders)
        (sender,) = senders
        assert f"({sender}" in events.catalogue()[name].meaning, (name, sender)
        assert sender.split(".")[-2] == "services" or sender in (
            "payments.refunds.record_refund",
            "payments.settlement.recompute",
            "reservations.extensions.place_extension",
            "reservations.extensions.join",
            "reservations.incidents.open_incident",
            "reservations.incidents.credit_for",
            "reservations.incidents.decide",
            "provisioning.replacement.replace",
        )


def test_the_architecture_page_lists_every_event_with_who_listens() -> None:
    page = (ROOT / "docs" / "how-it-works" / "architecture.md").read_text()
    section = page[page.index("## Domain events and who listens") :]
    for name, event in events.catalogue().items():
        assert f"`{name}`" in section, name
        for receiver in event.receivers():
            assert receiver.rsplit(".", 1)[-1] in section, (name, receiver)


def test_the_reactions_that_were_upward_calls_are_receivers_connected_by_the_apps() -> None:
    catalogue = events.catalogue()
    assert "provisioning.receivers.auto_approve" in catalogue["order.paid"].receivers()
    assert "payments.receivers.close_invoices_of_cancelled_order" in (
        catalogue["order.cancelled"].receivers()
    )
    assert "reservations.receivers.attach_guest_orders" in (
        catalogue["account.address_proven"].receivers()
    )


def test_an_announcement_must_carry_exactly_its_payload() -> None:
    paid = events.catalogue()["order.paid"]
    with pytest.raises(TypeError, match="order_id"):
        paid.announce(order=1)
    with pytest.raises(TypeError, match="order_id"):
        paid.announce(order_id=1, extra=2)


def test_a_receiver_defined_inside_a_function_is_refused() -> None:
    def local(**_: object) -> None:
        pass

    with pytest.raises(ValueError, match="module-level"):
        events.catalogue()["order.paid"].connect(local, dispatch_uid="test: local")


# --------------------------------------------------------------------------- delivery


@pytest.mark.django_db(transaction=True)
def test_a_settled_payment_approves_the_order_through_the_receiver_after_commit(
    auto_approve: None, order: Order
) -> None:
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="invoice settled")
        assert status(order) == Order.STATUS_PAID  # not yet: the receiver waits for commit
    assert status(order) == Order.STATUS_APPROVED
    approval = OrderEvent.objects.get(order=order, to_status=Order.STATUS_APPROVED)
    assert approval.actor_label == "system: auto-approve"
    assert not FailedReaction.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_payment_rolled_back_announces_nothing(auto_approve: None, order: Order) -> None:

    def pay_then_fail() -> None:
        with transaction.atomic():
            assert mark_paid(order, actor=system("test"), reason="invoice settled")
            raise Broken("the scan failed after marking it paid")

    with pytest.raises(Broken):
        pay_then_fail()
    assert status(order) == Order.STATUS_AWAITING_PAYMENT
    assert not OrderEvent.objects.filter(order=order, to_status=Order.STATUS_APPROVED).exists()
    assert not FailedReaction.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_receiver_that_raises_leaves_the_payment_committed_and_beat_finishes_it(
    auto_approve: None,
    order: Order,
    broken_approval: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pay(order)
    assert status(order) == Order.STATUS_PAID  # the sender's change stands
    failure = FailedReaction.objects.get()
    assert (failure.event, failure.receiver, failure.payload, failure.attempts) == (
        "order.paid",
        "provisioning.receivers.auto_approve",
        {"order_id": order.pk},
        1,
    )
    assert failure.error == "Broken: the approval is broken"
    now = timezone.now()
    assert events.retry_failed(now=now) == 0  # not due yet (one minute's backoff)
    assert events.retry_failed(now=now + timedelta(minutes=2)) == 0  # still broken
    failure.refresh_from_db()
    assert (failure.attempts, failure.resolved_at) == (2, None)
    monkeypatch.undo()  # mended
    assert events.retry_failed(now=now + timedelta(minutes=5)) == 1
    assert status(order) == Order.STATUS_APPROVED
    failure.refresh_from_db()
    assert (failure.attempts, failure.resolution) == (3, "delivered on attempt 3")
    assert events.retry_failed(now=now + timedelta(hours=1)) == 0  # done once, not again


@pytest.mark.django_db(transaction=True)
def test_a_reaction_out_of_attempts_waits_for_the_operator_on_today_and_mails_them(
    auto_approve: None,
    order: Order,
    broken_approval: None,
    monkeypatch: pytest.MonkeyPatch,
    client: Client,
    settings: object,
) -> None:
    settings.ADMINS = [("Operator", "desk@example.org")]  # type: ignore[attr-defined]
    pay(order)
    failure = FailedReaction.objects.get()
    moment = timezone.now()
    for _attempt in range(2, events.MAX_ATTEMPTS + 1):  # a simulated clock, one tick per hour
        moment += timedelta(hours=3)
        events.retry_failed(now=moment)
        failure.refresh_from_db()
        assert status(order) == Order.STATUS_PAID  # at every tick: paid, never half-approved
        assert failure.resolved_at is None
    assert failure.attempts == events.MAX_ATTEMPTS
    assert failure.next_attempt_at is None  # no more tries by itself
    assert [m.subject for m in mail.outbox] == [
        f"[Django] A reaction to order.paid failed {events.MAX_ATTEMPTS} times"
    ]
    assert events.retry_failed(now=moment + timedelta(days=1)) == 0
    section = today.failed_reactions()
    assert [(i.label, i.detail) for i in section.items] == [
        ("order.paid → auto_approve", "waits for the operator")
    ]
    client.force_login(User.objects.create_superuser("op@example.org", "a-long-password-1"))
    page = client.get("/admin/").content.decode()
    assert 'id="today-failed_reactions"' in page
    assert "order.paid → auto_approve" in page
    # the operator mends it and asks for a retry from the desk's action
    monkeypatch.undo()
    listing = "/admin/infra/failedreaction/"
    done = client.post(listing, {"action": "retry_now", "_selected_action": [failure.pk]})
    assert done.status_code == 302
    assert events.retry_failed() == 1
    assert status(order) == Order.STATUS_APPROVED
    assert today.failed_reactions().items == []
    assert "failed_reactions" not in [section.key for section in today.sections()]


@pytest.mark.django_db(transaction=True)
def test_two_beats_never_run_one_failed_reaction_twice(
    auto_approve: None,
    order: Order,
    broken_approval: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pay(order)
    failure = FailedReaction.objects.get()
    calls: list[int] = []
    monkeypatch.undo()
    real = provisioning_services.approve_order

    def counted(order: Order, **kwargs: object) -> None:
        calls.append(order.pk)
        # a second beat starts while this one runs: the claim keeps it off
        assert events.retry_failed(now=later) == 0
        real(order, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(provisioning_services, "approve_order", counted)
    assert failure.next_attempt_at is not None
    later = failure.next_attempt_at + timedelta(seconds=1)
    assert events.retry_failed(now=later) == 1
    assert calls == [order.pk]


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_paid_order_has_its_invoice_flagged_by_payments_receiver(
    committed_payments: Payments,
    order: Order,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    invoice = invoicing.create_invoice(order, committed_payments.usdc)
    committed_payments.dev.pay_invoice(invoice)
    committed_payments.dev.mine(2)
    scanning.scan_chain(committed_payments.chain)
    assert Invoice.objects.get(pk=invoice.pk).status == Invoice.STATUS_SETTLED

    real = settlement.recompute

    def broken(*_args: object, **_kwargs: object) -> None:
        raise Broken("settlement is broken")

    monkeypatch.setattr(settlement, "recompute", broken)
    cancel_order(order, actor=system("test"), reason="the grant fell through")
    assert status(order) == Order.STATUS_CANCELLED  # committed, whatever payments does
    assert Invoice.objects.get(pk=invoice.pk).amount_to_refund == 0  # not flagged yet
    failure = FailedReaction.objects.get()
    assert (failure.event, failure.receiver) == (
        "order.cancelled",
        "payments.receivers.close_invoices_of_cancelled_order",
    )
    monkeypatch.setattr(settlement, "recompute", real)
    assert events.retry_failed(now=timezone.now() + timedelta(minutes=2)) == 1
    flagged = Invoice.objects.get(pk=invoice.pk)
    assert flagged.amount_to_refund == flagged.amount_due
