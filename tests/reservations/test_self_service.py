"""Self-service on the order page and in the API: cancelling before payment, changing the
SSH keys before access opens, RFC 4716 / PuTTY public keys converted wherever keys are
accepted, a private key refused with nothing changed, and the operator's help contact on
every page and in every mail."""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from django.core.mail import EmailMultiAlternatives
from django.db import transaction
from django.test import Client
from django.utils import timezone

from accounts.models import User
from pages.forms import ContactForm
from provisioning import services as provisioning
from provisioning.backends import LocalBackend
from provisioning.models import ProvisioningJob
from reservations.models import Hold, Order, OrderEvent
from reservations.notifications import send_order_placed_once
from reservations.services import Actor, mark_paid, place_order, system
from reservations.ssh_keys import SSH2_END, SshKeyError, parse_public_keys
from tests.conftest import PRIVATE_KEY, Inventory, RequestFactory, openssh_public_key
from tests.provisioning.clock import run_at_start

PPK = (
    "PuTTY-User-Key-File-3: ssh-ed25519\n"
    "Encryption: none\n"
    'Comment: "ed25519-key-20261201"\n'
    "Public-Lines: 2\n"
    "AAAAC3NzaC1lZDI1NTE5AAAAIHYRHhEGbyZH3Bu5Kvq+fbY34OnhAE+pRyQNyOi6s9F7\n"
    "Private-Lines: 1\n"
    "AAAAIGx5bmNoLXByaXZhdGUta2V5LW5vdC1yZWFsLWJ1dC1sb29rcy1saWtlLWl0\n"
    "Private-MAC: 0b0c0d\n"
)
"""The start of a PuTTY private key file (.ppk), as a researcher might paste it."""


def rfc4716(openssh_line: str, comment: str, *, width: int = 70) -> str:
    """A public key as PuTTYgen's "Save public key" writes it (RFC 4716): quoted comment,
    the blob wrapped."""
    encoded = openssh_line.split()[1]
    body = "\n".join(textwrap.wrap(encoded, width))
    return "\n".join(["---- BEGIN SSH2 PUBLIC KEY ----", f'Comment: "{comment}"', body, SSH2_END])


def key_material(line: str) -> str:
    return " ".join(line.split()[:2])


def page(order: Order) -> str:
    return f"/en/orders/{order.reference}/{order.secret}/"


# --------------------------------------------------------------------------- cancelling


@pytest.mark.django_db
def test_the_researcher_cancels_an_unpaid_order_from_its_page(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request())
    html = client.get(page(order)).content.decode()
    assert f'action="{page(order)}cancel/#cancel-title"' in html
    assert "csrfmiddlewaretoken" in html

    # Without the confirmation ticked nothing happens.
    refused = client.post(page(order) + "cancel/", {"reason": "wrong dates"})
    assert refused.status_code == 400
    assert "Tick this box to cancel: without it nothing happens." in refused.content.decode()
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_AWAITING_PAYMENT

    done = client.post(page(order) + "cancel/", {"reason": "wrong dates", "confirm": "on"})
    assert done.status_code == 302
    assert done["Location"] == page(order) + "?done=cancelled#self-service"
    order.refresh_from_db()
    assert order.status == Order.STATUS_CANCELLED
    assert not Hold.objects.filter(order=order, status__in=Hold.COUNTING).exists()
    event = order.events.get(to_status=Order.STATUS_CANCELLED)
    assert (event.actor_label, event.reason) == ("researcher", "wrong dates")
    after = client.get(done["Location"]).content.decode()
    assert "Your order is cancelled and its lots are released." in after
    assert f'action="{page(order)}cancel/#cancel-title"' not in after  # nothing left to cancel


