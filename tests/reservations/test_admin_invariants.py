"""The operator's desk cannot break the inventory (issue 10, item 8): no two lots share a
card, bookings stay on cards of their kind, host names stay inside the sandbox, and the
login is rate-limited. Each refusal is a form error (or the lockout page) and writes
nothing; the database refuses the same writes from any other path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse

from accounts.models import User
from provisioning.backends import LocalBackend, StepFailed
from reservations.catalogue import DEMO_INVENTORY
from reservations.inventory import set_lot_status
from reservations.models import Hold, Host, Lot, Order
from reservations.services import Actor, cancel_order, place_order
from tests.conftest import Inventory, RequestFactory

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-operator-password"


@pytest.fixture
def operator(settings: Any) -> User:
    # A quick hasher: the login tests try many passwords (the lockout is what they test).
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return User.objects.create_superuser("operator@example.org", PASSWORD)


@pytest.fixture
def desk(client: Client, operator: User) -> Client:
    client.force_login(operator)
    return client


def host_form(host: Host, **changes: Any) -> dict[str, Any]:
    """The host's change form as the admin posts it, with its inline of lots (none added)."""
    lots = list(host.lots.order_by("pk"))
    data: dict[str, Any] = {
        "name": host.name,
        "kind": host.kind_id,
        "address": host.address,
        "ssh_port": host.ssh_port,
        "ssh_user": host.ssh_user,
        "ssh_host_key": host.ssh_host_key,
        "notes": host.notes,
        "lots-TOTAL_FORMS": len(lots),
        "lots-INITIAL_FORMS": len(lots),
        "lots-MIN_NUM_FORMS": 0,
        "lots-MAX_NUM_FORMS": 1000,
        "_save": "Save",
    }
    for i, lot in enumerate(lots):
        data.update(
            {
                f"lots-{i}-id": lot.pk,
                f"lots-{i}-host": host.pk,
                f"lots-{i}-gpu_a": lot.gpu_a,
                f"lots-{i}-gpu_b": lot.gpu_b,
            }
        )
    data.update(changes)
    return data


def add_rows(data: dict[str, Any], host: Host, *pairs: tuple[int, int]) -> dict[str, Any]:
    start = int(data["lots-TOTAL_FORMS"])
    for offset, (a, b) in enumerate(pairs):
        i = start + offset
        data.update({f"lots-{i}-host": host.pk, f"lots-{i}-gpu_a": a, f"lots-{i}-gpu_b": b})
    data["lots-TOTAL_FORMS"] = start + len(pairs)
    return data


def form_errors(response: Any) -> str:
    """Every error the admin's change form shows (its form, its inlines' rows and forms)."""
    assert response.status_code == 200, response.status_code
    errors = [str(response.context["adminform"].form.errors)]
    for inline in response.context["inline_admin_formsets"]:
        errors.append(str(inline.formset.non_form_errors()))
        errors.extend(str(form.errors) for form in inline.formset.forms)
    return " ".join(errors)


# ------------------------------------------------------------------ no two lots share a card


def test_two_new_lots_sharing_a_gpu_in_one_inline_post_are_refused_and_nothing_is_saved(
    desk: Client, inventory: Inventory
) -> None:
    host = Host.objects.create(name="new-h200", kind=inventory.h200, address="127.0.0.1")
    data = add_rows(host_form(host, notes="rack 4"), host, (0, 1), (1, 2))

    response = desk.post(reverse("admin:reservations_host_change", args=[host.pk]), data)

    assert "Rows 1 and 2 both take GPU 1." in form_errors(response)
    assert not host.lots.exists()
    host.refresh_from_db()
    assert host.notes == ""  # the host's own change is not saved either


def test_a_new_row_taking_a_gpu_of_a_saved_lot_is_refused_in_the_inline(
    desk: Client, inventory: Inventory
) -> None:
    host = inventory.h200_lots[0].host  # lots (0, 1) and (2, 3)
    data = add_rows(host_form(host), host, (3, 4))

    response = desk.post(reverse("admin:reservations_host_change", args=[host.pk]), data)

    assert "GPU" in form_errors(response)  # refused before too (by a look at the database)
    assert host.lots.count() == 2


