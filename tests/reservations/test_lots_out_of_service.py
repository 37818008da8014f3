"""Lots taken out of service: the bookings they still carry are shown, never passed over in
silence, and each can move to a free lot of the same kind without anything else changing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.contrib.messages import constants as message_levels
from django.core import mail
from django.db import IntegrityError, transaction
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange  # type: ignore[import-untyped]
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import User
from reservations.errors import LotNotFree, LotUnavailable, MoveRefused
from reservations.events import booking_moved
from reservations.inventory import bookings_on, free_lots_for, move_booking, set_lot_status
from reservations.models import Hold, Host, Lot, Order, OrderEvent
from reservations.services import Actor, place_order
from tests.concurrency import at_once
from tests.conftest import Inventory, RequestFactory, build_inventory

pytestmark = pytest.mark.django_db

NO_FREE_LOT = (
    "No free lot of this kind for this window — decide with the researcher (cancel or refund)."
)


@pytest.fixture
def operator() -> User:
    return User.objects.create_superuser("operator@example.org", "a-long-operator-password")


@pytest.fixture
def actor(operator: User) -> Actor:
    return Actor.of(operator)


@pytest.fixture
def desk(client: Client, operator: User) -> Client:
    client.force_login(operator)
    return client


def booked(order: Order) -> Hold:
    """The order paid (its one hold booked), as after a settled invoice."""
    Order.objects.filter(pk=order.pk).update(status=Order.STATUS_PAID)
    order.holds.update(status=Hold.Status.BOOKED)
    return order.holds.select_related("order", "lot__host").get()


def holds_snapshot() -> list[tuple[int, int, int, str]]:
    return list(Hold.objects.order_by("pk").values_list("pk", "order_id", "lot_id", "status"))


def bookings_url(lot: Lot) -> str:
    return reverse("admin:reservations_lot_bookings", args=[lot.pk])


def shown(response: Any) -> list[tuple[int, str]]:
    return [(m.level, str(m)) for m in response.context["messages"]]


# --------------------------------------------------------------------------- the service


def test_taking_a_lot_out_of_service_returns_the_bookings_still_on_it(
    inventory: Inventory, make_request: RequestFactory, actor: Actor
) -> None:
    lot, _other = inventory.h200_lots
    hold = booked(place_order(make_request()))
    ended = place_order(make_request(starts_at=hold.period.upper + timedelta(days=1)))
    past = timezone.now() - timedelta(days=10)
    ended.holds.update(period=DateTimeTZRange(past, past + timedelta(days=3), "[)"))
    assert ended.holds.get().lot_id == lot.pk

    affected = set_lot_status(lot, Lot.Status.MAINTENANCE, actor=actor)

    assert [h.pk for h in affected] == [hold.pk]  # the ended booking is not affected
    assert Lot.objects.get(pk=lot.pk).status == Lot.Status.MAINTENANCE
    note = OrderEvent.objects.filter(order=hold.order).last()
    assert note is not None
    assert note.actor == actor.user
    assert note.reason == f"lot {lot} set to maintenance while this order's booking is on it"
    events = OrderEvent.objects.count()
    assert [h.pk for h in set_lot_status(lot, Lot.Status.MAINTENANCE, actor=actor)] == [hold.pk]
    assert OrderEvent.objects.count() == events  # nothing changed, nothing noted twice
    assert set_lot_status(lot, Lot.Status.ACTIVE, actor=actor) == []
    assert Lot.objects.get(pk=lot.pk).status == Lot.Status.ACTIVE


def test_a_lot_taken_out_of_service_is_neither_placed_on_nor_offered(
    inventory: Inventory, make_request: RequestFactory, actor: Actor
) -> None:
    first, second = inventory.h200_lots
    host = Host.objects.create(name="spare-h200", kind=inventory.h200, address="127.0.0.1")
    spare = Lot.objects.create(host=host, gpu_a=0, gpu_b=1)
    set_lot_status(first, Lot.Status.MAINTENANCE, actor=actor)
    set_lot_status(spare, Lot.Status.RETIRED, actor=actor)

    order = place_order(make_request())
    hold = order.holds.get()
    assert hold.lot_id == second.pk
    assert free_lots_for(hold) == []  # its own lot is busy, the others are out of service
    set_lot_status(spare, Lot.Status.ACTIVE, actor=actor)
    assert free_lots_for(hold) == [spare]


def test_free_lots_are_the_active_free_lots_of_the_same_kind(
    inventory: Inventory, make_request: RequestFactory, actor: Actor
) -> None:
    first, second = inventory.h200_lots
    hold = place_order(make_request()).holds.get()
    assert hold.lot_id == first.pk
    assert free_lots_for(hold) == [second]
    place_order(make_request(starts_at=hold.period.upper - timedelta(hours=1)))  # takes second
    assert free_lots_for(hold) == []


def test_moving_a_booking_keeps_its_period_and_status_and_is_audited(
    inventory: Inventory, make_request: RequestFactory, actor: Actor, operator: User
) -> None:
    first, second = inventory.h200_lots
    hold = booked(place_order(make_request()))

    new = move_booking(hold, second, actor=actor, reason="fan failure on the host")

    assert (new.order_id, new.lot_id, new.period, new.status) == (
        hold.order_id,
        second.pk,
        hold.period,
        Hold.Status.BOOKED,
    )
    old = Hold.objects.get(pk=hold.pk)
    assert old.status == Hold.Status.RELEASED
    assert old.released_at is not None
    assert list(Hold.objects.filter(order=hold.order, status__in=Hold.COUNTING)) == [new]
    event = OrderEvent.objects.filter(order=hold.order).last()
    assert event is not None
    assert (event.actor, event.from_status, event.to_status, event.reason) == (
        operator,
        Order.STATUS_PAID,
        Order.STATUS_PAID,
        f"booking moved from {first} to {second}: fan failure on the host",
    )
    assert Order.objects.get(pk=hold.order_id).status == Order.STATUS_PAID


def test_a_held_booking_moves_as_held(
    inventory: Inventory, make_request: RequestFactory, actor: Actor
) -> None:
    hold = place_order(make_request()).holds.get()
    new = move_booking(hold, inventory.h200_lots[1], actor=actor, reason="maintenance")
    assert new.status == Hold.Status.HELD


def test_the_researcher_is_mailed_in_the_order_language_after_commit(
    inventory: Inventory,
    make_request: RequestFactory,
    actor: Actor,
    django_capture_on_commit_callbacks: Any,
    eager_tasks: None,
) -> None:
    hold = booked(place_order(make_request(language="de", contact_email="ada@example.de")))
    order = hold.order

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        move_booking(hold, inventory.h200_lots[1], actor=actor, reason="maintenance")
    assert mail.outbox == []  # nothing before the commit
    for callback in callbacks:
        callback()

    (message,) = mail.outbox
    assert message.to == ["ada@example.de"]
    assert order.reference in message.subject
    assert message.body.startswith("Hallo Ada Lovelace,")
    assert f"/de/orders/{order.reference}/{order.secret}/" in message.body
    assert inventory.h200.name in message.body
    assert str(inventory.h200_lots[0]) not in message.body  # lots are the operator's business


def test_moving_onto_a_busy_lot_is_refused_and_changes_nothing(
    inventory: Inventory,
    make_request: RequestFactory,
    actor: Actor,
    django_capture_on_commit_callbacks: Any,
) -> None:
    _first, second = inventory.h200_lots
    hold = booked(place_order(make_request()))
    place_order(make_request(starts_at=hold.period.upper - timedelta(hours=1)))  # on second
    before, events = holds_snapshot(), OrderEvent.objects.count()

    with (
        django_capture_on_commit_callbacks() as callbacks,
        pytest.raises(LotNotFree, match=f"Lot {second} is not free"),
    ):
        move_booking(hold, second, actor=actor, reason="maintenance")

    assert holds_snapshot() == before
    assert OrderEvent.objects.count() == events
    assert callbacks == []


def test_a_receiver_raising_move_refused_rolls_the_move_back(
    inventory: Inventory,
    make_request: RequestFactory,
    actor: Actor,
    django_capture_on_commit_callbacks: Any,
) -> None:
    _first, second = inventory.h200_lots
    hold = booked(place_order(make_request()))
    seen: list[dict[str, Any]] = []

    def refuse(sender: type[Hold], **kwargs: Any) -> None:
        seen.append({"sender": sender, **kwargs})
        # What the receiver wrote must go too.
        OrderEvent.objects.create(order=kwargs["order"], actor_label="receiver", to_status="x")
        raise MoveRefused("Access to the old lot is already delivered; revoke it first.")

    before, events = holds_snapshot(), OrderEvent.objects.count()
    booking_moved.connect(refuse, dispatch_uid="test-refuse")
    try:
        with (
            django_capture_on_commit_callbacks() as callbacks,
            pytest.raises(MoveRefused, match="already delivered; revoke it first"),
        ):
            move_booking(hold, second, actor=actor, reason="maintenance")
    finally:
        booking_moved.disconnect(dispatch_uid="test-refuse")

    (call,) = seen
    assert call["sender"] is Hold
    assert call["order"].pk == hold.order_id
    assert (call["old_hold"].pk, call["old_hold"].status) == (hold.pk, Hold.Status.RELEASED)
    assert (call["new_hold"].lot_id, call["new_hold"].period) == (second.pk, hold.period)
    assert holds_snapshot() == before
    assert OrderEvent.objects.count() == events
    assert callbacks == []  # no mail


@pytest.mark.parametrize(
    ("target", "code"),
    [
        ("b200", "move_other_kind"),
        (Lot.Status.MAINTENANCE, "move_lot_not_active"),
        (Lot.Status.RETIRED, "move_lot_not_active"),
        ("same", "move_same_lot"),
    ],
)
def test_a_lot_of_another_kind_a_lot_not_active_or_the_same_lot_is_refused(
    inventory: Inventory, make_request: RequestFactory, actor: Actor, target: str, code: str
) -> None:
    first, second = inventory.h200_lots
    hold = booked(place_order(make_request()))
    if target == "b200":
        to_lot = inventory.b200_lots[0]
    elif target == "same":
        to_lot = first
    else:
        Lot.objects.filter(pk=second.pk).update(status=target)
        to_lot = second
    before, events = holds_snapshot(), OrderEvent.objects.count()

    with pytest.raises(MoveRefused) as refused:
        move_booking(hold, to_lot, actor=actor, reason="maintenance")

    assert refused.value.code == code
    assert str(to_lot) in refused.value.message
    assert holds_snapshot() == before
    assert OrderEvent.objects.count() == events


def test_a_booking_already_moved_cannot_be_moved_again(
    inventory: Inventory, make_request: RequestFactory, actor: Actor
) -> None:
    hold = booked(place_order(make_request()))
    move_booking(hold, inventory.h200_lots[1], actor=actor, reason="maintenance")
    before = holds_snapshot()
    with pytest.raises(MoveRefused, match="already moved or released") as refused:
        move_booking(hold, inventory.h200_lots[1], actor=actor, reason="maintenance")
    assert refused.value.code == "move_not_counting"
    assert holds_snapshot() == before


def test_the_exclusion_constraint_still_holds_after_a_move(
    inventory: Inventory, make_request: RequestFactory, actor: Actor
) -> None:
    first, second = inventory.h200_lots
    hold = booked(place_order(make_request()))
    new = move_booking(hold, second, actor=actor, reason="maintenance")
    other = place_order(make_request(starts_at=hold.period.upper + timedelta(days=1)))

    with pytest.raises(IntegrityError), transaction.atomic():
        Hold.objects.create(order=other, lot=second, period=new.period)
    # The released hold no longer counts: its lot takes the window again.
    Hold.objects.create(order=other, lot=first, period=new.period)


@pytest.mark.django_db(transaction=True)
def test_two_moves_and_a_placement_racing_for_one_free_lot_leave_it_to_exactly_one(
    make_request: RequestFactory, eager_tasks: None
) -> None:
    inventory = build_inventory()
    first, second = inventory.h200_lots
    host = Host.objects.create(name="spare-h200", kind=inventory.h200, address="127.0.0.1")
    spare = Lot.objects.create(host=host, gpu_a=0, gpu_b=1)
    holds = [booked(place_order(make_request())) for _lot in (first, second)]
    assert sorted(h.lot_id for h in holds) == [first.pk, second.pk]
    actor = Actor("operator@example.org")
    for lot in (first, second):
        set_lot_status(lot, Lot.Status.MAINTENANCE, actor=actor)

    def act(index: int) -> object:
        if index < 2:
            return move_booking(holds[index], spare, actor=actor, reason="maintenance")
        return place_order(make_request())

    outcomes = at_once(3, act)

    winners = [o for o in outcomes if isinstance(o, Hold | Order)]
    losers = [o for o in outcomes if isinstance(o, LotNotFree | LotUnavailable)]
    assert (len(winners), len(losers)) == (1, 2), outcomes
    assert Hold.objects.filter(lot=spare, status__in=Hold.COUNTING).count() == 1
    for hold in holds:  # each booking still counts exactly once, moved or not
        assert Hold.objects.filter(order=hold.order, status__in=Hold.COUNTING).count() == 1


# --------------------------------------------------------------------------- the desk


def list_edit(desk: Client, lot: Lot, status: str) -> Any:
    lots = list(Lot.objects.order_by("pk"))
    data: dict[str, Any] = {
        "form-TOTAL_FORMS": len(lots),
        "form-INITIAL_FORMS": len(lots),
        "form-MIN_NUM_FORMS": 0,
        "form-MAX_NUM_FORMS": 1000,
        "_save": "Save",
    }
    for i, each in enumerate(lots):
        data[f"form-{i}-id"] = each.pk
        data[f"form-{i}-status"] = status if each.pk == lot.pk else each.status
    return desk.post(reverse("admin:reservations_lot_changelist"), data, follow=True)


def test_the_list_status_dropdowns_are_labelled(desk: Client, inventory: Inventory) -> None:
    html = desk.get(reverse("admin:reservations_lot_changelist")).content.decode()
    for lot in Lot.objects.select_related("host"):
        assert f'aria-label="Status of {lot}"' in html


def test_setting_a_booked_lot_to_maintenance_in_the_list_warns_with_its_bookings_only_then(
    desk: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    lot = inventory.h200_lots[0]
    order = booked(place_order(make_request())).order

    response = list_edit(desk, lot, Lot.Status.MAINTENANCE)

    assert Lot.objects.get(pk=lot.pk).status == Lot.Status.MAINTENANCE
    warnings = [text for level, text in shown(response) if level == message_levels.WARNING]
    (warning,) = warnings
    assert order.reference in warning
    assert f"{order.starts_at:%Y-%m-%d %H:%M} → {order.ends_at:%Y-%m-%d %H:%M} UTC" in warning
    assert "paid, awaiting approval" in warning
    assert f'href="{bookings_url(lot)}"' in warning
    assert f'href="{bookings_url(lot)}"' in response.content.decode()  # rendered as a link

    free = inventory.h200_lots[1]  # no booking on it: the plain message, nothing to warn of
    response = list_edit(desk, free, Lot.Status.RETIRED)
    assert Lot.objects.get(pk=free.pk).status == Lot.Status.RETIRED
    assert [level for level, _text in shown(response)] == [message_levels.SUCCESS]


def test_the_lot_page_links_its_bookings_and_warns_when_retired(
    desk: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    lot = inventory.h200_lots[0]
    order = place_order(make_request())
    url = reverse("admin:reservations_lot_change", args=[lot.pk])
    assert f'href="{bookings_url(lot)}"' in desk.get(url).content.decode()

    response = desk.post(
        url,
        {"host": lot.host_id, "gpu_a": 4, "gpu_b": 5, "status": Lot.Status.RETIRED},
        follow=True,
    )

    lot.refresh_from_db()
    assert (lot.gpu_a, lot.gpu_b, lot.status) == (4, 5, Lot.Status.RETIRED)
    levels = {level: text for level, text in shown(response)}
    assert order.reference in levels[message_levels.WARNING]


def test_the_take_out_of_service_action_warns_about_bookings(
    desk: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    first, second = inventory.h200_lots
    order = place_order(make_request())
    response = desk.post(
        reverse("admin:reservations_lot_changelist"),
        {"action": "take_out_of_service", "_selected_action": [first.pk, second.pk]},
        follow=True,
    )
    assert {lot.status for lot in Lot.objects.filter(pk__in=[first.pk, second.pk])} == {
        Lot.Status.MAINTENANCE
    }
    messages = shown(response)
    (warning,) = [text for level, text in messages if level == message_levels.WARNING]
    assert order.reference in warning
    assert (
        message_levels.SUCCESS,
        f"Lot {second} is in maintenance; no current or future booking is on it.",
    ) in messages


def test_the_bookings_page_lists_each_booking_with_a_move_form(
    desk: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    first, second = inventory.h200_lots
    order = booked(place_order(make_request())).order
    Lot.objects.filter(pk=first.pk).update(status=Lot.Status.MAINTENANCE)

    response = desk.get(bookings_url(first))

    html = response.content.decode()
    assert response.status_code == 200
    assert f"Bookings on {first}" in html
    assert 'id="site-name"' in html  # the desk's own frame
    assert reverse("admin:reservations_order_change", args=[order.pk]) in html
    assert f"{order.starts_at:%Y-%m-%d %H:%M} → {order.ends_at:%Y-%m-%d %H:%M} UTC" in html
    assert "paid, awaiting approval" in html
    assert 'method="post"' in html
    assert "csrfmiddlewaretoken" in html
    assert f'<option value="{second.pk}">{second}</option>' in html
    assert NO_FREE_LOT not in html


def test_posting_the_move_moves_the_booking(
    desk: Client, operator: User, inventory: Inventory, make_request: RequestFactory
) -> None:
    first, second = inventory.h200_lots
    hold = booked(place_order(make_request()))

    response = desk.post(bookings_url(first), {"hold": hold.pk, "to_lot": second.pk}, follow=True)

    assert response.redirect_chain == [(bookings_url(first), 302)]
    new = Hold.objects.get(order=hold.order, status__in=Hold.COUNTING)
    assert (new.lot_id, new.period) == (second.pk, hold.period)
    assert (
        message_levels.SUCCESS,
        f"{hold.order.reference} moved from {first} to {second}; the researcher is mailed.",
    ) in shown(response)
    event = OrderEvent.objects.filter(order=hold.order).last()
    assert event is not None
    assert event.actor == operator
    assert event.reason.startswith(f"booking moved from {first} to {second}: ")
    assert "No current or future booking is on this lot." in response.content.decode()


def test_with_no_free_lot_the_page_says_so(
    desk: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    first, _second = inventory.h200_lots
    order = place_order(make_request())
    place_order(make_request())  # the other lot, same window

    html = desk.get(bookings_url(first)).content.decode()

    assert order.reference in html
    assert NO_FREE_LOT in html
    assert 'name="to_lot"' not in html


@pytest.fixture
def two_bookings(inventory: Inventory, make_request: RequestFactory) -> list[Hold]:
    """A booking on each H200 lot, the second one's after the first's window ends: the
    second lot is free for the first booking."""
    first = booked(place_order(make_request()))
    second = booked(place_order(make_request(starts_at=first.period.upper + timedelta(days=1))))
    Hold.objects.filter(pk=second.pk).update(lot=inventory.h200_lots[1])
    second.refresh_from_db()
    assert (first.lot_id, second.lot_id) == (inventory.h200_lots[0].pk, inventory.h200_lots[1].pk)
    return [first, second]


@pytest.mark.parametrize("case", ["foreign_hold", "lot_taken", "already_moved", "garbage"])
def test_bad_move_input_changes_nothing_and_says_why(
    desk: Client,
    inventory: Inventory,
    make_request: RequestFactory,
    actor: Actor,
    two_bookings: list[Hold],
    case: str,
) -> None:
    first_lot, second_lot = inventory.h200_lots
    mine, foreign = two_bookings
    data: dict[str, Any] = {"hold": mine.pk, "to_lot": second_lot.pk}
    expected = ""
    if case == "foreign_hold":
        data = {"hold": foreign.pk, "to_lot": first_lot.pk}  # on the other lot
        expected = f"Nothing moved: choose a booking on {first_lot} and a free lot."
    elif case == "lot_taken":
        # Between the page and the post, another booking took the lot for this window.
        Hold.objects.filter(pk=foreign.pk).update(period=mine.period)
        expected = f"{mine.order.reference} not moved. Lot {second_lot} is not free"
    elif case == "already_moved":
        Hold.objects.filter(pk=foreign.pk).delete()
        move_booking(mine, second_lot, actor=actor, reason="moved in another tab")
        expected = f"{mine.order.reference} not moved. This booking was already moved"
    else:
        data = {"hold": "abc", "to_lot": ""}
        expected = f"Nothing moved: choose a booking on {first_lot} and a free lot."
    before, events = holds_snapshot(), OrderEvent.objects.count()

    response = desk.post(bookings_url(first_lot), data, follow=True)

    assert response.status_code == 200
    errors = [text for level, text in shown(response) if level == message_levels.ERROR]
    assert len(errors) == 1
    assert errors[0].startswith(expected)
    assert holds_snapshot() == before
    assert OrderEvent.objects.count() == events


def test_the_bookings_page_is_for_staff_who_may_change_lots(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    lot = inventory.h200_lots[0]
    hold = place_order(make_request()).holds.get()
    url = bookings_url(lot)
    assert "/admin/login/" in client.get(url)["Location"]

    viewer = User.objects.create_user("viewer@example.org", "a-long-viewer-password")
    viewer.is_staff = True
    viewer.save(update_fields=["is_staff"])
    viewer.user_permissions.add(Permission.objects.get(codename="view_lot"))
    client.force_login(viewer)
    assert client.get(url).status_code == 403
    post = client.post(url, {"hold": hold.pk, "to_lot": inventory.h200_lots[1].pk})
    assert post.status_code == 403
    assert Hold.objects.get(pk=hold.pk).status == Hold.Status.HELD


def test_the_move_form_needs_its_csrf_token(
    operator: User, inventory: Inventory, make_request: RequestFactory
) -> None:
    hold = place_order(make_request()).holds.get()
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    lot = inventory.h200_lots[0]
    response = strict.post(
        bookings_url(lot), {"hold": hold.pk, "to_lot": inventory.h200_lots[1].pk}
    )
    assert response.status_code == 403
    assert Hold.objects.get(pk=hold.pk).status == Hold.Status.HELD
    assert list(bookings_on(lot)) == [hold]