@pytest.mark.django_db
def test_the_reason_is_optional_and_the_owner_is_named(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    user = User.objects.create_user("ada@example.org")
    order = place_order(make_request(), user=user)
    client.force_login(user)
    assert client.post(page(order) + "cancel/", {"confirm": "on"}).status_code == 302
    event = Order.objects.get(pk=order.pk).events.get(to_status=Order.STATUS_CANCELLED)
    assert event.actor_label == "ada@example.org"
    assert event.reason == "cancelled by the researcher on the order page"


@pytest.mark.django_db
def test_cancelling_needs_the_csrf_token_and_the_orders_secret(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request())
    strict = Client(enforce_csrf_checks=True)
    assert strict.post(page(order) + "cancel/", {"confirm": "on"}).status_code == 403
    wrong = f"/en/orders/{order.reference}/not-the-secret/cancel/"
    assert Client().post(wrong, {"confirm": "on"}).status_code == 404
    assert Client().get(page(order) + "cancel/").status_code == 405
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_AWAITING_PAYMENT


@pytest.mark.django_db
def test_a_paid_order_is_not_cancelled_from_its_page(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request())
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="paid")
    assert (
        f'action="{page(order)}cancel/#cancel-title"'
        not in client.get(page(order)).content.decode()
    )
    refused = client.post(page(order) + "cancel/", {"confirm": "on"})
    assert refused.status_code == 400
    assert "This order is not waiting for a payment." in refused.content.decode()
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_PAID


# --------------------------------------------------------------------------- keys


@pytest.mark.django_db
def test_keys_changed_before_access_are_the_ones_that_go_onto_the_host(
    client: Client, make_request: RequestFactory, tmp_path: Path
) -> None:
    from tests.provisioning.test_provisioning import OPERATOR, paid_order

    order = paid_order(make_request)
    old = order.ssh_keys.get()
    new_line = openssh_public_key("laptop@lab")
    html = client.get(page(order)).content.decode()
    assert f'action="{page(order)}ssh-keys/#ssh-keys-title"' in html
    assert old.public_key in html  # the current keys, to edit

    changed = client.post(page(order) + "ssh-keys/", {"ssh_public_keys": new_line})
    assert changed.status_code == 302
    (key,) = order.ssh_keys.all()
    assert key.public_key == new_line
    event = order.events.get(reason__startswith="SSH keys changed")
    assert key.fingerprint in event.reason
    after = client.get(changed["Location"]).content.decode()
    assert "Your SSH keys are changed." in after
    assert key.fingerprint in after  # the summary shows them at once
    assert old.fingerprint not in after

    # The same keys again change nothing.
    same = client.post(page(order) + "ssh-keys/", {"ssh_public_keys": new_line})
    assert "nothing changed" in client.get(same["Location"]).content.decode()
    assert order.events.filter(reason__startswith="SSH keys changed").count() == 1

    # At the window's start the new key goes in, the old one never did.
    backend = LocalBackend(tmp_path / "hosts")
    provisioning.approve_order(order, actor=OPERATOR)
    job = run_at_start(ProvisioningJob.objects.get(order=order).pk, backend)
    assert job.status == ProvisioningJob.Status.READY
    keys = (backend.root / job.lot.host.name / "home" / job.accounts[0] / ".ssh").joinpath(
        "authorized_keys"
    )
    assert keys.read_text().strip() == new_line


@pytest.mark.django_db
def test_a_pasted_private_key_is_refused_never_echoed_and_changes_nothing(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request())
    before = list(order.ssh_keys.values_list("public_key", flat=True))
    for secret in (PRIVATE_KEY, PPK):
        refused = client.post(page(order) + "ssh-keys/", {"ssh_public_keys": secret})
        assert refused.status_code == 400
        html = refused.content.decode()
        assert "This is a private key. Never share it" in html
        assert "b3BlbnNzaC1rZXktdjE" not in html
        assert "Private-Lines" not in html
        assert "AAAAIGx5bmNoLXByaXZhdGUta2V5" not in html
    assert list(order.ssh_keys.values_list("public_key", flat=True)) == before
    assert not order.events.filter(reason__startswith="SSH keys changed").exists()
    assert Order.objects.get(pk=order.pk).updated_at == order.updated_at


@pytest.mark.django_db
def test_a_bad_key_is_refused_with_its_line_and_the_old_keys_stay(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request())
    before = order.ssh_keys.get().public_key
    text = openssh_public_key() + "\nssh-ed25519 AAAAnot-base64"
    refused = client.post(page(order) + "ssh-keys/", {"ssh_public_keys": text})
    assert refused.status_code == 400
    assert "Line 2 is not a usable SSH public key" in refused.content.decode()
    assert order.ssh_keys.get().public_key == before


