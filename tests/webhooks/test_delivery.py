"""Delivering: signed per Standard Webhooks (verified with the reference library, as a
receiver would), retried with back-off and the same id, cut at the timeout, never following
a redirect, reading no more than 64 KiB, checked against private addresses at each delivery
(DNS rebinding), and an endpoint failing for days turned off with its owner mailed. A real
HTTP server on loopback receives; the attempts are made in this process (the worker's own
tests are test_delivery_worker.py)."""

from __future__ import annotations

import json
import socket
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from accounts.models import User
from reservations.events import order_placed
from reservations.models import Order
from tests.webhooks.receiver import Receiver, Script
from webhooks import services, transport
from webhooks.models import Attempt, Delivery, Endpoint, Message


def endpoint(owner: User, url: str, **fields: Any) -> tuple[Endpoint, str]:
    return services.create_endpoint(owner, url=url, event_types=fields.pop("events", []), **fields)


def one_delivery(order: Order) -> Delivery:
    order_placed.announce(order_id=order.pk)  # its receiver fans out (no transaction: now)
    return Delivery.objects.select_related("message").get()


def verify(secret: str, received: Any) -> dict[str, Any]:
    return Webhook(secret).verify(received.body, received.headers)


def test_a_delivery_is_signed_as_standard_webhooks_says_and_verifies(
    ada_order: Order, researcher: User, receiver: Receiver
) -> None:
    hook, secret = endpoint(researcher, receiver.url("/ada"))
    delivery = one_delivery(ada_order)
    assert services.deliver(delivery.pk) is True
    (got,) = receiver.at("/ada")
    payload = verify(secret, got)
    assert payload["type"] == "order.placed"
    assert payload["api_version"] == "v1"
    assert payload["data"]["order"]["reference"] == ada_order.reference
    assert payload["data"]["order"]["status"] == "awaiting_payment"
    assert got.headers["webhook-id"] == delivery.message.public_id
    assert got.headers["Content-Type"] == "application/json"
    with pytest.raises(WebhookVerificationError):
        Webhook(services.signing.new_secret()).verify(got.body, got.headers)
    with pytest.raises(WebhookVerificationError):  # a body changed on the way
        Webhook(secret).verify(got.body.replace(b"awaiting", b"Awaiting"), got.headers)
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.next_attempt_at) == ("delivered", 1, None)
    attempt = Attempt.objects.get()
    assert (attempt.number, attempt.status_code, attempt.response) == (1, 200, "ok")
    hook.refresh_from_db()
    assert hook.failing_since is None


