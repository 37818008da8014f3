"""30-day campaigns: dated checkpoints, reminders before each (on a simulated clock: never
early, never twice, caught up after downtime), the outcome the researcher records at each,
early-end requests, and what the operator sees of them."""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from django.core import mail
from django.core.mail import EmailMultiAlternatives
from django.db import transaction
from django.test import Client
from django.utils import timezone

from accounts.models import User
from desk import today as desk
from reservations import campaign
from reservations.campaign import CampaignRefused
from reservations.errors import BookingRefused
from reservations.models import Checkpoint, EarlyEndRequest, Order, OrderEvent
from reservations.services import RESEARCHER, mark_paid, place_order, system
from reservations.validation import checkpoint_days
from tests.conftest import Inventory, RequestFactory
from tests.reservations.test_booking_pages import contact, field_errors, plan

pytestmark = pytest.mark.django_db


def plan_of(starts_at: datetime, *days: int) -> list[dict[str, str]]:
    """Checkpoints on these days of the window (day 0: the day it starts)."""
    first, _last = checkpoint_days(starts_at)
    return [
        {"date": (first + timedelta(days=day)).isoformat(), "check": f"eval on day {day}"}
        for day in days
    ]


def campaign_order(make_request: RequestFactory, soon: datetime, *days: int, **extra: Any) -> Order:
    return place_order(
        make_request(
            window_days=30,
            checkpoints=plan_of(soon, *days),
            abort_criteria="loss diverges twice after a restart",
            **extra,
        )
    )


def running(order: Order, *, started: datetime) -> Order:
    """The window began at ``started`` (as if paid, approved and opened then)."""
    Order.objects.filter(pk=order.pk).update(
        status=Order.STATUS_ACTIVE, starts_at=started, ends_at=started + timedelta(days=30)
    )
    order.refresh_from_db()
    return order


def refused_codes(make_request: RequestFactory, **fields: Any) -> dict[str, list[str]]:
    with pytest.raises(BookingRefused) as info:
        place_order(make_request(**fields))
    return {name: [e.code or "" for e in found] for name, found in info.value.error_dict.items()}


# --------------------------------------------------------------------------- the plan


def test_a_campaign_keeps_its_dated_checkpoints_in_date_order(
    make_request: RequestFactory, inventory: Inventory, soon: datetime
) -> None:
    order = campaign_order(make_request, soon, 20, 6)
    assert [(c.position, c.due_on, c.what) for c in order.campaign_checkpoints.all()] == [
        (1, checkpoint_days(soon)[0] + timedelta(days=6), "eval on day 6"),
        (2, checkpoint_days(soon)[0] + timedelta(days=20), "eval on day 20"),
    ]
    assert order.abort_criteria == "loss diverges twice after a restart"
    assert order.checkpoints == ""  # the free text of old orders only


def test_checkpoints_must_lie_in_the_window_and_say_what_is_checked(
    make_request: RequestFactory, inventory: Inventory, soon: datetime
) -> None:
    first, last = checkpoint_days(soon)
    abort = {"window_days": 30, "abort_criteria": "diverges"}
    assert refused_codes(make_request, **abort) == {"checkpoints": ["checkpoints_required"]}
    outside = [
        {"date": (first - timedelta(days=1)).isoformat(), "check": "too early"},
        {"date": (last + timedelta(days=1)).isoformat(), "check": "too late"},
        {"date": "not a day", "check": "x"},
        {"date": first.isoformat(), "check": "  "},
    ]
    assert refused_codes(make_request, checkpoints=outside, **abort) == {
        "checkpoints": [
            "checkpoint_outside_window",
            "checkpoint_outside_window",
            "checkpoint_invalid",
            "checkpoint_invalid",
        ]
    }
    nine = [{"date": first.isoformat(), "check": str(n)} for n in range(9)]
    assert refused_codes(make_request, checkpoints=nine, **abort) == {
        "checkpoints": ["too_many_checkpoints"]
    }
    assert refused_codes(make_request, checkpoints="day 7: loss below 2.1", **abort) == {
        "checkpoints": ["checkpoints_required"]
    }
    edges = [{"date": first.isoformat(), "check": "a"}, {"date": last.isoformat(), "check": "b"}]
    assert place_order(make_request(checkpoints=edges, **abort)).campaign_checkpoints.count() == 2
    assert Checkpoint.objects.count() == 2  # the refused ones wrote nothing


