"""One e-mail address, one identity: a look-alike address (dotless i, long s, full-width
letters, other case) is the same identity only when its mail reaches the same mailbox, and
never takes over another researcher's guest orders or sign-in links."""

from __future__ import annotations

import importlib
import re

import pytest
from django.apps import apps
from django.core import mail
from django.core.cache import cache
from django.test import Client

from accounts.models import User
from infra.identity import NotAnAddress, canonical_email
from reservations.errors import BookingRefused
from reservations.models import Order
from reservations.services import place_order
from tests.conftest import Inventory, RequestFactory

pytestmark = pytest.mark.django_db

DOTLESS = "victim@v\u0131sible.example"  # dotless i: PostgreSQL's upper() makes it I
LONG_S = "victim@vi\u017fible.example"  # long s: IDNA folds it to s (mail: visible.example)


@pytest.fixture(autouse=True)
def fresh_throttle(eager_tasks: None) -> None:
    """Sign-in links are mailed by a task (run here in the test's process: see
    test_sign_in_limits.py for the request that only enqueues it)."""
    cache.clear()


def sign_in(client: Client, email: str) -> User:
    assert client.post("/en/account/sign-in/", {"email": email}).status_code == 200
    body = str(mail.outbox[-1].body)
    link = re.search(r"http://[^/\s]+(/\S+/account/sign-in/\S+/\S+/)", body)
    assert link, body
    assert client.post(link.group(1)).status_code == 302
    return User.objects.get(pk=client.session["_auth_user_id"])


def test_the_canonical_form_is_where_the_mail_goes() -> None:
    assert canonical_email(" Victim@Visible.Example ") == "victim@visible.example"
    assert canonical_email(DOTLESS) == "victim@xn--vsible-p9a.example"
    assert canonical_email(LONG_S) == "victim@visible.example"
    assert canonical_email("victim@\uff56isible.example") == "victim@visible.example"
    with pytest.raises(NotAnAddress):
        canonical_email("v\u0131ctim@visible.example")  # a non-ASCII name before the @


def test_a_dotless_i_address_never_takes_the_victims_guest_orders(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    victims = place_order(make_request(contact_email="victim@visible.example"))
    attacker = sign_in(client, DOTLESS)
    assert mail.outbox[-1].to == ["victim@xn--vsible-p9a.example"]  # the attacker's mailbox
    assert attacker.email == "victim@xn--vsible-p9a.example"
    victims.refresh_from_db()
    assert victims.user is None
    assert victims.reference not in client.get("/en/account/orders/").content.decode()

    # The victim's own sign-in is theirs: mailed to their address, their order attached.
    other = Client()
    victim = sign_in(other, "Victim@Visible.example")
    assert mail.outbox[-1].to == ["victim@visible.example"]
    assert victim.pk != attacker.pk
    victims.refresh_from_db()
    assert victims.user_id == victim.pk


def test_addresses_whose_mail_reaches_one_mailbox_are_one_identity(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request(contact_email=LONG_S))
    assert order.contact_email == "victim@visible.example"  # stored as mail goes there
    user = sign_in(client, "VICTIM@visible.example")
    order.refresh_from_db()
    assert order.user_id == user.pk
    assert sign_in(Client(), LONG_S).pk == user.pk  # the same account, not a second one


def test_an_address_with_a_non_ascii_name_is_refused_everywhere(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    with pytest.raises(BookingRefused) as refused:
        place_order(make_request(contact_email="v\u0131ctim@visible.example"))
    assert "contact_email" in refused.value.error_dict
    response = client.post("/en/account/sign-in/", {"email": "v\u0131ctim@visible.example"})
    assert "valid email address" in response.content.decode()
    assert mail.outbox == []
    assert not User.objects.exists()
    assert not Order.objects.exists()


def test_existing_addresses_move_to_their_canonical_form(inventory: Inventory) -> None:
    User.objects.bulk_create(
        [User(email="Ada@Example.ORG"), User(email="v\u0131ctim@visible.example")]
    )
    migration = importlib.import_module("accounts.migrations.0002_canonical_emails")
    migration.canonical_addresses(apps, None)
    assert set(User.objects.values_list("email", flat=True)) == {
        "ada@example.org",
        "v\u0131ctim@visible.example",  # no canonical form: left, and said
    }
