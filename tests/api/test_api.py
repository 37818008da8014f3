"""The REST API: tokens, the catalogue, orders with idempotency, invoices, errors with codes."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from accounts.models import User
from api.models import ApiToken, hash_token
from payments import scanning
from payments.models import Chain, Invoice
from reservations.models import Order
from tests.concurrency import at_once
from tests.conftest import Payments, build_inventory, openssh_public_key

ROOT = Path(__file__).resolve().parents[2]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def order_body(**overrides: Any) -> dict[str, Any]:
    body = {
        "kind": "h200",
        "lot_count": 1,
        "window_days": 7,
        "starts_at": (timezone.now() + timedelta(days=3)).replace(microsecond=0).isoformat(),
        "environment": "pytorch-2.9-cuda-12.8",
        "usage_mode": "distributed",
        "hypothesis": "shorter_step",
        "contact_name": "Ada Lovelace",
        "contact_email": "ada@example.org",
        "ssh_public_keys": [openssh_public_key()],
    }
    body.update(overrides)
    return body


def get(client: Client, path: str, token: str) -> Any:
    return client.get(path, headers=bearer(token))


def post(client: Client, path: str, body: Any, token: str, key: str = "") -> Any:
    headers = {**bearer(token), **({"Idempotency-Key": key} if key else {})}
    return client.post(path, json.dumps(body), content_type="application/json", headers=headers)


@pytest.mark.django_db
def test_the_catalogue_is_public(client: Client) -> None:
    build_inventory()
    kinds = client.get("/api/v1/kinds/").json()
    h200 = next(k for k in kinds if k["slug"] == "h200")
    assert h200["architecture"] == "sm_90"
    assert [p["window_days"] for p in h200["prices"]] == [3, 7, 30]
    environments = client.get("/api/v1/environments/").json()
    rocm = next(e for e in environments if e["slug"] == "pytorch-2.9-rocm-6.4")
    assert rocm["compatible_kinds"] == ["mi300x"]


@pytest.mark.django_db
def test_availability_names_the_next_start_when_full(client: Client, ada: tuple[User, str]) -> None:
    build_inventory()
    starts_at = (timezone.now() + timedelta(days=3)).isoformat()
    query: dict[str, Any] = {
        "kind": "b200",
        "window_days": 7,
        "starts_at": starts_at,
        "lot_count": 1,
    }
    assert client.get("/api/v1/availability/", query).json()["available"] is True
    post(client, "/api/v1/orders/", order_body(kind="b200"), ada[1])
    full = client.get("/api/v1/availability/", query).json()
    assert (full["available"], full["free_lots"]) == (False, 0)
    assert full["next_start"] is not None
    bad = client.get("/api/v1/availability/", {**query, "window_days": 5})
    assert bad.status_code == 400
    assert bad.json()["fields"]["window_days"][0]["code"] == "invalid_choice"


@pytest.mark.django_db
def test_the_advisor_answers_and_refuses_nonsense(client: Client) -> None:
    build_inventory()
    inference: dict[str, Any] = {"params_billion": 70, "precision": "bf16", "workload": "inference"}
    advice = client.get("/api/v1/advisor/", inference).json()
    assert advice["recommended_kind"] == "b200"
    training: dict[str, Any] = {"params_billion": 7, "precision": "int4", "workload": "training"}
    refused = client.get("/api/v1/advisor/", training)
    assert refused.status_code == 400
    assert refused.json()["code"] == "quantised_training"


@pytest.mark.django_db
def test_a_token_is_needed_and_stored_only_as_a_hash(client: Client, ada: tuple[User, str]) -> None:
    assert client.get("/api/v1/orders/").status_code == 401
    assert client.get("/api/v1/orders/").json()["code"] == "not_authenticated"
    assert get(client, "/api/v1/orders/", "gl_wrong").json()["code"] == "invalid_token"
    record = ApiToken.objects.get()
    assert record.key_hash == hash_token(ada[1])
    assert ada[1] not in json.dumps(list(ApiToken.objects.values()), default=str)
    assert get(client, "/api/v1/orders/", ada[1]).status_code == 200
    ApiToken.objects.update(revoked_at=timezone.now())
    revoked = get(client, "/api/v1/orders/", ada[1])
    assert (revoked.status_code, revoked.json()["code"]) == (401, "invalid_token")


@pytest.mark.django_db
def test_an_order_is_placed_listed_and_read(client: Client, ada: tuple[User, str]) -> None:
    build_inventory()
    response = post(client, "/api/v1/orders/", order_body(lot_count=2), ada[1])
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["status"], body["lot_count"], body["total_usd"]) == (
        "awaiting_payment",
        2,
        "2260.00",
    )
    assert "/orders/" in body["page_url"]
    assert [o["reference"] for o in get(client, "/api/v1/orders/", ada[1]).json()] == [
        body["reference"]
    ]
    assert (
        get(client, f"/api/v1/orders/{body['reference']}/", ada[1]).json()["reference"]
        == body["reference"]
    )
    assert Order.objects.get().user == ada[0]


@pytest.mark.django_db
def test_another_users_order_is_not_found(
    client: Client, ada: tuple[User, str], eve: tuple[User, str]
) -> None:
    build_inventory()
    reference = post(client, "/api/v1/orders/", order_body(), ada[1]).json()["reference"]
    for path in ("", "invoice/"):
        response = get(client, f"/api/v1/orders/{reference}/{path}", eve[1])
        assert response.status_code == 404
        assert response.json()["code"] == "not_found"
    assert (
        post(client, f"/api/v1/orders/{reference}/cancel/", {"reason": "x"}, eve[1]).status_code
        == 404
    )
    assert get(client, "/api/v1/orders/", eve[1]).json() == []


@pytest.mark.django_db
def test_bad_orders_get_codes_and_write_nothing(client: Client, ada: tuple[User, str]) -> None:
    build_inventory()
    cases = [
        (order_body(window_days=5), "invalid_window"),
        (order_body(lot_count=0), "invalid_lot_count"),
        (order_body(lot_count=9), "too_many_lots"),
        (order_body(kind="b200", environment="pytorch-2.9-rocm-6.4"), "incompatible_environment"),
        (order_body(starts_at="2020-01-01T00:00:00Z"), "start_in_past"),
        (order_body(ssh_public_keys=["-----BEGIN OPENSSH PRIVATE KEY-----"]), "ssh_private_key"),
        (order_body(lot_count="many"), "invalid"),
        (order_body(hypothesis="world-peace"), "invalid_choice"),
        ({**order_body(), "discount": 100}, "unknown_field"),
        (order_body(window_days=30), "checkpoints_required"),
    ]
    for body, code in cases:
        response = post(client, "/api/v1/orders/", body, ada[1])
        assert response.status_code == 400, (code, response.json())
        found = {c["code"] for codes in response.json()["fields"].values() for c in codes}
        assert code in found, (code, response.json())
    huge = post(client, "/api/v1/orders/", order_body(hypothesis_text="x" * 100_000), ada[1])
    assert (huge.status_code, huge.json()["code"]) == (413, "request_too_large")
    broken = client.post(
        "/api/v1/orders/", "{not json", content_type="application/json", headers=bearer(ada[1])
    )
    assert (broken.status_code, broken.json()["code"]) == (400, "parse_error")
    assert Order.objects.count() == 0


@pytest.mark.django_db
def test_capacity_gone_is_a_conflict_with_the_next_start(
    client: Client, ada: tuple[User, str]
) -> None:
    build_inventory()
    post(client, "/api/v1/orders/", order_body(kind="b200"), ada[1])
    response = post(client, "/api/v1/orders/", order_body(kind="b200"), ada[1])
    assert response.status_code == 409
    assert response.json()["code"] == "lot_unavailable"
    assert response.json()["next_start"]


@pytest.mark.django_db
def test_a_retried_request_books_once(client: Client, ada: tuple[User, str]) -> None:
    build_inventory()
    body = order_body()
    first = post(client, "/api/v1/orders/", body, ada[1], key="run-42")
    again = post(client, "/api/v1/orders/", body, ada[1], key="run-42")
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json()
    assert Order.objects.count() == 1
    other = post(client, "/api/v1/orders/", order_body(lot_count=2), ada[1], key="run-42")
    assert (other.status_code, other.json()["code"]) == (422, "idempotency_key_reused")
    assert Order.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicates_book_once(ada: tuple[User, str]) -> None:
    build_inventory()
    body = order_body()
    codes = at_once(
        4, lambda _: post(Client(), "/api/v1/orders/", body, ada[1], key="dup").status_code
    )
    assert Order.objects.count() == 1
    assert 201 in codes
    assert set(codes) <= {201, 409}


@pytest.mark.django_db
def test_cancel_before_payment(client: Client, ada: tuple[User, str]) -> None:
    build_inventory()
    reference = post(client, "/api/v1/orders/", order_body(), ada[1]).json()["reference"]
    missing = post(client, f"/api/v1/orders/{reference}/cancel/", {}, ada[1])
    assert missing.status_code == 400
    done = post(client, f"/api/v1/orders/{reference}/cancel/", {"reason": "wrong window"}, ada[1])
    assert done.json()["status"] == "cancelled"
    again = post(client, f"/api/v1/orders/{reference}/cancel/", {"reason": "again"}, ada[1])
    assert (again.status_code, again.json()["code"]) == (409, "invalid_transition")


@pytest.mark.django_db
def test_invoice_and_claim(client: Client, payments: Payments, ada: tuple[User, str]) -> None:
    build_inventory()
    reference = post(client, "/api/v1/orders/", order_body(), ada[1]).json()["reference"]
    assert get(client, f"/api/v1/orders/{reference}/invoice/", ada[1]).status_code == 404
    made = post(client, f"/api/v1/orders/{reference}/invoice/", {"asset": "USDC"}, ada[1])
    assert made.status_code == 201, made.json()
    invoice = made.json()
    assert (invoice["asset"], invoice["amount_due"], invoice["status"]) == (
        "USDC",
        "1130000000",
        "new",
    )
    assert invoice["amount_outstanding"] == "1130000000"
    assert invoice["payment_uri"] == (
        f"ethereum:{payments.usdc.contract_address}@{payments.chain.chain_id}/transfer"
        f"?address={invoice['address']}&uint256=1130000000"
    )
    # After a partial payment the URI asks for the rest, as the page's QR code does.
    payments.dev.pay_invoice(Invoice.objects.get(order__reference=reference), Decimal("130"))
    scanning.scan_chain(Chain.objects.get(pk=payments.chain.pk))
    partly = get(client, f"/api/v1/orders/{reference}/invoice/", ada[1]).json()
    assert partly["amount_outstanding"] == "1000000000"
    assert partly["payment_uri"].endswith("&uint256=1000000000")
    bad = post(client, f"/api/v1/orders/{reference}/claim/", {"tx_hash": "0x12"}, ada[1])
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid_tx_hash")
    claimed = post(client, f"/api/v1/orders/{reference}/claim/", {}, ada[1])
    assert claimed.status_code == 202
    assert claimed.json()["claimed_at"]
    unknown = post(client, f"/api/v1/orders/{reference}/invoice/", {"asset": "DOGE"}, ada[1])
    assert (unknown.status_code, unknown.json()["code"]) == (400, "invalid_choice")


@pytest.mark.django_db
def test_throttling_says_when_to_retry(
    client: Client, ada: tuple[User, str], settings: Any
) -> None:
    from rest_framework.settings import api_settings

    rates = {**api_settings.DEFAULT_THROTTLE_RATES, "token": "2/minute"}
    cache.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("api.throttles.TokenRateThrottle.THROTTLE_RATES", rates)
        codes = [get(client, "/api/v1/orders/", ada[1]).status_code for _ in range(3)]
        response = get(client, "/api/v1/orders/", ada[1])
    assert codes == [200, 200, 429]
    assert response.json()["code"] == "throttled"
    assert int(response["Retry-After"]) > 0


def test_the_schema_validates_without_warnings() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "spectacular",
            "--validate",
            "--fail-on-warn",
            "--file",
            "/dev/null",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "DJANGO_DEBUG": "1"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.django_db
def test_the_docs_page_and_schema_are_served(client: Client) -> None:
    assert client.get("/api/v1/schema/").status_code == 200
    docs = client.get("/api/v1/docs/")
    assert docs.status_code == 200
    assert b"swagger" in docs.content.lower()


@pytest.mark.django_db
def test_tokens_are_made_shown_once_and_revoked_on_the_account_page(client: Client) -> None:
    user = User.objects.create_user("ada@example.org")
    client.force_login(user)
    page = client.post("/en/account/tokens/", {"name": "lab pipeline"}).content.decode()
    shown = page.split('data-testid="new-token">')[1].split("<")[0]
    assert shown.startswith("gl_")
    assert get(client, "/api/v1/orders/", shown).status_code == 200
    again = client.get("/en/account/tokens/").content.decode()
    assert shown not in again
    assert "lab pipeline" in again
    token = ApiToken.objects.get()
    client.post(f"/en/account/tokens/{token.pk}/revoke/")
    assert get(client, "/api/v1/orders/", shown).status_code == 401


def test_an_address_that_names_no_endpoint_is_a_json_404(
    client: Client, ada: tuple[User, str]
) -> None:
    """Schemathesis once sent a negative checkpoint number: the route did not match and the
    answer was the site's HTML 404, a content type the schema does not document."""
    _, token = ada
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    for method, path in [
        ("post", "/api/v1/orders/GL-X/checkpoints/-1/outcome/"),
        ("get", "/api/v1/no-such-thing/"),
        ("delete", "/api/v1/orders/GL-X/checkpoints/one/outcome/"),
    ]:
        response = getattr(client, method)(path, **auth)
        assert response.status_code == 404, path
        assert response["Content-Type"] == "application/json", path
        assert response.json()["code"] == "not_found", path


@pytest.mark.django_db
def test_reading_an_order_costs_at_most_four_statements(
    client: Client, ada: tuple[User, str], django_assert_max_num_queries: Any
) -> None:
    build_inventory()
    reference = post(client, "/api/v1/orders/", order_body(), ada[1]).json()["reference"]
    get(client, f"/api/v1/orders/{reference}/", ada[1])
    with django_assert_max_num_queries(4):  # the token, its user, the order, its invoice
        response = get(client, f"/api/v1/orders/{reference}/", ada[1])
    assert response.status_code == 200
    assert response.json()["reference"] == reference
