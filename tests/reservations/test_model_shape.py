"""The order's model shape for the acceptance benchmark (issue 12): sequence length and
micro-batch per card, optional with defaults, asked in the booking form (EN/DE/FR), shown on
the review page, taken and returned by the API, shown in the admin; and the acceptance
references the catalogue gives each hardware kind, from the datasheets."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import User
from reservations.catalogue import load_catalogue
from reservations.models import HardwareKind, Order
from tests.api.test_api import get, order_body, post
from tests.conftest import Inventory, build_inventory
from tests.reservations.test_booking_pages import book_until_review, field_errors, plan

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("language", "label", "help_text"),
    [
        ("en", "Sequence length (tokens)", "Tokens per sample (empty: 2048)"),
        ("de", "Sequenzlänge (Tokens)", "Tokens je Sample (leer: 2048)"),
        ("fr", "Longueur de séquence (jetons)", "Jetons par échantillon (vide : 2048)"),
    ],
)
def test_the_plan_asks_for_the_sequence_length_and_micro_batch(
    client: Client, inventory: Inventory, language: str, label: str, help_text: str
) -> None:
    html = client.get(f"/{language}/book/?kind=h200").content.decode()
    assert 'name="model_seq_len"' in html
    assert 'name="model_micro_batch"' in html
    assert label in html
    assert help_text in html


def test_the_shape_goes_from_the_form_to_the_review_and_the_order(
    client: Client, inventory: Inventory
) -> None:
    book_until_review(client, model_seq_len="8192", model_micro_batch="4")
    review = client.get("/en/book/review/").content.decode()
    assert "sequence length 8192 tokens, micro-batch 4 per card" in review
    client.post("/en/book/review/")
    order = Order.objects.get()
    assert (order.model_seq_len, order.model_micro_batch) == (8192, 4)


def test_without_a_shape_the_order_gets_the_defaults(client: Client, inventory: Inventory) -> None:
    book_until_review(client, prefix="/de")
    review = client.get("/de/book/review/").content.decode()
    assert "Sequenzlänge 2048 Tokens, Mikro-Batch 1 je Karte" in review
    client.post("/de/book/review/")
    order = Order.objects.get()
    assert (order.model_seq_len, order.model_micro_batch) == (2048, 1)


def test_a_shape_out_of_range_is_refused_in_the_form(client: Client, inventory: Inventory) -> None:
    html = client.post("/en/book/", plan(model_seq_len="0", model_micro_batch="100000")).content
    text = html.decode()
    assert field_errors(text, "model_seq_len")
    assert field_errors(text, "model_micro_batch")
    assert not Order.objects.exists()


def test_the_api_takes_and_returns_the_shape(client: Client, ada: tuple[User, str]) -> None:
    build_inventory()
    body = order_body(model_seq_len=4096, model_micro_batch=2)
    response = post(client, "/api/v1/orders/", body, ada[1])
    assert response.status_code == 201, response.json()
    assert (response.json()["model_seq_len"], response.json()["model_micro_batch"]) == (4096, 2)
    second = post(client, "/api/v1/orders/", order_body(lot_count=1), ada[1], key="two")
    assert (second.json()["model_seq_len"], second.json()["model_micro_batch"]) == (2048, 1)
    refused = post(client, "/api/v1/orders/", order_body(model_seq_len=0), ada[1], key="three")
    assert refused.status_code == 400
    assert "model_seq_len" in str(refused.json())
    schema = get(client, "/api/v1/schema/", ada[1])
    assert schema.status_code == 200
    assert "model_seq_len" in schema.content.decode()
    assert "model_micro_batch" in schema.content.decode()


def test_the_admin_shows_the_shape_of_an_order(client: Client, inventory: Inventory) -> None:
    book_until_review(client, model_seq_len="1024")
    client.post("/en/book/review/")
    order = Order.objects.get()
    client.force_login(User.objects.create_superuser("op@example.org", "a-long-password-1"))
    page = client.get(f"/admin/reservations/order/{order.pk}/change/").content.decode()
    assert "Model seq len" in page
    assert "1024" in page


def test_the_catalogue_gives_each_kind_its_datasheet_references() -> None:
    load_catalogue()
    h200 = HardwareKind.objects.get(slug="h200").acceptance_thresholds()
    assert h200 == {
        "sku": "H200",
        "memory_gib": 141,
        "memory_share_min": 0.9,
        "bf16_tflops": 989,
        "fp8_tflops": 1979,
        "hbm_tbps": 4.8,
        "matmul_share_min": 0.6,
        "hbm_share_min": 0.7,
        "busbw_gbps_min": 300,
        "card_tolerance": 0.1,
        "min_torch": "2.4",
        "min_cuda": "12.4",
        "min_driver": "550",
        "arch": "sm_90",
        "ecc_required": True,
        "mig_allowed": False,
    }
    b200 = HardwareKind.objects.get(slug="b200").acceptance_thresholds()
    assert (b200["bf16_tflops"], b200["fp8_tflops"], b200["hbm_tbps"]) == (2250, 4500, 8.0)
    assert (b200["min_torch"], b200["min_cuda"], b200["min_driver"], b200["arch"]) == (
        "2.7",
        "12.8",
        "570",
        "sm_100",
    )
    mi300x = HardwareKind.objects.get(slug="mi300x").acceptance_thresholds()
    assert (mi300x["bf16_tflops"], mi300x["hbm_tbps"], mi300x["memory_gib"]) == (1307.4, 5.3, 192)
    assert (mi300x["min_rocm"], mi300x["arch"]) == ("6.2", "gfx942")
    assert "min_cuda" not in mi300x


def test_the_operator_edits_the_references_in_the_admin(client: Client) -> None:
    load_catalogue()
    client.force_login(User.objects.create_superuser("op@example.org", "a-long-password-1"))
    kind = HardwareKind.objects.get(slug="h200")
    page = client.get(f"/admin/reservations/hardwarekind/{kind.pk}/change/").content.decode()
    for name in ("accept_bf16_tflops", "accept_hbm_tbps", "accept_busbw_gbps_min", "accept_sku"):
        assert f'name="{name}"' in page
    assert "dense (not sparse)" in page
