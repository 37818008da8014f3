"""Hostile input from outside (issue 10, items 9 to 11): every one gets a 4xx with a clear
message, never a server error, and nothing is written or echoed back."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from django.test import Client

from accounts.models import User
from api.models import ApiToken
from reservations.models import Order
from tests.api.test_api import order_body as api_order
from tests.conftest import Inventory
from tests.reservations.test_booking_pages import book_until_review, contact, field_errors, plan

pytestmark = pytest.mark.django_db

HORIZON = "Bookings open at most 180 days ahead."
PAST = "The start lies in the past."
BIDI = "invisible direction controls"


@pytest.fixture
def token(db: None) -> str:
    user = User.objects.create_user("ada@example.org")
    return ApiToken.issue(user, "pipeline")[1]


def post_order(client: Client, token: str, body: Any) -> Any:
    raw = body if isinstance(body, str) else json.dumps(body)
    return client.post(
        "/api/v1/orders/",
        raw,
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )


# --------------------------------------------------------------------------- dates


def test_the_live_quote_refuses_a_start_in_year_9999_with_a_message(
    client: Client, inventory: Inventory
) -> None:
    response = client.get(
        "/en/book/quote/",
        {"kind": "h200", "window_days": "7", "lot_count": "1", "start_date": "9999-12-31"},
    )
    assert response.status_code == 400
    assert HORIZON in response.content.decode()


def test_the_live_quote_says_a_start_in_2001_lies_in_the_past(
    client: Client, inventory: Inventory
) -> None:
    response = client.get(
        "/en/book/quote/",
        {"kind": "h200", "window_days": "7", "lot_count": "1", "start_date": "2001-01-01"},
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert PAST in html
    assert "free for this window" not in html


def test_the_plan_page_refuses_a_start_in_year_9999_next_to_the_field(
    client: Client, inventory: Inventory
) -> None:
    response = client.post("/en/book/", plan(start_date="9999-12-31"))
    assert response.status_code == 200
    html = response.content.decode()
    assert HORIZON in field_errors(html, "start_date")
    assert Order.objects.count() == 0


def test_a_draft_moved_to_year_9999_is_refused_on_the_review(
    client: Client, inventory: Inventory
) -> None:
    book_until_review(client)
    client.post("/en/book/next-start/", {"start_date": "9999-12-31"})
    response = client.get("/en/book/review/")
    assert response.status_code == 200
    assert HORIZON in response.content.decode()


@pytest.mark.parametrize(
    ("starts_at", "code"),
    [
        ("9999-12-31T23:00:00Z", "start_beyond_horizon"),
        ("9999-12-31T23:59:59-01:00", "overflow"),
        ("2001-01-01T12:00:00Z", "start_in_past"),
    ],
)
def test_the_api_availability_refuses_a_start_outside_the_horizon(
    client: Client, inventory: Inventory, starts_at: str, code: str
) -> None:
    response = client.get(
        "/api/v1/availability/",
        {"kind": "h200", "window_days": "7", "lot_count": "1", "starts_at": starts_at},
    )
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == code
    assert "starts_at" in body["fields"]
    assert "available" not in body


# --------------------------------------------------------------------------- lot counts


@pytest.mark.parametrize("lot_count", [2**63, 10**20, 2**31, 65])
def test_the_api_refuses_a_huge_lot_count(
    client: Client, inventory: Inventory, token: str, lot_count: int
) -> None:
    response = post_order(client, token, api_order(lot_count=lot_count))
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "lot_count_above_limit"
    assert body["fields"]["lot_count"][0]["detail"] == "At most 64 lots per order."
    assert Order.objects.count() == 0


@pytest.mark.parametrize("lot_count", [str(2**63), str(10**20)])
def test_the_plan_and_the_quote_refuse_a_huge_lot_count(
    client: Client, inventory: Inventory, lot_count: str
) -> None:
    response = client.post("/en/book/", plan(lot_count=lot_count))
    assert response.status_code == 200
    assert "64" in field_errors(response.content.decode(), "lot_count")
    quote = client.get(
        "/en/book/quote/",
        {"kind": "h200", "window_days": "7", "lot_count": lot_count, "start_date": "2001-01-01"},
    )
    assert quote.status_code == 400


# --------------------------------------------------------------------------- JSON


@pytest.mark.parametrize("depth", [50, 5000, 30000])
def test_the_api_refuses_deeply_nested_json(client: Client, token: str, depth: int) -> None:
    body = '{"kind": ' + "[" * depth + "]" * depth + "}"
    response = post_order(client, token, body)
    assert response.status_code == 400, response.content[:300]
    assert response.json()["code"] == "json_too_deep"
    assert Order.objects.count() == 0


# --------------------------------------------------------------------------- private keys


def _unarmoured(pem: bytes) -> str:
    return "\n".join(line for line in pem.decode().splitlines() if "-----" not in line)


def _private_keys() -> dict[str, str]:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ed_key = ed25519.Ed25519PrivateKey.generate()
    ec_key = ec.generate_private_key(ec.SECP256R1())
    none = serialization.NoEncryption()
    secret = serialization.BestAvailableEncryption(b"correct horse")
    pem, pkcs8, tradition = (
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.PrivateFormat.TraditionalOpenSSL,
    )
    openssh = ed_key.private_bytes(pem, serialization.PrivateFormat.OpenSSH, none)
    body_lines = _unarmoured(openssh).splitlines()
    return {
        "openssh": _unarmoured(openssh),
        "openssh one line, spaced": " ".join(body_lines),
        "openssh without its first line": "\n".join(body_lines[1:]) or body_lines[0],
        "rsa pkcs8": _unarmoured(rsa_key.private_bytes(pem, pkcs8, none)),
        "rsa pkcs8 one line, spaced": " ".join(
            _unarmoured(rsa_key.private_bytes(pem, pkcs8, none)).splitlines()
        ),
        "rsa pkcs1": _unarmoured(rsa_key.private_bytes(pem, tradition, none)),
        "rsa pkcs1 encrypted (Proc-Type)": _unarmoured(
            rsa_key.private_bytes(pem, tradition, secret)
        ),
        "rsa pkcs8 encrypted": _unarmoured(rsa_key.private_bytes(pem, pkcs8, secret)),
        "ec sec1": _unarmoured(ec_key.private_bytes(pem, tradition, none)),
        "ed25519 pkcs8": _unarmoured(ed_key.private_bytes(pem, pkcs8, none)),
        "ed25519 raw, base64": base64.b64encode(
            ed_key.private_bytes(serialization.Encoding.DER, pkcs8, serialization.NoEncryption())
        ).decode(),
    }


PRIVATE_KEYS = _private_keys()


@pytest.mark.parametrize("name", sorted(PRIVATE_KEYS))
def test_a_private_key_pasted_without_its_armour_is_refused_and_never_sent_back(
    client: Client, inventory: Inventory, name: str
) -> None:
    pasted = PRIVATE_KEYS[name]
    client.post("/en/book/", plan())
    response = client.post("/en/book/contact/", contact(ssh_public_keys=pasted))
    assert response.status_code == 200
    html = response.content.decode()
    assert "This is a private key" in field_errors(html, "ssh_public_keys")
    textarea = re.search(r"<textarea[^>]*id_ssh_public_keys[^>]*>(.*?)</textarea>", html, re.S)
    assert textarea is not None
    assert textarea.group(1).strip() == ""
    for chunk in re.findall(r"[A-Za-z0-9+/=]{12,}", pasted):
        assert chunk[:12] not in html, f"{name}: {chunk[:12]} echoed"


def test_an_unknown_key_type_is_never_echoed_unless_it_looks_like_a_type(
    client: Client, inventory: Inventory
) -> None:
    client.post("/en/book/", plan())
    response = client.post(
        "/en/book/contact/", contact(ssh_public_keys="Zm9vYmFyYmF6cXV4cXV1eDEyMzQ1Njc4OTA AAAA")
    )
    refused = field_errors(response.content.decode(), "ssh_public_keys")
    assert "unsupported key type" in refused
    assert "Zm9vYmFy" not in refused
    response = client.post("/en/book/contact/", contact(ssh_public_keys="ssh-ed2519 AAAA me"))
    assert "ssh-ed2519" in field_errors(response.content.decode(), "ssh_public_keys")


def test_the_api_refuses_an_unarmoured_private_key_without_quoting_it(
    client: Client, inventory: Inventory, token: str
) -> None:
    pasted = PRIVATE_KEYS["rsa pkcs8 one line, spaced"]
    response = post_order(client, token, api_order(ssh_public_keys=[pasted]))
    assert response.status_code == 400
    assert response.json()["code"] == "ssh_private_key"
    assert pasted[:12] not in response.content.decode()


# --------------------------------------------------------------------------- bidi controls


@pytest.mark.parametrize("control", ["\u202e", "\u202a", "\u2066", "\u2069", "\u200f", "\u061c"])
def test_the_contact_step_refuses_bidi_controls_in_names(
    client: Client, inventory: Inventory, control: str
) -> None:
    client.post("/en/book/", plan())
    response = client.post(
        "/en/book/contact/",
        contact(contact_name=f"Ada {control}ecalevol", organisation=f"Lab{control}"),
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert BIDI in field_errors(html, "contact_name")
    assert BIDI in field_errors(html, "organisation")


def test_the_plan_refuses_bidi_controls_in_the_hypothesis(
    client: Client, inventory: Inventory
) -> None:
    response = client.post("/en/book/", plan(hypothesis_text="halve \u202ethe step"))
    assert response.status_code == 200
    assert BIDI in field_errors(response.content.decode(), "hypothesis_text")


@pytest.mark.parametrize("field", ["contact_name", "organisation", "hypothesis_text"])
def test_the_api_refuses_bidi_controls_with_the_field(
    client: Client, inventory: Inventory, token: str, field: str
) -> None:
    response = post_order(client, token, api_order(**{field: "Ada \u202eecalevoL"}))
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["fields"][field][0]["code"] == "bidi_control"
    assert Order.objects.count() == 0


def test_names_in_right_to_left_scripts_are_still_welcome(
    client: Client, inventory: Inventory, token: str
) -> None:
    response = post_order(client, token, api_order(contact_name="عائشة بنت أبي بكر"))
    assert response.status_code == 201, response.content


def test_an_api_token_name_with_bidi_controls_is_refused(client: Client) -> None:
    user = User.objects.create_user("ada@example.org")
    client.force_login(user)
    response = client.post("/en/account/tokens/", {"name": "ci\u202etxt.exe"})
    assert response.status_code == 200
    assert BIDI in response.content.decode()
    assert not ApiToken.objects.filter(user=user).exists()


# --------------------------------------------------------------------------- tokens


def test_a_user_holds_at_most_the_configured_number_of_active_tokens(
    client: Client, settings: Any
) -> None:
    settings.API_TOKENS_PER_USER = 3
    user = User.objects.create_user("ada@example.org")
    client.force_login(user)
    for number in range(3):
        response = client.post("/en/account/tokens/", {"name": f"pipeline {number}"})
        assert "gl_" in response.content.decode()
    response = client.post("/en/account/tokens/", {"name": "one too many"})
    html = response.content.decode()
    assert "At most 3 active API tokens" in html
    assert ApiToken.objects.filter(user=user).count() == 3
    # Revoking one makes room for another.
    first = ApiToken.objects.filter(user=user).first()
    assert first is not None
    client.post(f"/en/account/tokens/{first.pk}/revoke/")
    response = client.post("/en/account/tokens/", {"name": "replacement"})
    assert "At most" not in response.content.decode()
    assert ApiToken.objects.filter(user=user, revoked_at__isnull=True).count() == 3


@pytest.mark.parametrize(
    ("language", "text"),
    [("en", "At most 64 lots per order."), ("de", "Höchstens 64 Lose je Bestellung.")],
)
def test_the_plan_form_says_the_lot_bound_in_the_page_language(
    client: Client, inventory: Inventory, language: str, text: str
) -> None:
    response = client.post(f"/{language}/book/", plan(lot_count="65"))
    assert response.status_code == 200
    errors = field_errors(response.content.decode(), "lot_count")
    assert errors.count(text) == 1, errors  # once, and not Django's "less than or equal to"
    assert "64" not in errors.replace(text, "")