@pytest.mark.django_db
def test_keys_cannot_change_once_the_order_is_over(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request())
    before = order.ssh_keys.get().public_key
    Order.objects.filter(pk=order.pk).update(status=Order.STATUS_CANCELLED)
    assert (
        f'action="{page(order)}ssh-keys/#ssh-keys-title"'
        not in client.get(page(order)).content.decode()
    )
    refused = client.post(page(order) + "ssh-keys/", {"ssh_public_keys": openssh_public_key()})
    assert refused.status_code == 400
    assert "can no longer change" in refused.content.decode()
    assert order.ssh_keys.get().public_key == before


# --------------------------------------------------------------------------- formats


def test_an_rfc4716_block_from_ssh_keygen_becomes_its_openssh_line(tmp_path: Path) -> None:
    for kind in ("ed25519", "rsa", "ecdsa"):
        private = tmp_path / kind
        subprocess.run(
            ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "ada@lab", "-f", str(private)],
            check=True,
        )
        exported = subprocess.run(
            ["ssh-keygen", "-e", "-f", f"{private}.pub"], check=True, capture_output=True, text=True
        ).stdout
        assert exported.startswith("---- BEGIN SSH2 PUBLIC KEY ----")
        (key,) = parse_public_keys(exported)
        openssh = Path(f"{private}.pub").read_text()
        assert key_material(key.line) == key_material(openssh)
        assert key.comment.endswith("converted by " + key.comment.split("converted by ")[-1])
        fingerprint = subprocess.run(
            ["ssh-keygen", "-l", "-f", f"{private}.pub"], check=True, capture_output=True, text=True
        ).stdout.split()[1]
        assert key.fingerprint == fingerprint


def test_puttys_public_key_export_is_converted_with_its_comment() -> None:
    line = openssh_public_key("unused")
    putty = rfc4716(line, "ed25519-key-20261201", width=64)
    # A header continued over two lines (RFC 4716 allows it) and another header too.
    putty = putty.replace("Comment:", "x-note: long \\\nvalue\nComment:")
    text = "\n".join([openssh_public_key("other@lab"), "", putty])
    keys = parse_public_keys(text)
    assert len(keys) == 2
    assert keys[1].line == f"{key_material(line)} ed25519-key-20261201"


def test_a_block_holding_an_unsupported_or_broken_key_is_refused_by_line() -> None:
    dsa_blob = base64.b64encode(
        b"".join(struct.pack(">I", len(f)) + f for f in (b"ssh-dss", b"\x01", b"\x02"))
    ).decode()
    block = f"---- BEGIN SSH2 PUBLIC KEY ----\n{dsa_blob}\n---- END SSH2 PUBLIC KEY ----"
    for text, code, detail in (
        (block, "ssh_key_weak", "DSA"),
        ("\n" + block.replace(dsa_blob, "AAAA!!"), "ssh_key_invalid", "base64"),
        (block.replace("---- END SSH2 PUBLIC KEY ----", ""), "ssh_key_invalid", "END"),
        (block.replace(dsa_blob, base64.b64encode(b"\x00" * 12).decode()), "ssh_key_invalid", ""),
    ):
        with pytest.raises(SshKeyError) as refused:
            parse_public_keys(text)
        assert refused.value.code == code, text
        assert detail in refused.value.detail
        assert refused.value.line_number == (2 if text.startswith("\n") else 1)


def test_private_keys_in_putty_and_openssh_form_are_refused_as_private() -> None:
    for text in (PPK, PRIVATE_KEY, "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----\nAAAA\n"):
        with pytest.raises(SshKeyError) as refused:
            parse_public_keys(text)
        assert refused.value.code == "ssh_private_key"


