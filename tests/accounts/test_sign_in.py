"""Sign-in by e-mail link; guest orders join the account that proves their address."""

from __future__ import annotations

import re
from datetime import timedelta
from unittest import mock
from urllib.parse import urlparse

import pytest
from django.core import mail
from django.core.cache import cache
from django.test import Client

from accounts.models import User
from accounts.tokens import LINK_MINUTES, sign_in_tokens
from reservations.services import place_order
from tests.conftest import Inventory, RequestFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_throttle(eager_tasks: None) -> None:
    """Sign-in links are mailed by a task (run here in the test's process: see
    test_sign_in_limits.py for the request that only enqueues it)."""
    cache.clear()


def ask_for_link(client: Client, email: str, language: str = "en") -> str:
    response = client.post(f"/{language}/account/sign-in/", {"email": email})
    assert response.status_code == 200
    body = str(mail.outbox[-1].body)
    match = re.search(r"http://\S+/account/sign-in/\S+/\S+/", body)
    assert match, body
    return urlparse(match.group(0)).path


def test_a_link_signs_in_and_brings_the_guest_orders_along(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    mine = place_order(make_request(contact_email="Ada@Example.org"))
    theirs = place_order(make_request(contact_email="eve@example.org"))

    link = ask_for_link(client, "ada@example.org")
    confirm = client.get(link)
    assert confirm.status_code == 200
    assert "ada@example.org" in confirm.content.decode()
    assert "_auth_user_id" not in client.session  # a GET (a mail scanner) signs nobody in

    response = client.post(link)
    assert response.status_code == 302
    assert response["Location"] == "/en/account/orders/"
    page = client.get("/en/account/orders/").content.decode()
    assert mine.reference in page
    assert theirs.reference not in page
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.user is not None
    assert mine.user.email == "ada@example.org"
    assert theirs.user is None


def test_a_link_works_once(client: Client, inventory: Inventory) -> None:
    link = ask_for_link(client, "ada@example.org")
    client.post(link)
    client.post("/en/account/sign-out/")
    again = client.post(link)
    assert again.status_code == 400
    assert "_auth_user_id" not in client.session


def test_a_link_expires(client: Client, inventory: Inventory) -> None:
    link = ask_for_link(client, "ada@example.org")
    later = sign_in_tokens._now() + timedelta(minutes=LINK_MINUTES + 1)
    with mock.patch.object(type(sign_in_tokens), "_now", return_value=later):
        assert client.post(link).status_code == 400


def test_a_tampered_link_is_refused(client: Client, inventory: Inventory) -> None:
    link = ask_for_link(client, "ada@example.org")
    assert client.post(link[:-3] + "xx/").status_code == 400
    assert client.post("/en/account/sign-in/Zm9v/abc-def/").status_code == 400


def test_operators_do_not_get_links(client: Client) -> None:
    User.objects.create_superuser("op@example.org", "a-long-operator-password")
    response = client.post("/en/account/sign-in/", {"email": "op@example.org"})
    assert response.status_code == 200
    assert mail.outbox == []


def test_links_are_throttled_per_address(client: Client) -> None:
    for _ in range(7):
        client.post("/en/account/sign-in/", {"email": "ada@example.org"})
    assert len(mail.outbox) == 5


def test_the_link_mail_speaks_the_page_language(client: Client) -> None:
    client.post("/fr/account/sign-in/", {"email": "ada@example.org"})
    assert "/fr/account/sign-in/" in mail.outbox[0].body


def test_my_orders_needs_a_sign_in(client: Client) -> None:
    response = client.get("/en/account/orders/")
    assert response.status_code == 302
    assert "/en/account/sign-in/" in response["Location"]