def test_the_database_refuses_two_lots_sharing_a_gpu_whatever_writes_them(
    inventory: Inventory,
) -> None:
    host = Host.objects.create(name="shell-h200", kind=inventory.h200, address="127.0.0.1")
    Lot.objects.create(host=host, gpu_a=0, gpu_b=1)
    for a, b in [(1, 2), (0, 1), (0, 5)]:
        with pytest.raises(IntegrityError), transaction.atomic():
            Lot.objects.create(host=host, gpu_a=a, gpu_b=b)
    Lot.objects.create(host=host, gpu_a=2, gpu_b=3)  # other cards: fine
    other = Host.objects.create(name="shell-h200-b", kind=inventory.h200, address="127.0.0.1")
    Lot.objects.create(host=other, gpu_a=1, gpu_b=2)  # the same indices on another host: fine
    assert host.lots.count() == 2


def test_a_lot_in_maintenance_keeps_its_cards_a_retired_one_without_bookings_gives_them_up(
    inventory: Inventory, operator: User
) -> None:
    first = inventory.h200_lots[0]
    actor = Actor.of(operator)
    set_lot_status(first, Lot.Status.MAINTENANCE, actor=actor)
    with pytest.raises(IntegrityError), transaction.atomic():
        Lot.objects.create(host=first.host, gpu_a=1, gpu_b=4)
    set_lot_status(first, Lot.Status.RETIRED, actor=actor)
    Lot.objects.create(host=first.host, gpu_a=1, gpu_b=4)
    with pytest.raises(IntegrityError), transaction.atomic():  # its cards are taken now
        set_lot_status(first, Lot.Status.ACTIVE, actor=actor)
    assert Lot.objects.get(pk=first.pk).status == Lot.Status.RETIRED


def test_the_cards_of_a_retired_lot_still_carrying_a_booking_are_not_given_away(
    desk: Client, inventory: Inventory, make_request: RequestFactory, operator: User
) -> None:
    lot = inventory.h200_lots[0]
    place_order(make_request())  # held on the first lot
    set_lot_status(lot, Lot.Status.RETIRED, actor=Actor.of(operator))
    host = lot.host

    response = desk.post(
        reverse("admin:reservations_host_change", args=[host.pk]),
        add_rows(host_form(host), host, (1, 4)),
    )

    assert "is retired but still carries bookings" in form_errors(response)
    with pytest.raises(IntegrityError), transaction.atomic():
        Lot.objects.create(host=host, gpu_a=1, gpu_b=4)
    assert host.lots.count() == 2


# ------------------------------------------------------------- bookings stay on their kind