# --------------------------------------------------------------------------- reminders


def test_reminders_on_a_simulated_clock_come_never_early_never_twice_and_catch_up(
    make_request: RequestFactory, inventory: Inventory, soon: datetime
) -> None:
    order = campaign_order(make_request, soon, 0, 3, 9, 14, 29)
    assert mark_paid(order, actor=system("test"), reason="paid")
    by_day = {c.due_on: c for c in order.campaign_checkpoints.all()}
    day_14 = checkpoint_days(soon)[0] + timedelta(days=14)
    # Beat is down from two hours before day 9's reminder is due until 10 hours after: it
    # catches up. It is down again from before day 14's reminder to after day 14 is over:
    # that reminder would come after its checkpoint, so it is never sent.
    day_9_due = campaign.reminder_due_at(by_day[checkpoint_days(soon)[0] + timedelta(days=9)])
    down = [
        (day_9_due - timedelta(hours=2), day_9_due + timedelta(hours=10)),
        (campaign.day_start(day_14) - timedelta(days=2), campaign.day_start(day_14 + timedelta(1))),
    ]
    clock = soon - timedelta(days=3)
    end = soon + timedelta(days=31)
    sent_at: dict[str, datetime] = {}
    while clock <= end:
        if not any(start <= clock < stop for start, stop in down):
            before = len(mail.outbox)
            sent = campaign.send_checkpoint_reminders(now=clock)
            # A second beat firing at the same instant (a restart, two beats) sends nothing.
            assert campaign.send_checkpoint_reminders(now=clock) == 0
            new = mail.outbox[before:]
            assert len(new) == sent
            for message in new:
                subject = str(message.subject)
                assert re.search(r"checkpoint on (.+)$", subject), subject
                assert subject not in sent_at, f"mailed twice: {subject}"
                sent_at[subject] = clock
            for checkpoint in Checkpoint.objects.filter(order=order):
                if checkpoint.reminder_sent_at is not None:
                    # Never early; never after its day is over.
                    assert checkpoint.reminder_sent_at >= campaign.reminder_due_at(checkpoint)
                    assert checkpoint.reminder_sent_at < campaign.day_start(
                        checkpoint.due_on + timedelta(days=1)
                    )
                else:
                    assert clock < campaign.reminder_due_at(checkpoint) or (
                        checkpoint.due_on == day_14
                    )
        clock += timedelta(minutes=30)
    stamped = {c.due_on: c.reminder_sent_at for c in Checkpoint.objects.filter(order=order)}
    assert [day for day, at in stamped.items() if at is None] == [day_14]
    assert len(mail.outbox) == 4
    caught_up = stamped[checkpoint_days(soon)[0] + timedelta(days=9)]
    assert caught_up == day_9_due + timedelta(hours=10)  # the first tick after the downtime
    for day, at in stamped.items():
        if at is not None and at != caught_up:  # the others at the first tick they were due
            assert at - campaign.reminder_due_at(by_day[day]) < timedelta(minutes=30)
    assert OrderEvent.objects.filter(order=order, reason__contains="reminder mailed").count() == 4


def test_beat_runs_the_reminders_every_five_minutes(
    make_request: RequestFactory, inventory: Inventory, soon: datetime
) -> None:
    from django.conf import settings

    from reservations.tasks import send_checkpoint_reminders

    entry = settings.CELERY_BEAT_SCHEDULE["checkpoint-reminders"]
    assert entry["task"] == send_checkpoint_reminders.name
    assert entry["schedule"].minute == set(range(0, 60, 5))
    order = campaign_order(make_request, soon, 1)
    assert mark_paid(order, actor=system("test"), reason="paid")
    tomorrow = (timezone.now() + timedelta(days=1)).astimezone(UTC).date()
    Checkpoint.objects.filter(order=order).update(due_on=tomorrow)  # its reminder is due now
    assert send_checkpoint_reminders() == 1
    assert send_checkpoint_reminders() == 0
    assert len(mail.outbox) == 1