@pytest.mark.django_db
def test_the_booking_form_and_the_api_accept_a_putty_block(
    client: Client, inventory: Inventory, ada: tuple[User, str]
) -> None:
    line = openssh_public_key("unused")
    form = ContactForm(
        {
            "contact_name": "Ada",
            "contact_email": "ada@example.org",
            "ssh_public_keys": rfc4716(line, "ada"),
        },
        window_days=7,
    )
    assert form.is_valid(), form.errors

    _user, token = ada
    starts_at = (timezone.now() + timedelta(days=3)).replace(microsecond=0).isoformat()
    body = {
        "kind": "h200",
        "lot_count": 1,
        "window_days": 7,
        "starts_at": starts_at,
        "environment": "pytorch-2.9-cuda-12.8",
        "usage_mode": "distributed",
        "hypothesis": "shorter_step",
        "contact_name": "Ada Lovelace",
        "contact_email": "ada@example.org",
        "ssh_public_keys": [rfc4716(line, "ada-putty")],
    }
    placed = client.post(
        "/api/v1/orders/",
        json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    assert placed.status_code == 201, placed.json()
    order = Order.objects.get(reference=placed.json()["reference"])
    assert order.ssh_keys.get().public_key == f"{key_material(line)} ada-putty"


# --------------------------------------------------------------------------- the API


def put_keys(client: Client, order: Order, token: str, keys: list[str]) -> Any:
    return client.put(
        f"/api/v1/orders/{order.reference}/ssh-keys/",
        json.dumps({"ssh_public_keys": keys}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )


@pytest.mark.django_db
def test_the_api_changes_the_keys_for_the_owner_only(
    client: Client,
    inventory: Inventory,
    make_request: RequestFactory,
    ada: tuple[User, str],
    eve: tuple[User, str],
) -> None:
    user, token = ada
    order = place_order(make_request(), user=user)
    new_line = openssh_public_key("api@lab")
    assert put_keys(client, order, eve[1], [new_line]).status_code == 404
    changed = put_keys(client, order, token, [rfc4716(new_line, "api@lab")])
    assert changed.status_code == 200, changed.json()
    (key,) = changed.json()["ssh_keys"]
    assert key["public_key"] == new_line
    assert changed.json()["changeable"] is True
    listed = client.get(
        f"/api/v1/orders/{order.reference}/ssh-keys/", headers={"Authorization": f"Bearer {token}"}
    )
    assert listed.json()["ssh_keys"] == changed.json()["ssh_keys"]
    assert order.events.get(reason__startswith="SSH keys changed").actor_label == user.email

    private = put_keys(client, order, token, [PRIVATE_KEY])
    assert (private.status_code, private.json()["code"]) == (400, "ssh_private_key")
    assert order.ssh_keys.get().public_key == new_line

    Order.objects.filter(pk=order.pk).update(status=Order.STATUS_EXPIRED)
    locked = put_keys(client, order, token, [openssh_public_key()])
    assert (locked.status_code, locked.json()["code"]) == (409, "keys_locked")
    assert order.ssh_keys.get().public_key == new_line


# --------------------------------------------------------------------------- help


@pytest.mark.django_db
def test_every_page_and_every_mail_say_where_to_get_help(
    client: Client, inventory: Inventory, make_request: RequestFactory, settings: Any
) -> None:
    settings.HELP_EMAIL = "support@gpulots.example"
    settings.HELP_URL = "https://gpulots.example/help"
    for path in ("/en/", "/en/book/", "/de/"):
        html = client.get(path).content.decode()
        assert 'href="mailto:support@gpulots.example"' in html, path
        assert 'href="https://gpulots.example/help"' in html, path
    order = place_order(make_request())
    assert "mailto:support@gpulots.example" in client.get(page(order)).content.decode()

    mail.outbox.clear()
    assert send_order_placed_once(order.pk)
    (message,) = mail.outbox
    assert "support@gpulots.example" in str(message.body)
    assert "https://gpulots.example/help" in str(message.body)
    assert isinstance(message, EmailMultiAlternatives)
    html_body = str(message.alternatives[0][0])
    assert 'href="mailto:support@gpulots.example"' in html_body
    assert html_body.rstrip().endswith("</body></html>")

    settings.HELP_URL = ""
    html = client.get("/en/").content.decode()
    assert "Help page" not in html
    assert "support@gpulots.example" in html


def test_the_local_default_help_address_is_set() -> None:
    from django.conf import settings

    assert settings.HELP_EMAIL == "help@localhost"


@pytest.mark.django_db
def test_the_change_is_audited_as_who_made_it(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    from reservations.services import change_ssh_keys

    order = place_order(make_request())
    assert change_ssh_keys(order, openssh_public_key("x@lab"), actor=Actor("operator@example.org"))
    event = OrderEvent.objects.get(order=order, reason__startswith="SSH keys changed")
    assert (event.from_status, event.to_status) == ("awaiting_payment", "awaiting_payment")
    assert event.actor_label == "operator@example.org"
