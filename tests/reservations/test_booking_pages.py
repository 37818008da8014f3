"""The booking pages over HTTP (Django's test client): steps, refusals, the order page."""

from __future__ import annotations

import re
from datetime import date, timedelta
from typing import Any

import pytest
from django.core import mail
from django.core.mail import EmailMultiAlternatives
from django.test import Client
from django.utils import timezone

from reservations.availability import handover
from reservations.models import Order
from reservations.services import place_order
from tests.conftest import PRIVATE_KEY, Inventory, RequestFactory, openssh_public_key

pytestmark = pytest.mark.django_db


def start_day(days: int = 3) -> date:
    return timezone.now().date() + timedelta(days=days)


def plan(**overrides: Any) -> dict[str, Any]:
    data = {
        "kind": "h200",
        "lot_count": "1",
        "window_days": "7",
        "start_date": start_day().isoformat(),
        "environment": "pytorch-2.9-cuda-12.8",
        "usage_mode": "distributed",
        "hypothesis": "shorter_step",
        "hypothesis_text": "halve the step time",
    }
    data.update(overrides)
    return data


def contact(**overrides: Any) -> dict[str, Any]:
    data = {
        "contact_name": "Ada Lovelace",
        "contact_email": "ada@example.org",
        "organisation": "Analytical Engines",
        "ssh_public_keys": openssh_public_key(),
    }
    data.update(overrides)
    return data


def field_errors(html: str, field: str) -> str:
    match = re.search(rf'id="id_{field}_errors"[^>]*>(.*?)</div>', html, re.S)
    assert match, f"no error slot for {field}"
    return re.sub(r"<[^>]+>", " ", match.group(1)).strip()


def book_until_review(client: Client, prefix: str = "/en", **plan_overrides: Any) -> None:
    response = client.post(f"{prefix}/book/", plan(**plan_overrides))
    assert response.status_code == 302, response.content.decode()[:3000]
    response = client.post(f"{prefix}/book/contact/", contact())
    assert response.status_code == 302, response.content.decode()[:3000]


@pytest.mark.parametrize("language", ["en", "de", "fr"])
def test_the_landing_page_explains_lots_and_shows_prices(
    client: Client, inventory: Inventory, language: str
) -> None:
    html = client.get(f"/{language}/").content.decode()
    assert f'<html lang="{language}">' in html
    unit = "Go" if language == "fr" else "GB"  # as the French prose writes it
    assert f"2× NVIDIA H200 141 {unit}" in html
    assert f"2× AMD MI300X 192 {unit}" in html
    price = {"en": "$1,130", "de": "1.130\u00a0$", "fr": "1\u00a0130\u00a0$"}[language]
    assert price in html
    for code in ("en", "de", "fr"):
        assert f'href="/{code}/"' in html  # the language switcher


def test_the_root_sends_each_visitor_to_their_language(
    client: Client, inventory: Inventory
) -> None:
    response = client.get("/", HTTP_ACCEPT_LANGUAGE="fr-CH,fr;q=0.9")
    assert response.status_code == 302
    assert response["Location"] == "/fr/"


def test_the_plan_shows_price_availability_and_advice_in_one_round_trip(
    client: Client, inventory: Inventory
) -> None:
    html = client.get("/en/book/?kind=h200").content.decode()
    assert 'id="quote"' in html
    assert "$1,130.00" in html
    assert "2 lots free" in html


def test_the_live_quote_follows_the_form(client: Client, inventory: Inventory) -> None:
    query = plan(
        lot_count="2", model_params_billion="13", model_precision="bf16", model_workload="training"
    )
    html = client.get("/en/book/quote/", query).content.decode()
    assert "$2,260.00" in html
    assert "2 lots free for this window." in html
    assert "needs both cards, sharded" in html
    assert "recommended" in html
    html = client.get("/en/book/quote/", plan(lot_count="3")).content.decode()
    assert "Only 2 lots of this kind exist." in html