def test_a_reminder_names_the_checkpoint_in_the_order_language_and_hides_unconfirmed_text(
    make_request: RequestFactory, inventory: Inventory, soon: datetime
) -> None:
    order = campaign_order(make_request, soon, 5, language="de")
    assert mark_paid(order, actor=system("test"), reason="paid")
    checkpoint = order.campaign_checkpoints.get()
    assert campaign.send_checkpoint_reminders(now=campaign.reminder_due_at(checkpoint)) == 1
    (message,) = mail.outbox
    assert message.to == ["ada@example.org"]
    assert order.reference in message.subject
    assert f"/de/orders/{order.reference}/{order.secret}/" in message.body
    assert "eval on day 5" in message.body  # confirmed: the booker's own words
    Checkpoint.objects.filter(pk=checkpoint.pk).update(reminder_sent_at=None)
    Order.objects.filter(pk=order.pk).update(contact_confirmed_at=None)
    assert campaign.send_checkpoint_reminders(now=campaign.reminder_due_at(checkpoint)) == 1
    assert "eval on day 5" not in mail.outbox[1].body


def test_a_mail_server_away_leaves_the_reminder_for_the_next_run(
    make_request: RequestFactory, inventory: Inventory, soon: datetime
) -> None:
    order = campaign_order(make_request, soon, 4)
    assert mark_paid(order, actor=system("test"), reason="paid")
    checkpoint = order.campaign_checkpoints.get()
    due = campaign.reminder_due_at(checkpoint)
    with mock.patch("reservations.campaign.send_templated", side_effect=OSError("refused")):
        assert campaign.send_checkpoint_reminders(now=due) == 0
    checkpoint.refresh_from_db()
    assert checkpoint.reminder_sent_at is None
    assert campaign.send_checkpoint_reminders(now=due + timedelta(minutes=5)) == 1
    assert len(mail.outbox) == 1


def test_unpaid_or_stopped_campaigns_get_no_reminders(
    make_request: RequestFactory, inventory: Inventory, soon: datetime
) -> None:
    unpaid = campaign_order(make_request, soon, 3)
    checkpoint = unpaid.campaign_checkpoints.get()
    assert campaign.send_checkpoint_reminders(now=campaign.reminder_due_at(checkpoint)) == 0
    stopped = running(campaign_order(make_request, soon, 0, 10), started=timezone.now())
    first, second = stopped.campaign_checkpoints.all()
    campaign.record_outcome(
        first,
        outcome="stop",
        note="diverged",
        actor=RESEARCHER,
        now=campaign.day_start(first.due_on),
    )
    assert campaign.send_checkpoint_reminders(now=campaign.reminder_due_at(second)) == 0
    assert mail.outbox == []


@pytest.mark.django_db(transaction=True)
def test_workers_reminding_at_the_same_instant_mail_once(soon: datetime, ssh_key: str) -> None:
    from reservations.validation import OrderRequest
    from tests.concurrency import at_once
    from tests.conftest import build_inventory

    build_inventory()
    order = place_order(
        OrderRequest(
            kind="h200",
            lot_count=1,
            window_days=30,
            starts_at=soon,
            environment="pytorch-2.9-cuda-12.8",
            usage_mode="distributed",
            hypothesis="shorter_step",
            contact_name="Ada",
            contact_email="ada@example.org",
            ssh_public_keys=ssh_key,
            checkpoints=plan_of(soon, 1),
            abort_criteria="diverges",
        )
    )
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="paid")
    checkpoint = order.campaign_checkpoints.get()
    due = campaign.reminder_due_at(checkpoint)
    outcomes = at_once(6, lambda _i: campaign.send_checkpoint_reminders(now=due))
    assert sorted(outcomes) == [0, 0, 0, 0, 0, 1]  # type: ignore[type-var]
    assert len(mail.outbox) == 1


# --------------------------------------------------------------------------- outcomes


