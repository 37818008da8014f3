"""Registering endpoints — in the account's page, the desk and the API — with the same
services: the secret shown once, the events an owner may ask for, bounded per owner, one
account's endpoints invisible to another, the desk's Today listing those failing."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import User
from api.models import ApiToken
from desk import today
from reservations.events import order_placed
from reservations.models import Order
from tests.webhooks.receiver import Receiver, Script
from webhooks import catalogue, services
from webhooks.models import Delivery, Endpoint


def bearer(user: User) -> Client:
    """A client with one of ``user``'s API tokens."""
    _record, token = ApiToken.issue(user, "test")
    return Client(headers={"Authorization": f"Bearer {token}"})


# --------------------------------------------------------------------------- the API


def test_a_lab_registers_an_endpoint_through_the_api_and_sees_its_secret_once(
    researcher: User, receiver: Receiver, client: Client
) -> None:
    auth = bearer(researcher)
    made = auth.post(
        "/api/v1/webhooks/",
        {"url": receiver.url("/ada"), "event_types": ["order.paid", "report.ready"]},
        content_type="application/json",
    )
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["secret"].startswith("whsec_")
    assert body["event_types"] == ["order.paid", "report.ready"]
    assert body["all_orders"] is False
    shown = auth.get(f"/api/v1/webhooks/{body['id']}/").json()
    assert "secret" not in shown
    assert auth.get("/api/v1/webhooks/").json() == [shown]
    changed = auth.patch(
        f"/api/v1/webhooks/{body['id']}/",
        {"description": "the lab scheduler", "event_types": []},
        content_type="application/json",
    )
    assert changed.status_code == 200
    assert (changed.json()["description"], changed.json()["event_types"]) == (
        "the lab scheduler",
        [],
    )
    rotated = auth.post(f"/api/v1/webhooks/{body['id']}/rotate-secret/").json()
    assert rotated["secret"] != body["secret"]
    assert rotated["previous_secret_until"] is not None
    assert auth.delete(f"/api/v1/webhooks/{body['id']}/").status_code == 204
    assert not Endpoint.objects.exists()