def test_the_quote_names_the_earliest_start_when_the_window_is_full(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    place_order(make_request(kind="b200", window_days=3, starts_at=handover(start_day())))
    html = client.get("/en/book/quote/", plan(kind="b200", window_days="3")).content.decode()
    assert "Not enough free lots for this window." in html
    assert "The earliest start with enough lots is" in html


def test_without_javascript_the_refresh_button_updates_the_quote(
    client: Client, inventory: Inventory
) -> None:
    response = client.post("/en/book/", {**plan(lot_count="2"), "refresh": "1"})
    assert response.status_code == 200
    assert "$2,260.00" in response.content.decode()


def test_a_researcher_books_through_the_three_steps_and_gets_the_order_page_and_a_mail(
    client: Client, inventory: Inventory, django_capture_on_commit_callbacks: Any, eager_tasks: None
) -> None:
    book_until_review(client, prefix="/de", lot_count="2")
    review = client.get("/de/book/review/").content.decode()
    assert "Ada Lovelace" in review
    assert "2.260,00\u00a0$" in review
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/de/book/review/")
    assert response.status_code == 302
    order = Order.objects.get()
    assert response["Location"] == f"/de/orders/{order.reference}/{order.secret}/"
    assert (order.lot_count, order.language, order.contact_email) == (2, "de", "ada@example.org")
    assert order.starts_at == handover(start_day())

    page = client.get(response["Location"]).content.decode()
    assert order.reference in page
    assert "2.260,00\u00a0$" in page
    assert "Ich habe bezahlt" in page

    (message,) = mail.outbox
    assert message.to == ["ada@example.org"]
    assert order.reference in message.subject
    assert f"/de/orders/{order.reference}/{order.secret}/" in message.body
    assert isinstance(message, EmailMultiAlternatives)
    html, mime = message.alternatives[0]
    assert mime == "text/html"
    assert order.reference in str(html)
    assert "booking" not in client.session  # the draft is gone


def test_the_plan_refuses_bad_input_next_to_each_field_keeping_what_was_typed(
    client: Client, inventory: Inventory
) -> None:
    response = client.post(
        "/en/book/",
        plan(
            kind="b200",
            environment="pytorch-2.9-rocm-6.4",
            lot_count="0",
            window_days="5",
            start_date=(timezone.now().date() - timedelta(days=1)).isoformat(),
            hypothesis_text="keep me",
        ),
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "Ensure this value is greater than or equal to 1." in field_errors(html, "lot_count")
    assert "Select a valid choice." in field_errors(html, "window_days")
    assert 'aria-invalid="true"' in html
    assert "keep me" in html
    assert Order.objects.count() == 0

    html = client.post(
        "/en/book/", plan(kind="b200", environment="pytorch-2.9-rocm-6.4")
    ).content.decode()
    assert "does not run on 2× NVIDIA B200 180 GB" in field_errors(html, "environment")
    html = client.post(
        "/en/book/", plan(start_date=(timezone.now().date() - timedelta(days=1)).isoformat())
    ).content.decode()
    assert "The start lies in the past." in field_errors(html, "start_date")


def test_the_plan_says_when_lots_are_free_again(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    place_order(make_request(kind="b200", window_days=7, starts_at=handover(start_day())))
    html = client.post("/en/book/", plan(kind="b200")).content.decode()
    assert "The earliest start with enough lots is" in field_errors(html, "start_date")


def test_a_pasted_private_key_is_refused_and_not_sent_back(
    client: Client, inventory: Inventory
) -> None:
    client.post("/en/book/", plan())
    html = client.post("/en/book/contact/", contact(ssh_public_keys=PRIVATE_KEY)).content.decode()
    assert "This is a private key" in field_errors(html, "ssh_public_keys")
    assert "BEGIN OPENSSH" not in html
    assert "b3BlbnNzaC1rZXktdjE" not in html
    assert "contact" not in client.session["booking"]


def test_contact_details_are_checked(client: Client, inventory: Inventory) -> None:
    client.post("/en/book/", plan())
    html = client.post(
        "/en/book/contact/",
        contact(contact_name="x" * 500, contact_email="nope", ssh_public_keys="ssh-rsa AAAA"),
    ).content.decode()
    assert "at most 120 characters" in field_errors(html, "contact_name")
    assert "valid email" in field_errors(html, "contact_email").lower()
    assert "not a usable SSH public key" in field_errors(html, "ssh_public_keys")


def test_a_thirty_day_campaign_asks_for_checkpoints_and_abort_criteria(
    client: Client, inventory: Inventory
) -> None:
    client.post("/en/book/", plan(window_days="30"))
    html = client.post("/en/book/contact/", contact()).content.decode()
    assert "needs defined checkpoints" in field_errors(html, "checkpoints")
    assert "needs abort criteria" in field_errors(html, "abort_criteria")
    day_10 = date.fromisoformat(client.session["booking"]["plan"]["start_date"]) + timedelta(10)
    response = client.post(
        "/en/book/contact/",
        contact(
            **{"checkpoints-1-date": day_10.isoformat(), "checkpoints-1-check": "loss < 2.1"},
            abort_criteria="loss diverges",
        ),
    )
    assert response.status_code == 302


def test_a_lot_taken_between_form_and_submit_gets_a_friendly_next_start(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    book_until_review(client, kind="b200")
    taken = place_order(make_request(kind="b200", window_days=7, starts_at=handover(start_day())))
    response = client.post("/en/book/review/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "Just taken." in html
    assert Order.objects.count() == 1
    next_day = (taken.ends_at + timedelta(hours=6)).date() + timedelta(days=1)
    assert f'value="{next_day.isoformat()}"' in html
    client.post("/en/book/next-start/", {"start_date": next_day.isoformat()})
    response = client.post("/en/book/review/")
    assert response.status_code == 302
    assert Order.objects.filter(starts_at=handover(next_day)).exists()


def test_markup_in_a_name_is_shown_as_text(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request(contact_name="<script>alert(1)</script>"))
    html = client.get(f"/en/orders/{order.reference}/{order.secret}/").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)" not in html


def test_nobody_opens_an_order_without_its_secret(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request())
    other = place_order(make_request(contact_email="eve@example.org"))
    assert client.get(f"/en/orders/{order.reference}/{order.secret}/").status_code == 200
    assert client.get(f"/en/orders/{order.reference}/{other.secret}/").status_code == 404
    assert client.get(f"/en/orders/{order.reference}/").status_code == 404
    assert client.get(f"/en/orders/GL-0000-0000-0000-0000/{order.secret}/").status_code == 404


def test_a_forged_post_is_refused_and_changes_nothing(inventory: Inventory) -> None:
    client = Client(enforce_csrf_checks=True)
    response = client.post("/fr/book/", plan())
    assert response.status_code == 403
    assert (
        "Rien n" in response.content.decode() or "Nothing was changed" in response.content.decode()
    )
    assert "booking" not in client.session


def test_the_steps_cannot_be_skipped(client: Client, inventory: Inventory) -> None:
    assert client.get("/en/book/review/")["Location"] == "/en/book/"
    assert client.get("/en/book/contact/")["Location"] == "/en/book/"