def test_the_outcome_is_recorded_once_from_the_checkpoints_day_on(
    make_request: RequestFactory, inventory: Inventory, soon: datetime
) -> None:
    order = campaign_order(make_request, soon, 2)
    checkpoint = order.campaign_checkpoints.get()
    on_the_day = campaign.day_start(checkpoint.due_on) + timedelta(hours=9)

    def record(outcome: str, note: str = "", now: datetime = on_the_day) -> str:
        try:
            campaign.record_outcome(
                checkpoint, outcome=outcome, note=note, actor=RESEARCHER, now=now
            )
        except CampaignRefused as exc:
            return exc.code
        return "recorded"

    assert record("continue") == "campaign_not_running"  # unpaid: no window runs
    running(order, started=soon)
    assert record("continue", now=on_the_day - timedelta(hours=10)) == "checkpoint_not_yet"
    assert record("maybe") == "invalid_choice"
    assert record("adjust") == "required"  # adjusting says how
    assert record("adjust", note="x" * 2001) == "too_long"
    assert record("adjust", note="halve the learning rate") == "recorded"
    assert record("stop", note="changed my mind") == "outcome_recorded"
    checkpoint.refresh_from_db()
    assert (checkpoint.outcome, checkpoint.outcome_note) == ("adjust", "halve the learning rate")
    assert checkpoint.outcome_recorded_at == on_the_day
    event = OrderEvent.objects.filter(order=order).last()
    assert event is not None
    assert event.actor_label == "researcher"
    assert "checkpoint 1" in event.reason
    assert "adjust" in event.reason


def test_a_second_answer_from_a_stale_page_is_refused(
    make_request: RequestFactory, inventory: Inventory, soon: datetime
) -> None:
    order = running(campaign_order(make_request, soon, 0), started=timezone.now())
    Checkpoint.objects.filter(order=order).update(due_on=timezone.now().astimezone(UTC).date())
    checkpoint = order.campaign_checkpoints.get()
    assert campaign.record_outcome(checkpoint, outcome="continue", note="", actor=RESEARCHER)
    stale = Checkpoint.objects.get(pk=checkpoint.pk)
    stale.outcome = ""  # a second tab that loaded the page before the first answer
    with pytest.raises(CampaignRefused):
        campaign.record_outcome(stale, outcome="stop", note="no", actor=RESEARCHER)
    assert Checkpoint.objects.get(pk=checkpoint.pk).outcome == "continue"


# --------------------------------------------------------------------------- early end, the desk


def test_an_early_end_is_a_request_the_operator_answers_on_today(
    make_request: RequestFactory, inventory: Inventory, soon: datetime
) -> None:
    order = campaign_order(make_request, soon, 3)
    with pytest.raises(CampaignRefused):
        campaign.request_early_end(order, reason="done", actor=RESEARCHER)
    order = running(order, started=timezone.now() - timedelta(days=5))
    request = campaign.request_early_end(order, reason="the result is clear", actor=RESEARCHER)
    with pytest.raises(CampaignRefused) as again:
        campaign.request_early_end(order, reason="please", actor=RESEARCHER)
    assert again.value.code == "early_end_open"
    order.refresh_from_db()
    assert order.status == Order.STATUS_ACTIVE  # nothing ends or is refunded by itself
    (item,) = desk.campaigns(timezone.now()).items
    assert (item.label, item.detail) == (order.reference, "asks to end early")
    operator = User.objects.create_superuser("op@example.org", "a-long-password-1")
    from reservations.services import Actor

    assert campaign.answer_early_end(
        request, actor=Actor.of(operator), note="ends tomorrow, 10 days refunded"
    )
    assert not campaign.answer_early_end(request, actor=Actor.of(operator), note="again")
    assert desk.campaigns(timezone.now()).count == 0
    assert EarlyEndRequest.objects.get().handled_by == "op@example.org"


def test_an_overdue_outcome_shows_on_today_until_it_is_recorded(
    make_request: RequestFactory, inventory: Inventory, soon: datetime
) -> None:
    order = running(campaign_order(make_request, soon, 0, 1), started=soon)
    first, _second = order.campaign_checkpoints.all()
    day_after_next = campaign.day_start(first.due_on) + campaign.OUTCOME_GRACE
    assert desk.campaigns(day_after_next - timedelta(seconds=1)).count == 0
    section = desk.campaigns(day_after_next)
    assert section.count == 1
    assert section.items[0].detail == "a checkpoint's outcome is overdue"
    campaign.record_outcome(
        first, outcome="continue", note="", actor=RESEARCHER, now=day_after_next
    )
    assert desk.campaigns(day_after_next).count == 0
    assert desk.campaigns(day_after_next + timedelta(days=1)).count == 1  # the second's


# --------------------------------------------------------------------------- the pages