def test_a_lot_with_live_bookings_cannot_move_to_a_host_of_another_kind(
    desk: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    lot = inventory.h200_lots[0]
    order = place_order(make_request())
    assert order.holds.get().lot_id == lot.pk
    b200_host = inventory.b200_lots[0].host
    url = reverse("admin:reservations_lot_change", args=[lot.pk])

    response = desk.post(
        url, {"host": b200_host.pk, "gpu_a": 6, "gpu_b": 7, "status": Lot.Status.ACTIVE}
    )

    assert "cannot move to another host while it carries current or future bookings" in (
        form_errors(response)
    )
    lot.refresh_from_db()
    assert (lot.host_id, lot.gpu_a, lot.gpu_b) == (inventory.h200_lots[1].host_id, 0, 1)
    with pytest.raises(IntegrityError), transaction.atomic():  # nor from anywhere else
        Lot.objects.filter(pk=lot.pk).update(host=b200_host)

    cancel_order(order, actor=Actor.of(User.objects.get()), reason="moved to B200")
    response = desk.post(
        url, {"host": b200_host.pk, "gpu_a": 6, "gpu_b": 7, "status": Lot.Status.ACTIVE}
    )
    assert response.status_code == 302  # no booking left: the lot may move
    assert Lot.objects.get(pk=lot.pk).host_id == b200_host.pk


def test_a_host_whose_lots_carry_live_bookings_keeps_its_kind(
    desk: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    host = inventory.h200_lots[0].host
    order = place_order(make_request())
    Order.objects.filter(pk=order.pk).update(status=Order.STATUS_PAID)
    order.holds.update(status=Hold.Status.BOOKED)

    response = desk.post(
        reverse("admin:reservations_host_change", args=[host.pk]),
        host_form(host, kind=inventory.b200.pk),
    )

    assert "The kind of a host cannot change while its lots carry" in form_errors(response)
    assert Host.objects.get(pk=host.pk).kind_id == inventory.h200.pk
    with pytest.raises(IntegrityError), transaction.atomic():
        Host.objects.filter(pk=host.pk).update(kind=inventory.b200)
    assert Host.objects.get(pk=host.pk).kind_id == inventory.h200.pk
    Host.objects.filter(pk=inventory.mi300x_lots[0].host_id).update(kind=inventory.b200)


def test_a_hold_is_never_written_on_a_lot_of_another_kind(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    hold = place_order(make_request()).holds.get()
    with pytest.raises(IntegrityError), transaction.atomic():
        Hold.objects.create(
            order=hold.order, lot=inventory.b200_lots[0], period=hold.period, status="held"
        )


def test_a_write_the_database_refuses_after_the_form_checked_is_a_message_not_a_500(
    desk: Client, inventory: Inventory, make_request: RequestFactory, monkeypatch: Any
) -> None:
    """A booking placed between the form's check and the save: the trigger has the last
    word, the admin says so and nothing is saved."""
    lot = inventory.h200_lots[0]
    place_order(make_request())
    monkeypatch.setattr(Lot, "clean", lambda self: None)  # as if checked before the booking
    url = reverse("admin:reservations_lot_change", args=[lot.pk])

    response = desk.post(
        url,
        {"host": inventory.b200_lots[0].host_id, "gpu_a": 6, "gpu_b": 7, "status": "active"},
        follow=True,
    )

    assert response.status_code == 200
    assert any("Nothing saved" in str(m) for m in response.context["messages"])
    lot.refresh_from_db()
    assert (lot.host_id, lot.gpu_a) == (inventory.h200_lots[1].host_id, 0)


# ---------------------------------------------------------------------------- host names


@pytest.mark.parametrize("name", ["../x", "..", "a/b", "a..b", "-x", "x-", ".x", "X", "a b", ""])
def test_a_host_name_that_is_not_dns_labels_is_refused_in_the_admin_and_the_database(
    desk: Client, inventory: Inventory, name: str
) -> None:
    response = desk.post(
        reverse("admin:reservations_host_add"),
        {
            "name": name,
            "kind": inventory.h200.pk,
            "address": "127.0.0.1",
            "ssh_port": 22,
            "ssh_user": "gpulots",
            "lots-TOTAL_FORMS": 0,
            "lots-INITIAL_FORMS": 0,
            "_save": "Save",
        },
    )
    assert "name" in response.context["adminform"].form.errors
    assert not Host.objects.filter(name=name).exists()
    with pytest.raises(IntegrityError), transaction.atomic():
        Host.objects.create(name=name, kind=inventory.h200, address="127.0.0.1")


def test_the_inventory_names_in_use_are_valid_host_names(inventory: Inventory) -> None:
    demo = [name for hosts in DEMO_INVENTORY.values() for name, _lots in hosts]
    for name in [*demo, "gpu-h200-1", "gpu1.lab.example", "a", "spare-h200"]:
        Host(name=name, kind=inventory.h200, address="127.0.0.1").full_clean()


def test_the_local_backend_never_leaves_its_sandbox(tmp_path: Path) -> None:
    root = tmp_path / "hosts"
    backend = LocalBackend(root)
    for name in ["../x", "..", ".", "", "a/../../y", "/etc"]:
        with pytest.raises(StepFailed, match="not a folder of the sandbox"):
            backend.host_root(Host(name=name))
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    root.mkdir()
    (root / "linked").symlink_to(outside)
    with pytest.raises(StepFailed):
        backend.host_root(Host(name="linked"))
    assert backend.host_root(Host(name="gpu-h200-1")) == root / "gpu-h200-1"


# ----------------------------------------------------------------------------- the login


def sign_in(client: Client, username: str, password: str, address: str = "127.0.0.1") -> Any:
    return client.post(
        reverse("admin:login"),
        {"username": username, "password": password, "next": "/admin/"},
        REMOTE_ADDR=address,
    )


def test_the_admin_login_locks_out_after_the_failure_limit_the_right_password_included(
    client: Client, operator: User, settings: Any
) -> None:
    answers = [sign_in(client, operator.email, f"wrong-{i}").status_code for i in range(25)]

    limit = getattr(settings, "AXES_FAILURE_LIMIT", 5)
    assert answers[: limit - 1] == [200] * (limit - 1)  # the form again, with its error
    assert set(answers[limit:]) == {429}
    locked = sign_in(client, operator.email, PASSWORD)
    assert locked.status_code == 429
    assert "Sign-in locked" in locked.content.decode()
    assert "axes_reset" in locked.content.decode()
    assert "_auth_user_id" not in client.session
    # The same account under another spelling is the same account.
    assert sign_in(client, "Operator@EXAMPLE.org", PASSWORD).status_code == 429

    call_command("axes_reset", verbosity=0)
    assert sign_in(client, operator.email, PASSWORD).status_code == 302
    assert client.session["_auth_user_id"] == str(operator.pk)


def test_a_lockout_is_per_client_address_and_e_mail_address(
    client: Client, operator: User, settings: Any
) -> None:
    for i in range(getattr(settings, "AXES_FAILURE_LIMIT", 5)):
        sign_in(client, operator.email, f"wrong-{i}", address="203.0.113.7")
    assert sign_in(client, operator.email, PASSWORD, address="203.0.113.7").status_code == 429
    # The operator at their own desk is not locked out by a stranger's guesses.
    assert sign_in(client, operator.email, PASSWORD, address="198.51.100.2").status_code == 302


def test_a_made_up_forwarded_address_does_not_lift_a_lockout(
    client: Client, operator: User, settings: Any
) -> None:
    for i in range(getattr(settings, "AXES_FAILURE_LIMIT", 5)):
        sign_in(client, operator.email, f"wrong-{i}", address="203.0.113.7")
    spoofed = client.post(
        reverse("admin:login"),
        {"username": operator.email, "password": PASSWORD, "next": "/admin/"},
        REMOTE_ADDR="203.0.113.7",
        HTTP_X_FORWARDED_FOR="198.51.100.2",
    )
    assert spoofed.status_code == 429


def test_behind_a_trusted_proxy_the_lockout_counts_the_forwarded_client(
    client: Client, operator: User, settings: Any
) -> None:
    import ipaddress

    settings.TRUSTED_PROXIES = [ipaddress.ip_network("10.0.0.0/8")]
    for i in range(getattr(settings, "AXES_FAILURE_LIMIT", 5)):
        client.post(
            reverse("admin:login"),
            {"username": operator.email, "password": f"wrong-{i}", "next": "/admin/"},
            REMOTE_ADDR="10.0.0.2",
            HTTP_X_FORWARDED_FOR="203.0.113.7",
        )
    # Another client behind the same proxy is not locked out by the stranger's guesses.
    other = client.post(
        reverse("admin:login"),
        {"username": operator.email, "password": PASSWORD, "next": "/admin/"},
        REMOTE_ADDR="10.0.0.2",
        HTTP_X_FORWARDED_FOR="198.51.100.2",
    )
    assert other.status_code == 302