def test_the_payload_is_the_order_as_the_api_returns_it(
    ada_order: Order, researcher: User, receiver: Receiver, client: Any
) -> None:
    from api.models import ApiToken

    endpoint(researcher, receiver.url("/ada"))
    services.deliver(one_delivery(ada_order).pk)
    _record, token = ApiToken.issue(researcher, "test")
    answer = client.get(
        f"/api/v1/orders/{ada_order.reference}/", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    (got,) = receiver.at("/ada")
    assert json.loads(got.body)["data"]["order"] == answer.json()


def test_a_receiver_that_fails_then_answers_gets_the_retry_with_the_same_id(
    ada_order: Order, researcher: User, receiver: Receiver
) -> None:
    hook, secret = endpoint(researcher, receiver.url("/flaky", Script(statuses=[500, 200])))
    delivery = one_delivery(ada_order)
    before = timezone.now()
    assert services.deliver(delivery.pk) is False
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("pending", 1)
    wait = delivery.next_attempt_at - before  # type: ignore[operator]
    assert timedelta(seconds=4.5) <= wait <= timedelta(seconds=6)  # 5 s ± 10 %
    hook.refresh_from_db()
    assert hook.failing_since is not None
    assert services.deliver(delivery.pk) is False  # not due yet: nothing is sent
    assert len(receiver.at("/flaky")) == 1
    assert services.deliver(delivery.pk, now=delivery.next_attempt_at) is True
    first, second = receiver.at("/flaky")
    assert first.headers["webhook-id"] == second.headers["webhook-id"]
    assert verify(secret, second)["type"] == "order.placed"
    assert [a.status_code for a in Attempt.objects.order_by("number")] == [500, 200]
    hook.refresh_from_db()
    assert hook.failing_since is None


def test_retries_follow_the_schedule_for_more_than_a_day_then_stop(
    ada_order: Order, researcher: User, receiver: Receiver
) -> None:
    endpoint(researcher, receiver.url("/down", Script(statuses=[503])))
    delivery = one_delivery(ada_order)
    clock = timezone.now()
    first = clock
    waits = []
    for attempt in range(1, len(services.RETRY_SCHEDULE) + 2):
        assert services.deliver(delivery.pk, now=clock) is False
        delivery.refresh_from_db()
        # the invariant at every tick: the attempts counted are the attempts logged
        assert delivery.attempts == attempt == Attempt.objects.count()
        if delivery.next_attempt_at is None:
            break
        assert (
            services.deliver(delivery.pk, now=delivery.next_attempt_at - timedelta(seconds=1))
            is False
        )
        waits.append(delivery.next_attempt_at - clock)
        clock = delivery.next_attempt_at
    assert delivery.status == "failed"
    assert delivery.attempts == len(services.RETRY_SCHEDULE) + 1 == 8
    for wait, planned in zip(waits, services.RETRY_SCHEDULE, strict=True):
        assert planned * 0.89 <= wait <= planned * 1.11 + timedelta(seconds=2)
    assert clock - first >= timedelta(hours=24)
    assert len({r.headers["webhook-id"] for r in receiver.at("/down")}) == 1


def test_a_receiver_that_hangs_is_cut_at_the_timeout(
    ada_order: Order, researcher: User, receiver: Receiver, settings: Any
) -> None:
    settings.WEBHOOK_TIMEOUT_SECONDS = 1
    endpoint(researcher, receiver.url("/hangs", Script(hang_s=20)))
    delivery = one_delivery(ada_order)
    assert services.deliver(delivery.pk) is False
    attempt = Attempt.objects.get()
    assert attempt.status_code is None
    assert attempt.error == "no answer within 1 s"
    assert 900 <= attempt.duration_ms < 3000


def test_a_redirect_is_not_followed(ada_order: Order, researcher: User, receiver: Receiver) -> None:
    elsewhere = receiver.url("/elsewhere")
    endpoint(researcher, receiver.url("/moved", Script(statuses=[302], location=elsewhere)))
    assert services.deliver(one_delivery(ada_order).pk) is False
    assert Attempt.objects.get().status_code == 302
    assert receiver.at("/elsewhere") == []


def test_an_answer_is_read_no_further_than_64_kib(
    ada_order: Order, researcher: User, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint(researcher, receiver.url("/big", Script(body=b"x" * (4 * 1024 * 1024))))
    reads: list[int] = []
    real = transport.urllib3.response.HTTPResponse.read

    def counted(self: Any, amt: int | None = None, **kwargs: Any) -> bytes:
        data = real(self, amt, **kwargs)
        reads.append(len(data))
        return data

    monkeypatch.setattr(transport.urllib3.response.HTTPResponse, "read", counted)
    assert services.deliver(one_delivery(ada_order).pk) is True
    assert sum(reads) == transport.RESPONSE_LIMIT
    assert Attempt.objects.get().response == "x" * transport.EXCERPT


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/hook",
        "https://10.1.2.3/hook",
        "https://169.254.169.254/latest/meta-data/",
        "https://[::1]/hook",
        "https://192.168.0.10/hook",
        "https://localhost/hook",
    ],
)
def test_private_addresses_are_refused_at_save(researcher: User, settings: Any, url: str) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    with pytest.raises(services.ValidationError) as refused:
        endpoint(researcher, url)
    assert refused.value.error_dict["url"][0].code == "private_address"
    assert not Endpoint.objects.exists()


def test_plain_http_is_refused_unless_allowed(researcher: User, settings: Any) -> None:
    settings.WEBHOOK_ALLOW_HTTP = False
    with pytest.raises(services.ValidationError) as refused:
        endpoint(researcher, "http://example.org/hook")
    assert refused.value.error_dict["url"][0].code == "https_required"