def book_campaign(client: Client, prefix: str = "/en") -> list[dict[str, str]]:
    response = client.post(f"{prefix}/book/", plan(window_days="30"))
    assert response.status_code == 302
    start = date.fromisoformat(client.session["booking"]["plan"]["start_date"])
    rows = {
        "checkpoints-1-date": (start + timedelta(days=14)).isoformat(),
        "checkpoints-1-check": "held-out loss below 2.1",
        "checkpoints-3-date": (start + timedelta(days=7)).isoformat(),
        "checkpoints-3-check": "throughput above 9k tokens/s",
    }
    response = client.post(
        f"{prefix}/book/contact/", contact(abort_criteria="loss diverges", **rows)
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    return client.session["booking"]["contact"]["checkpoints"]


def test_the_contact_step_asks_for_dated_checkpoints_and_marks_both_required(
    client: Client, inventory: Inventory
) -> None:
    client.post("/en/book/", plan(window_days="30"))
    html = client.get("/en/book/contact/").content.decode()
    assert re.search(r"<legend>Checkpoints <span class=\"required\"", html)
    assert re.search(r'<label for="id_abort_criteria">Abort criteria <span class="required"', html)
    assert html.count('type="date" name="checkpoints-') == 8
    html = client.post(
        "/en/book/contact/",
        contact(**{"checkpoints-1-date": "2020-01-01", "checkpoints-1-check": "old"}),
    ).content.decode()
    assert "choose a day within the window" in field_errors(html, "checkpoints")
    assert "needs abort criteria" in field_errors(html, "abort_criteria")
    assert 'value="2020-01-01"' in html  # what was typed comes back


def test_booking_a_campaign_shows_its_checkpoints_on_review_and_the_order_page(
    client: Client, inventory: Inventory
) -> None:
    entries = book_campaign(client)
    assert [e["check"] for e in entries] == [
        "held-out loss below 2.1",
        "throughput above 9k tokens/s",
    ]
    review = client.get("/en/book/review/").content.decode()
    listed = re.search(r'data-testid="checkpoints">(.*?)</ol>', review, re.S)
    assert listed
    assert listed.group(1).index("throughput") < listed.group(1).index("held-out")
    response = client.post("/en/book/review/")
    assert response.status_code == 302
    order = Order.objects.get()
    assert order.campaign_checkpoints.count() == 2
    page = client.get(response["Location"]).content.decode()
    assert page.count('data-testid="checkpoint"') == 2
    assert "loss diverges" in page
    assert "Record its outcome here from" in page  # the window has not begun


def test_the_researcher_records_an_outcome_and_asks_to_end_early_on_the_order_page(
    client: Client, inventory: Inventory
) -> None:
    book_campaign(client)
    url = client.post("/en/book/review/")["Location"]
    order = running(Order.objects.get(), started=timezone.now() - timedelta(days=8))
    first = order.campaign_checkpoints.order_by("position").first()
    assert first is not None
    Checkpoint.objects.filter(pk=first.pk).update(due_on=timezone.now().astimezone(UTC).date())
    page = client.get(url).content.decode()
    assert "Record the outcome" in page
    action = f"{url}checkpoints/{first.position}/outcome/"
    refused = client.post(action, {"outcome": "stop", "note": ""})
    assert refused.status_code == 302
    page = client.get(url).content.decode()
    assert re.search(r'id="checkpoint-1-errors"[^>]*><p>This field is required', page)
    client.post(action, {"outcome": "adjust", "note": "switch to bf16"})
    page = client.get(url).content.decode()
    assert re.search(r'data-testid="outcome"><strong>Continue, adjusted</strong> · switch', page)
    assert "This field is required" not in page  # shown once
    client.post(f"{url}early-end/", {"reason": "the answer is clear"})
    page = client.get(url).content.decode()
    assert "to end the campaign early" in page
    assert "The operator will answer" in page
    assert EarlyEndRequest.objects.filter(order=order, handled_at__isnull=True).count() == 1
    other = client.post(f"/en/orders/{order.reference}/wrong-secret/early-end/", {"reason": "x"})
    assert other.status_code == 404


def test_an_old_orders_free_text_stays_readable(
    client: Client, inventory: Inventory, make_request: RequestFactory, soon: datetime
) -> None:
    order = campaign_order(make_request, soon, 3)
    Order.objects.filter(pk=order.pk).update(checkpoints="day 7: loss below 2.1")
    Checkpoint.objects.filter(order=order).delete()  # booked before checkpoints had dates
    page = client.get(f"/en/orders/{order.reference}/{order.secret}/").content.decode()
    assert "Checkpoints as written when booking" in page
    assert "day 7: loss below 2.1" in page


def test_the_order_admin_lists_checkpoints_and_early_end_requests(
    client: Client, inventory: Inventory, make_request: RequestFactory, soon: datetime
) -> None:
    order = running(campaign_order(make_request, soon, 0), started=timezone.now())
    campaign.request_early_end(order, reason="finished early", actor=RESEARCHER)
    client.force_login(User.objects.create_superuser("op@example.org", "a-long-password-1"))
    html = client.get(f"/admin/reservations/order/{order.pk}/change/").content.decode()
    assert "eval on day 0" in html
    assert "finished early" in html
    today = client.get("/admin/").content.decode()
    assert 'id="today-campaigns"' in today
    assert order.reference in today
    early_end = EarlyEndRequest.objects.get()
    answered = client.post(
        "/admin/reservations/earlyendrequest/",
        {"action": "answer_requests", "_selected_action": [early_end.pk], "reason": "ok"},
    )
    assert answered.status_code == 302
    assert EarlyEndRequest.objects.get().handling_note == "ok"


# --------------------------------------------------------------------------- the API


def test_the_api_shows_checkpoints_and_takes_the_owners_outcome(
    client: Client,
    inventory: Inventory,
    ada: tuple[User, str],
    eve: tuple[User, str],
    soon: datetime,
) -> None:
    user, token = ada
    body = {
        "kind": "h200",
        "lot_count": 1,
        "window_days": 30,
        "starts_at": soon.isoformat(),
        "environment": "pytorch-2.9-cuda-12.8",
        "usage_mode": "distributed",
        "hypothesis": "shorter_step",
        "contact_name": "Ada Lovelace",
        "contact_email": "ada@example.org",
        "ssh_public_keys": [make_key()],
        "checkpoints": plan_of(soon, 0, 12),
        "abort_criteria": "diverges",
    }
    headers = {"Authorization": f"Bearer {token}"}
    placed = client.post(
        "/api/v1/orders/", json.dumps(body), content_type="application/json", headers=headers
    )
    assert placed.status_code == 201, placed.content
    answer = placed.json()
    assert [c["check"] for c in answer["checkpoints"]] == ["eval on day 0", "eval on day 12"]
    assert answer["checkpoints"][0]["outcome"] == ""
    assert answer["abort_criteria"] == "diverges"
    reference = answer["reference"]
    outcome_url = f"/api/v1/orders/{reference}/checkpoints/1/outcome/"
    not_running = client.post(
        outcome_url, {"outcome": "continue"}, content_type="application/json", headers=headers
    )
    assert (not_running.status_code, not_running.json()["code"]) == (409, "campaign_not_running")
    running(Order.objects.get(reference=reference), started=timezone.now())
    Checkpoint.objects.filter(order__reference=reference, position=1).update(
        due_on=timezone.now().astimezone(UTC).date()
    )
    eves = client.post(
        outcome_url,
        {"outcome": "stop", "note": "mine now"},
        content_type="application/json",
        headers={"Authorization": f"Bearer {eve[1]}"},
    )
    assert eves.status_code == 404
    recorded = client.post(
        outcome_url, {"outcome": "continue"}, content_type="application/json", headers=headers
    )
    assert recorded.status_code == 200, recorded.content
    assert recorded.json()["outcome"] == "continue"
    again = client.post(
        outcome_url,
        {"outcome": "stop", "note": "x"},
        content_type="application/json",
        headers=headers,
    )
    assert (again.status_code, again.json()["code"]) == (409, "outcome_recorded")
    shown = client.get(f"/api/v1/orders/{reference}/", headers=headers).json()
    assert shown["checkpoints"][0]["outcome"] == "continue"
    assert shown["checkpoints"][0]["outcome_recorded_at"] is not None
    event = OrderEvent.objects.filter(order__reference=reference).last()
    assert event is not None
    assert event.actor_label == user.email


def make_key() -> str:
    from tests.conftest import openssh_public_key

    return openssh_public_key()


def test_the_placed_mail_lists_the_checkpoints_and_what_the_booker_wrote_once_confirmed(
    make_request: RequestFactory, inventory: Inventory, soon: datetime
) -> None:
    from reservations.notifications import send_order_placed_once

    unconfirmed = campaign_order(make_request, soon, 6, 20)
    Order.objects.filter(pk=unconfirmed.pk).update(contact_confirmed_at=None)
    assert send_order_placed_once(unconfirmed.pk)
    text = mail.outbox[-1].body
    days = [c.due_on for c in unconfirmed.campaign_checkpoints.all()]
    assert "Checkpoints:" in text
    assert all(f"{day:%b}" in text for day in days)
    assert "eval on day 6" not in text  # the booker's words wait for the confirmed address
    assert "loss diverges" not in text

    confirmed = campaign_order(make_request, soon, 6, contact_email="bo@example.org")
    Order.objects.filter(pk=confirmed.pk).update(contact_confirmed_at=timezone.now())
    assert send_order_placed_once(confirmed.pk)
    message = mail.outbox[-1]
    assert "1. " in message.body
    assert "eval on day 6" in message.body
    assert "Abort criteria: loss diverges twice after a restart" in message.body
    assert isinstance(message, EmailMultiAlternatives)
    html = str(message.alternatives[0][0])
    assert "<li>" in html
    assert "eval on day 6" in html


def test_the_api_asks_to_end_a_running_campaign_early_once(
    client: Client,
    inventory: Inventory,
    make_request: RequestFactory,
    ada: tuple[User, str],
    eve: tuple[User, str],
    soon: datetime,
) -> None:
    user, token = ada
    order = campaign_order(make_request, soon, 6)
    Order.objects.filter(pk=order.pk).update(user=user)
    url = f"/api/v1/orders/{order.reference}/early-end/"

    def ask(reason: str, who: str = token) -> Any:
        return client.post(
            url,
            {"reason": reason},
            content_type="application/json",
            headers={"Authorization": f"Bearer {who}"},
        )

    assert (ask("done").status_code, ask("done").json()["code"]) == (409, "campaign_not_running")
    running(order, started=timezone.now() - timedelta(days=3))
    assert ask("mine now", eve[1]).status_code == 404
    assert ask("   ").status_code == 400
    asked = ask("the loss diverged twice")
    assert asked.status_code == 201, asked.content
    assert asked.json()["reason"] == "the loss diverged twice"
    assert asked.json()["handled_at"] is None
    again = ask("again")
    assert (again.status_code, again.json()["code"]) == (409, "early_end_open")
    assert EarlyEndRequest.objects.filter(order=order).count() == 1
    shown = client.get(
        f"/api/v1/orders/{order.reference}/", headers={"Authorization": f"Bearer {token}"}
    ).json()
    assert [r["reason"] for r in shown["early_end_requests"]] == ["the loss diverged twice"]
    assert campaign.open_early_end_requests().filter(order=order).exists()  # on Today


def test_the_researcher_is_mailed_the_operators_answer_to_an_early_end_request(
    make_request: RequestFactory,
    inventory: Inventory,
    soon: datetime,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    from reservations.services import Actor

    order = running(
        campaign_order(make_request, soon, 3, language="de"),
        started=timezone.now() - timedelta(days=5),
    )
    request = campaign.request_early_end(order, reason="the result is clear", actor=RESEARCHER)
    operator = User.objects.create_superuser("op@example.org", "a-long-password-1")
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert campaign.answer_early_end(
            request, actor=Actor.of(operator), note="Ends tomorrow, 10 days refunded."
        )
    (message,) = mail.outbox
    assert message.to == [order.contact_email]
    assert message.subject == (
        f"Bestellung {order.reference}: Antwort auf Ihre Bitte um ein vorzeitiges Ende"
    )
    assert "der Betreiber hat auf Ihre Bitte vom" in message.body
    assert "Ends tomorrow, 10 days refunded." in message.body
    assert f"/de/orders/{order.reference}/{order.secret}/" in message.body
    with django_capture_on_commit_callbacks(execute=True):
        assert not campaign.answer_early_end(request, actor=Actor.of(operator), note="again")
    assert len(mail.outbox) == 1  # answered once, mailed once
