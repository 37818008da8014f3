"""What one party may hold unpaid (issue 10, item 2): a stranger held 94 % of the horizon's
lot-days with 38 guest orders. Limits per client, per mailbox and per account, a share of each
kind's lot-days, and a short hold until the contact address proves itself."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.core import mail
from django.core.mail import EmailMultiAlternatives
from django.test import Client
from django.utils import timezone

from accounts.models import User
from api.models import ApiToken
from payments.expiry import expire_unpaid_holds
from reservations import fairness
from reservations.availability import handover
from reservations.errors import UnpaidLimitReached
from reservations.models import Hold, Order, OrderEvent
from reservations.services import (
    Actor,
    cancel_order,
    confirm_contact,
    contact_token,
    mark_paid,
    place_order,
)
from tests.concurrency import at_once
from tests.conftest import Inventory, RequestFactory, openssh_public_key
from tests.reservations.test_booking_pages import book_until_review, start_day

pytestmark = pytest.mark.django_db


STRANGER = fairness.Party(client_key=fairness.client_key("203.0.113.7"))


def starts(day: int) -> datetime:
    return handover(start_day(3 + day))


def campaign(starts_at: datetime) -> dict[str, Any]:
    """A 30-day window from ``starts_at`` with its campaign plan."""
    return {
        "window_days": 30,
        "starts_at": starts_at,
        "checkpoints": [{"date": starts_at.date().isoformat(), "check": "every 2 days"}],
        "abort_criteria": "loss diverges",
    }


def lot_days_held(party_orders: Any) -> int:
    return sum(o.lot_count * o.window_days for o in party_orders)


def test_one_client_holds_no_more_than_its_order_limit_whatever_addresses_it_gives(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    limit = settings.RESERVATION_UNPAID_ORDERS_PER_CLIENT
    for i in range(limit):
        place_order(
            make_request(window_days=3, starts_at=starts(4 * i), contact_email=f"p{i}@x.example"),
            party=STRANGER,
        )
    with pytest.raises(UnpaidLimitReached) as refused:
        place_order(
            make_request(window_days=3, starts_at=starts(40), contact_email="another@y.example"),
            party=STRANGER,
        )
    assert refused.value.code == "unpaid_orders_limit"
    assert "Pay or cancel one of them" in str(refused.value)
    assert refused.value.retry_at == min(o.hold_expires_at for o in Order.objects.all())
    assert Order.objects.count() == limit  # the refused one left nothing
    assert Hold.objects.count() == limit


def test_one_clients_unpaid_lot_days_of_a_kind_stay_within_the_share(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    cap = fairness.lot_days_cap(inventory.h200)
    capacity = len(inventory.h200_lots) * settings.RESERVATION_HORIZON.days
    assert cap == max(30, -(-capacity * 10 // 100))  # 10 % of 2 lots × 180 days: 36
    place_order(make_request(lot_count=1, **campaign(starts(0))), party=STRANGER)
    with pytest.raises(UnpaidLimitReached) as refused:
        place_order(
            make_request(
                lot_count=1, window_days=7, starts_at=starts(40), contact_email="b@z.example"
            ),
            party=STRANGER,
        )
    assert refused.value.code == "unpaid_share_limit"
    assert "at most 36 lot-days of 2× NVIDIA H200 141 GB" in str(refused.value)
    assert lot_days_held(Order.objects.all()) == 30
    # Another kind is another share.
    place_order(
        make_request(kind="b200", window_days=7, starts_at=starts(0), contact_email="c@z.example"),
        party=STRANGER,
    )


def test_plus_tags_are_one_mailbox_from_any_number_of_clients(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    limit = settings.RESERVATION_UNPAID_ORDERS_PER_MAILBOX
    refusals = []
    for i in range(limit + 3):
        party = fairness.Party(client_key=fairness.client_key(f"198.51.100.{i}"))
        request = make_request(
            window_days=3, starts_at=starts(4 * i), contact_email=f"Victim+{i}@Example.org"
        )
        try:
            place_order(request, party=party)
        except UnpaidLimitReached as refused:
            refusals.append(refused.code)
    assert refusals == ["unpaid_orders_limit"] * 3
    assert Order.objects.count() == limit
    assert set(Order.objects.values_list("mailbox_key", flat=True)) == {"victim@example.org"}


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_one_client_passes_the_limits_together_no_more(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    requests = [
        make_request(window_days=3, starts_at=starts(4 * i), contact_email=f"p{i}@x.example")
        for i in range(12)
    ]

    def book(i: int) -> Order:
        return place_order(requests[i], party=STRANGER)

    outcomes = at_once(12, book)
    placed = [o for o in outcomes if isinstance(o, Order)]
    refused = [o for o in outcomes if isinstance(o, UnpaidLimitReached)]
    assert len(placed) == settings.RESERVATION_UNPAID_ORDERS_PER_CLIENT, outcomes
    assert len(placed) + len(refused) == 12, outcomes
    assert Order.objects.count() == len(placed)


def test_paying_or_cancelling_frees_the_share_and_a_lapsed_hold_counts_no_more(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    first = place_order(make_request(**campaign(starts(0))), party=STRANGER)
    big = make_request(**campaign(starts(40)), contact_email="b@x.example")
    with pytest.raises(UnpaidLimitReached):
        place_order(big, party=STRANGER)
    mark_paid(first, actor=Actor("test"), reason="paid")
    second = place_order(big, party=STRANGER)
    with pytest.raises(UnpaidLimitReached):
        place_order(
            make_request(**campaign(starts(80)), contact_email="c@x.example"),
            party=STRANGER,
        )
    cancel_order(second, actor=Actor("test"), reason="changed my mind")
    third = place_order(
        make_request(**campaign(starts(80)), contact_email="c@x.example"),
        party=STRANGER,
    )
    # A hold whose time is up no longer counts, even before the expiry task ran.
    Order.objects.filter(pk=third.pk).update(hold_expires_at=timezone.now())
    place_order(
        make_request(**campaign(starts(120)), contact_email="d@x.example"),
        party=STRANGER,
    )


def test_a_guests_hold_is_short_until_the_mailed_link_confirms_the_address(
    client: Client,
    inventory: Inventory,
    django_capture_on_commit_callbacks: Any,
    eager_tasks: None,
) -> None:
    book_until_review(client)
    before = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post("/en/book/review/").status_code == 302
    order = Order.objects.get()
    assert order.contact_confirmed_at is None
    short = settings.RESERVATION_UNCONFIRMED_HOLD
    assert before + short <= order.hold_expires_at <= timezone.now() + short
    page = client.get(f"/en/orders/{order.reference}/{order.secret}/").content.decode()
    assert "We mailed a confirmation link to ada@example.org" in page

    (message,) = mail.outbox
    link = f"/en/orders/{order.reference}/{order.secret}/confirm/{contact_token(order)}/"
    assert link in message.body
    # Opening the link (a mail scanner does) changes nothing; its button does.
    assert "Yes, this was me" in client.get(link).content.decode()
    order.refresh_from_db()
    assert order.contact_confirmed_at is None
    response = client.post(link)
    assert response.status_code == 302
    order.refresh_from_db()
    assert order.contact_confirmed_at is not None
    assert order.hold_expires_at == order.created_at + settings.RESERVATION_HOLD_DURATION
    assert OrderEvent.objects.filter(order=order, reason="contact address confirmed").count() == 1
    page = client.get(response["Location"]).content.decode()
    assert "your e-mail address is confirmed" in page
    assert "We mailed a confirmation link" not in page
    # Twice changes nothing more.
    assert client.post(link).status_code == 302
    assert OrderEvent.objects.filter(order=order, reason="contact address confirmed").count() == 1


def test_a_wrong_confirmation_token_is_refused_and_changes_nothing(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request(), party=STRANGER)
    expires = order.hold_expires_at
    response = client.post(f"/en/orders/{order.reference}/{order.secret}/confirm/{'0' * 32}/")
    assert response.status_code == 400
    assert "not valid for this order" in response.content.decode()
    order.refresh_from_db()
    assert (order.contact_confirmed_at, order.hold_expires_at) == (None, expires)


def test_a_confirmation_does_not_revive_a_hold_that_ran_out(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request(), party=STRANGER)
    later = order.hold_expires_at + timedelta(seconds=1)
    assert confirm_contact(order, contact_token(order), now=later)
    order.refresh_from_db()
    assert order.hold_expires_at < later
    assert expire_unpaid_holds(now=later) == 1


def test_the_signed_in_researchers_own_address_needs_no_confirmation(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    ada = User.objects.create_user("ada@example.org")
    own = place_order(make_request(), user=ada, party=STRANGER)
    assert own.contact_confirmed_at is not None
    assert own.hold_expires_at == own.created_at + settings.RESERVATION_HOLD_DURATION
    for_a_colleague = place_order(
        make_request(contact_email="bob@example.org", starts_at=starts(20)),
        user=ada,
        party=STRANGER,
    )
    assert for_a_colleague.contact_confirmed_at is None


def test_until_the_address_is_confirmed_no_text_of_the_booker_reaches_its_mailbox(
    inventory: Inventory,
    make_request: RequestFactory,
    django_capture_on_commit_callbacks: Any,
    eager_tasks: None,
) -> None:
    from reservations.notifications import enqueue_order_placed

    phishing = "Ada - verify your wallet at https://evil.example/login"
    key = openssh_public_key("attacker@evil")
    with django_capture_on_commit_callbacks(execute=True):
        order = place_order(
            make_request(contact_name=phishing, ssh_public_keys=key), party=STRANGER
        )
        enqueue_order_placed(order)
    (placed,) = mail.outbox
    assert isinstance(placed, EmailMultiAlternatives)
    html = str(placed.alternatives[0][0])
    for text in (placed.subject, placed.body, html):
        assert "evil.example" not in text
        assert "attacker@evil" not in text  # a key's comment is the booker's text too
    assert placed.body.startswith("Hello,")
    fingerprint = order.ssh_keys.get().fingerprint
    assert fingerprint in placed.body  # whose keys get the access
    assert fingerprint in html
    assert "Pay only if they are yours" in placed.body

    confirm_contact(order, contact_token(order))
    with django_capture_on_commit_callbacks(execute=True):
        mark_paid(order, actor=Actor("test"), reason="paid")
    paid = mail.outbox[-1]
    assert paid.body.startswith(f"Hello {phishing},")  # now it is the booker's own mailbox


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_api_answers_429_with_when_to_retry(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    user = User.objects.create_user("lab@example.org")
    _record, token = ApiToken.issue(user, "pipeline")

    def body(day: int) -> dict[str, Any]:
        return {
            "kind": "h200",
            "lot_count": 1,
            "window_days": 3,
            "starts_at": starts(day).isoformat(),
            "environment": "pytorch-2.9-cuda-12.8",
            "usage_mode": "distributed",
            "hypothesis": "shorter_step",
            "contact_name": "Lab",
            "contact_email": "lab@example.org",
            "ssh_public_keys": [openssh_public_key()],
        }

    answers = [
        client.post(
            "/api/v1/orders/",
            json.dumps(body(4 * i)),
            content_type="application/json",
            headers=bearer(token),
        )
        for i in range(settings.RESERVATION_UNPAID_ORDERS_PER_MAILBOX + 1)
    ]
    assert [a.status_code for a in answers[:-1]] == [201] * (len(answers) - 1)
    assert answers[0].json()["contact_confirmed_at"] is not None  # the account's own address
    refused = answers[-1]
    assert refused.status_code == 429
    assert refused.json()["code"] == "unpaid_orders_limit"
    assert refused.json()["retry_at"]
    assert 0 < int(refused["Retry-After"]) <= settings.RESERVATION_HOLD_DURATION.total_seconds()
    assert Order.objects.count() == len(answers) - 1


def test_the_review_page_says_what_to_do_when_the_limit_is_reached(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    for i in range(settings.RESERVATION_UNPAID_ORDERS_PER_MAILBOX):
        place_order(make_request(window_days=3, starts_at=starts(10 + 4 * i)))
    # Placed for this mailbox by whoever (here the operator): they count for the mailbox.
    book_until_review(client)
    response = client.post("/en/book/review/")
    assert response.status_code == 200
    assert "You already hold 3 unpaid orders" in response.content.decode()
    assert Order.objects.count() == settings.RESERVATION_UNPAID_ORDERS_PER_MAILBOX