def test_a_name_that_resolves_to_loopback_at_delivery_is_refused_then(
    ada_order: Order,
    researcher: User,
    receiver: Receiver,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DNS rebinding: public when saved, 127.0.0.1 when delivered."""
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    port = receiver.server.server_address[1]
    receiver.url("/rebind")
    answers = {"hooks.lab.example": "93.184.216.34"}

    def resolve(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        address = answers[host]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(transport.socket, "getaddrinfo", resolve)
    endpoint(researcher, f"http://hooks.lab.example:{port}/rebind")  # saved: public
    answers["hooks.lab.example"] = "127.0.0.1"  # the name's answer changes
    assert services.deliver(one_delivery(ada_order).pk) is False
    attempt = Attempt.objects.get()
    assert attempt.status_code is None
    assert attempt.error.startswith("refused: hooks.lab.example resolves to a private")
    assert receiver.at("/rebind") == []


def test_a_receiver_retried_by_beat_sends_one_message(
    ada_order: Order, researcher: User, receiver: Receiver
) -> None:
    endpoint(researcher, receiver.url("/ada"))
    order_placed.announce(order_id=ada_order.pk)
    order_placed.announce(order_id=ada_order.pk)  # as a FailedReaction's retry would
    assert Message.objects.count() == 1
    assert Delivery.objects.count() == 1


def test_only_the_owners_and_the_operators_endpoints_hear_of_an_order(
    ada_order: Order,
    researcher: User,
    other: User,
    operator: User,
    receiver: Receiver,
) -> None:
    endpoint(researcher, receiver.url("/ada"))
    endpoint(other, receiver.url("/eve"))
    endpoint(operator, receiver.url("/desk"), all_orders=True)
    endpoint(operator, receiver.url("/desk-own"))  # an operator's own, not every order's
    endpoint(researcher, receiver.url("/ada-paid"), events=["order.paid"])
    order_placed.announce(order_id=ada_order.pk)
    heard = {d.endpoint.url.rsplit("/", 1)[1] for d in Delivery.objects.select_related("endpoint")}
    assert heard == {"ada", "desk"}


def test_rotating_the_secret_signs_with_both_for_the_overlap(
    ada_order: Order, researcher: User, receiver: Receiver
) -> None:
    hook, old = endpoint(researcher, receiver.url("/ada"))
    new = services.rotate_secret(hook)
    assert new != old
    services.deliver(one_delivery(ada_order).pk)
    (got,) = receiver.at("/ada")
    assert got.headers["webhook-signature"].count("v1,") == 2
    verify(old, got)
    verify(new, got)
    # past the overlap, only the new one signs
    Endpoint.objects.filter(pk=hook.pk).update(
        previous_secret_until=timezone.now() - timedelta(seconds=1)
    )
    delivery = services.send_test(hook)
    services.deliver(delivery.pk)
    later = receiver.at("/ada")[1]
    verify(new, later)
    with pytest.raises(WebhookVerificationError):
        verify(old, later)


def test_a_secret_is_kept_sealed_not_in_the_database_as_it_is(
    researcher: User, receiver: Receiver
) -> None:
    hook, secret = endpoint(researcher, receiver.url("/ada"))
    assert secret.startswith("whsec_")
    row = json.dumps(list(Endpoint.objects.filter(pk=hook.pk).values()), default=str)
    assert secret not in row
    assert secret.removeprefix("whsec_") not in row
    assert services.signing.unseal(hook.secret_sealed) == secret


def test_an_endpoint_failing_for_three_days_is_turned_off_and_its_owner_mailed(
    ada_order: Order, researcher: User, receiver: Receiver
) -> None:
    hook, _secret = endpoint(researcher, receiver.url("/down", Script(statuses=[500, 500, 200])))
    delivery = one_delivery(ada_order)
    services.deliver(delivery.pk)
    hook.refresh_from_db()
    assert hook.failing_since is not None
    now = timezone.now()
    assert services.disable_failing(now=now + timedelta(days=2, hours=23)) == 0
    assert services.disable_failing(now=now + timedelta(days=3, minutes=1)) == 1
    hook.refresh_from_db()
    assert hook.enabled is False
    assert hook.disabled_reason.startswith("failing since")
    (sent,) = mail.outbox
    assert sent.to == ["ada@example.org"]
    assert hook.url in sent.subject
    assert f"/account/webhooks/{hook.public_id}/" in sent.body
    # off: nothing is attempted, beat leaves it alone, no new event reaches it
    delivery.refresh_from_db()
    assert services.deliver(delivery.pk, now=now + timedelta(days=4)) is False
    assert services.queue_due(now=now + timedelta(days=4)) == 0
    # turned on again: what was pending is due at once, and the count starts over
    services.update_endpoint(hook, enabled=True)
    hook.refresh_from_db()
    assert (hook.failing_since, hook.disabled_reason) == (None, "")
    assert services.deliver(delivery.pk) is False  # the script's second 500
    delivery.refresh_from_db()
    assert delivery.attempts == 2  # its second failure: the next wait is the second's
    assert services.deliver(delivery.pk, now=timezone.now() + timedelta(minutes=6))
    delivery.refresh_from_db()
    assert delivery.status == "delivered"


def test_a_failing_endpoint_gets_one_attempt_at_a_time_the_others_wait_uncounted(
    ada_order: Order, researcher: User, receiver: Receiver, make_request: Any
) -> None:
    from reservations.services import place_order

    endpoint(researcher, receiver.url("/down", Script(statuses=[500])))
    first = one_delivery(ada_order)
    services.deliver(first.pk)  # it fails: the endpoint is failing now
    later = place_order(
        make_request(lot_count=1, window_days=3, starts_at=ada_order.starts_at + timedelta(days=9)),
        user=researcher,
    )
    order_placed.announce(order_id=later.pk)
    second = Delivery.objects.exclude(pk=first.pk).get()
    now = timezone.now() + timedelta(seconds=10)
    # the first one's retry is being posted (its lease held) when the second comes due
    Delivery.objects.filter(pk=first.pk).update(leased_until=now + timedelta(seconds=30))
    assert services.deliver(second.pk, now=now) is False
    second.refresh_from_db()
    assert (second.attempts, second.status) == (0, "pending")  # no attempt counted
    assert second.next_attempt_at >= now + services.FAILING_PROBE_MIN  # type: ignore[operator]
    assert len(receiver.at("/down")) == 1  # nothing more was posted
    # once the other is done, it is tried in its turn
    Delivery.objects.filter(pk=first.pk).update(leased_until=None)
    assert services.deliver(second.pk, now=second.next_attempt_at) is False
    second.refresh_from_db()
    assert second.attempts == 1
    assert len(receiver.at("/down")) == 2