def test_the_api_refuses_bad_endpoints_with_a_code_and_changes_nothing(
    researcher: User, client: Client, settings: Any
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    auth = bearer(researcher)

    def post(**fields: Any) -> Any:
        return auth.post("/api/v1/webhooks/", fields, content_type="application/json")

    private = post(url="https://169.254.169.254/latest/meta-data/")
    assert private.status_code == 400
    assert private.json()["code"] == "private_address"
    assert private.json()["fields"]["url"][0]["code"] == "private_address"
    operators = post(url="https://example.org/hook", event_types=["lot.held"])
    assert operators.json()["code"] == "unknown_event_type"
    everything = post(url="https://example.org/hook", all_orders=True)
    assert everything.json()["code"] == "operators_only"
    unknown_field = post(url="https://example.org/hook", secret="mine")
    assert unknown_field.status_code == 400
    assert not Endpoint.objects.exists()


def test_an_owner_has_a_bounded_number_of_endpoints(
    researcher: User, receiver: Receiver, settings: Any
) -> None:
    settings.WEBHOOK_MAX_ENDPOINTS = 2
    for number in range(2):
        services.create_endpoint(researcher, url=receiver.url(f"/{number}"), event_types=[])
    with pytest.raises(services.ValidationError) as refused:
        services.create_endpoint(researcher, url=receiver.url("/3"), event_types=[])
    assert refused.value.error_dict["url"][0].code == "too_many_endpoints"
    assert Endpoint.objects.count() == 2


def test_one_account_never_sees_or_touches_anothers_endpoint(
    researcher: User, other: User, receiver: Receiver, client: Client, ada_order: Order
) -> None:
    hook, _secret = services.create_endpoint(researcher, url=receiver.url("/ada"), event_types=[])
    order_placed.announce(order_id=ada_order.pk)
    delivery = Delivery.objects.get()
    eve = bearer(other)
    base = f"/api/v1/webhooks/{hook.public_id}/"
    assert eve.get("/api/v1/webhooks/").json() == []
    assert eve.get(base).status_code == 404
    assert eve.patch(base, {"enabled": False}, content_type="application/json").status_code == 404
    assert eve.delete(base).status_code == 404
    assert eve.post(f"{base}rotate-secret/").status_code == 404
    assert eve.post(f"{base}test/").status_code == 404
    assert eve.get(f"{base}deliveries/").status_code == 404
    redeliver = f"{base}deliveries/{delivery.pk}/redeliver/"
    assert eve.post(redeliver).status_code == 404
    client.force_login(other)
    assert client.get(f"/en/account/webhooks/{hook.public_id}/").status_code == 404
    assert client.post(f"/en/account/webhooks/{hook.public_id}/delete/").status_code == 404
    hook.refresh_from_db()
    assert hook.enabled is True
    assert hook.secret_sealed


def test_the_delivery_log_and_redeliver_in_the_api(
    researcher: User, receiver: Receiver, client: Client, ada_order: Order
) -> None:
    hook, _secret = services.create_endpoint(
        researcher, url=receiver.url("/flaky", Script(statuses=[500, 200])), event_types=[]
    )
    order_placed.announce(order_id=ada_order.pk)
    delivery = Delivery.objects.get()
    services.deliver(delivery.pk)
    auth = bearer(researcher)
    base = f"/api/v1/webhooks/{hook.public_id}/"
    (logged,) = auth.get(f"{base}deliveries/").json()
    assert logged["event_type"] == "order.placed"
    assert logged["order"] == ada_order.reference
    assert logged["status"] == "pending"
    assert logged["next_attempt_at"] is not None
    assert [(a["number"], a["status_code"]) for a in logged["attempt_log"]] == [(1, 500)]
    assert logged["payload"]["data"]["order"]["reference"] == ada_order.reference
    answer = auth.post(f"{base}deliveries/{delivery.pk}/redeliver/")
    assert answer.status_code == 202
    services.deliver(delivery.pk, by_hand=True)
    (logged,) = auth.get(f"{base}deliveries/").json()
    assert logged["status"] == "delivered"
    assert [(a["status_code"], a["by_hand"]) for a in logged["attempt_log"]] == [
        (200, True),
        (500, False),
    ]
    test = auth.post(f"{base}test/")
    assert test.status_code == 202
    assert test.json()["event_type"] == "webhook.test"
    assert test.json()["order"] is None


def test_the_event_types_offered_depend_on_who_asks(
    researcher: User, operator: User, client: Client
) -> None:
    mine = {e["name"] for e in bearer(researcher).get("/api/v1/webhooks/event-types/").json()}
    theirs = {e["name"] for e in bearer(operator).get("/api/v1/webhooks/event-types/").json()}
    assert theirs == {e.name for e in catalogue.EVENT_TYPES}
    assert theirs - mine == {"lot.held", "payment.needs_decision"}


# --------------------------------------------------------------------------- the page


def test_a_researcher_adds_an_endpoint_on_the_account_page(
    researcher: User, receiver: Receiver, client: Client, ada_order: Order
) -> None:
    client.force_login(researcher)
    page = client.get("/en/account/webhooks/")
    assert page.status_code == 200
    assert "lot.held" not in page.content.decode()  # operators' events are not offered
    made = client.post(
        "/en/account/webhooks/",
        {"url": receiver.url("/ada"), "event_types": ["order.placed"], "enabled": "on"},
    )
    assert made.status_code == 200
    hook = Endpoint.objects.get()
    secret = services.signing.unseal(hook.secret_sealed)
    assert secret in made.content.decode()  # shown this once
    assert made["Cache-Control"].startswith("no-store") or "no-store" in made["Cache-Control"]
    again = client.get(f"/en/account/webhooks/{hook.public_id}/").content.decode()
    assert secret not in again
    order_placed.announce(order_id=ada_order.pk)
    services.deliver(Delivery.objects.get().pk)
    log = client.get(f"/en/account/webhooks/{hook.public_id}/").content.decode()
    assert 'data-testid="delivery-log"' in log
    assert "order.placed" in log
    assert "200" in log
    client.post(f"/en/account/webhooks/{hook.public_id}/test/")
    assert Delivery.objects.filter(message__event_type="webhook.test").count() == 1
    refused = client.post("/en/account/webhooks/", {"url": "ftp://example.org/"})
    assert refused.status_code == 200
    assert Endpoint.objects.count() == 1


def test_the_page_says_why_an_address_is_refused(
    researcher: User, client: Client, settings: Any
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    client.force_login(researcher)
    page = client.post("/en/account/webhooks/", {"url": "https://10.0.0.8/hook"})
    assert "webhooks go to public addresses only" in page.content.decode()
    assert not Endpoint.objects.exists()


# --------------------------------------------------------------------------- the desk


def test_the_desk_registers_an_operators_endpoint_through_the_service(
    operator: User, receiver: Receiver, client: Client, ada_order: Order
) -> None:
    client.force_login(operator)
    added = client.post(
        "/admin/webhooks/endpoint/add/",
        {
            "url": receiver.url("/desk"),
            "description": "approvals channel",
            "event_types": ["order.placed", "lot.held"],
            "enabled": "on",
            "all_orders": "on",
        },
    )
    assert added.status_code == 200, added.content.decode()[:3000]
    hook = Endpoint.objects.get()
    assert (hook.owner, hook.all_orders, hook.event_types) == (
        operator,
        True,
        ["order.placed", "lot.held"],
    )
    assert services.signing.unseal(hook.secret_sealed) in added.content.decode()
    order_placed.announce(order_id=ada_order.pk)  # ada's order: an operator's hears of it
    assert Delivery.objects.filter(endpoint=hook).count() == 1


def test_the_desk_refuses_a_private_address_on_the_field(
    operator: User, client: Client, settings: Any
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False
    client.force_login(operator)
    page = client.post(
        "/admin/webhooks/endpoint/add/",
        {"url": "https://192.168.1.4/hook", "enabled": "on", "all_orders": "on"},
    )
    assert page.status_code == 200
    assert "webhooks go to public addresses only" in page.content.decode()
    assert not Endpoint.objects.exists()


def test_todays_desk_lists_the_endpoints_that_fail(
    researcher: User, operator: User, receiver: Receiver, client: Client, ada_order: Order
) -> None:
    hook, _secret = services.create_endpoint(
        researcher, url=receiver.url("/down", Script(statuses=[500])), event_types=[]
    )
    assert "failing_webhooks" not in [s.key for s in today.sections()]
    order_placed.announce(order_id=ada_order.pk)
    services.deliver(Delivery.objects.get().pk)
    (item,) = today.failing_webhooks().items
    assert item.label == f"{hook.url} (ada@example.org)"
    client.force_login(operator)
    page = client.get("/admin/").content.decode()
    assert 'id="today-failing_webhooks"' in page
    log = client.get(f"/admin/webhooks/delivery/{Delivery.objects.get().pk}/change/")
    assert log.status_code == 200
    assert "500" in log.content.decode()


def test_turning_an_endpoint_on_again_in_the_desk_makes_what_is_pending_due(
    operator: User, researcher: User, receiver: Receiver, client: Client, ada_order: Order
) -> None:
    hook, _secret = services.create_endpoint(
        researcher, url=receiver.url("/ada", Script(statuses=[500])), event_types=[]
    )
    order_placed.announce(order_id=ada_order.pk)
    delivery = Delivery.objects.get()
    services.deliver(delivery.pk)
    services.update_endpoint(hook, enabled=False)
    client.force_login(operator)
    page = client.post(
        f"/admin/webhooks/endpoint/{hook.pk}/change/",
        {
            "url": hook.url,
            "description": "",
            "enabled": "on",
            "deliveries-TOTAL_FORMS": "0",
            "deliveries-INITIAL_FORMS": "0",
            "deliveries-MIN_NUM_FORMS": "0",
            "deliveries-MAX_NUM_FORMS": "0",
        },
    )
    assert page.status_code == 302, page.content.decode()[:2000]
    hook.refresh_from_db()
    delivery.refresh_from_db()
    assert (hook.enabled, hook.failing_since) == (True, None)
    assert delivery.next_attempt_at is not None
    assert delivery.next_attempt_at <= timezone.now()  # due at once, not in 5 seconds
