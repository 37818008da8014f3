"""Unpaid holds expire exactly once; cancellation frees lots; every change is audited."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import User
from payments.expiry import expire_order, expire_unpaid_holds
from reservations.availability import free_lots
from reservations.errors import BookingRefused, InvalidTransition
from reservations.models import Hold, Order, OrderEvent
from reservations.services import (
    Actor,
    cancel_order,
    place_order,
)
from tests.concurrency import at_once
from tests.conftest import Inventory, RequestFactory, build_inventory


def overdue(order: Order) -> None:
    Order.objects.filter(pk=order.pk).update(hold_expires_at=timezone.now() - timedelta(seconds=1))


@pytest.mark.django_db
def test_an_unpaid_order_expires_and_frees_its_lots(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request(kind="b200"))
    overdue(order)

    assert expire_unpaid_holds() == 1

    order.refresh_from_db()
    assert order.status == Order.STATUS_EXPIRED
    hold = order.holds.get()
    assert hold.status == Hold.Status.RELEASED
    assert hold.released_at is not None
    assert list(free_lots(inventory.b200, order.starts_at, 7)) == inventory.b200_lots
    event = order.events.last()
    assert event is not None
    assert (event.from_status, event.to_status) == ("awaiting_payment", "expired")
    assert event.actor_label == "system: expire_unpaid_holds"
    assert event.reason


@pytest.mark.django_db
def test_orders_still_in_their_hold_time_or_paid_are_left_alone(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    waiting = place_order(make_request())
    paid = place_order(make_request())
    overdue(paid)
    Order.objects.filter(pk=paid.pk).update(status=Order.STATUS_PAID)

    assert expire_unpaid_holds() == 0
    assert Order.objects.get(pk=waiting.pk).status == Order.STATUS_AWAITING_PAYMENT
    assert Order.objects.get(pk=paid.pk).status == Order.STATUS_PAID


@pytest.mark.django_db
def test_expiring_twice_does_nothing_the_second_time(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request())
    overdue(order)
    assert expire_order(order) is True
    assert expire_order(order) is False
    assert expire_unpaid_holds() == 0
    assert order.events.filter(to_status=Order.STATUS_EXPIRED).count() == 1


@pytest.mark.django_db
def test_a_stale_copy_cannot_expire_an_order_that_was_paid_meanwhile(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request())
    overdue(order)
    Order.objects.filter(pk=order.pk).update(status=Order.STATUS_PAID)
    assert order.status == Order.STATUS_AWAITING_PAYMENT  # the stale in-memory copy
    assert expire_order(order) is False
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_PAID


@pytest.mark.django_db(transaction=True)
def test_two_workers_expiring_at_once_act_exactly_once(make_request: RequestFactory) -> None:
    build_inventory()
    orders = [
        place_order(make_request(starts_at=make_request().starts_at + timedelta(days=9 * i)))
        for i in range(3)
    ]
    for order in orders:
        overdue(order)
    expired = at_once(4, lambda _: expire_unpaid_holds())

    assert sum(expired) == 3  # type: ignore[arg-type]  # (an exception fails it too)
    assert OrderEvent.objects.filter(to_status=Order.STATUS_EXPIRED).count() == 3
    assert Hold.objects.filter(status=Hold.Status.RELEASED).count() == 3


@pytest.mark.django_db
def test_an_operator_cancels_an_unpaid_order_with_a_reason(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    operator = User.objects.create_superuser("op@example.org", "pw-not-used")
    order = place_order(make_request())
    cancel_order(order, actor=Actor.of(operator), reason="duplicate booking")
    order.refresh_from_db()
    assert order.status == Order.STATUS_CANCELLED
    assert order.holds.get().status == Hold.Status.RELEASED
    event = order.events.last()
    assert event is not None
    assert (event.actor, event.actor_label, event.reason) == (
        operator,
        "op@example.org",
        "duplicate booking",
    )


@pytest.mark.django_db
def test_cancelling_needs_a_reason_and_a_cancellable_order(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request())
    with pytest.raises(BookingRefused):
        cancel_order(order, actor=Actor("test"), reason=" ")
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_AWAITING_PAYMENT
    overdue(order)
    expire_order(order)
    with pytest.raises(InvalidTransition) as info:
        cancel_order(order, actor=Actor("test"), reason="too late")
    assert info.value.current == Order.STATUS_EXPIRED
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_EXPIRED
