"""A replaced lot and its credit on the order page (issue 33): what failed, where the
booking went and how to connect there, the credit, and the researcher's choice of time or
money, which the page takes once and refuses after (in English, German and French)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.test import Client

from provisioning import services as provisioning
from reservations import incidents
from reservations.models import Credit, Lot, Order
from reservations.services import mark_paid, place_order, system
from tests.conftest import Inventory, RequestFactory

pytestmark = pytest.mark.django_db


def page(order: Order, language: str = "en") -> str:
    return f"/{language}/orders/{order.reference}/{order.secret}/"


def replaced_and_credited(
    make_request: RequestFactory, hours: int = 6, **fields: object
) -> tuple[Order, Credit]:
    """A paid, approved order whose lot failed its acceptance and moved to the spare, which
    opened ``hours`` into the window: credited, the choice still open."""
    order = place_order(make_request(window_days=3, lot_count=1, **fields))
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="paid")
    return Order.objects.get(pk=order.pk), credit_a_replacement(order, hours)


def credit_a_replacement(
    order: Order,
    hours: int,
    summary: str = "acceptance not passed: failed: matmul_bf16 (card 0): 41 % of peak",
    ssh: str = "ssh -p 22 gl-test@203.0.113.7",
) -> Credit:
    """Approve the paid ``order``; its lot fails its acceptance and moves to the spare,
    which opens ``hours`` into the window: the credit, not decided yet."""
    provisioning.approve_order(order, actor=system("operator"))
    failed = order.holds.get().lot
    spare = Lot.objects.filter(host__kind=order.kind).exclude(pk=failed.pk).first()
    assert spare is not None
    incident, _opened = incidents.open_incident(
        order, failed, kind="acceptance", summary=summary, at=order.starts_at, at_acceptance=True
    )
    incidents.record_replacement(incident, spare, [ssh])
    credit = incidents.end_incident(incident, at=order.starts_at + timedelta(hours=hours), why="t")
    assert credit is not None
    return credit


def test_the_order_page_shows_the_replacement_and_offers_the_credit_as_time_or_money(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order, credit = replaced_and_credited(make_request)
    html = client.get(page(order)).content.decode()
    assert 'data-testid="incidents"' in html
    assert "matmul_bf16 (card 0): 41 % of peak" in html
    assert 'data-testid="replaced-by"' in html
    assert "files you left on the failed lot's host did not" in html
    assert "ssh -p 22 gl-test@203.0.113.7" in html
    assert "<strong>6.0 hours</strong>" in html
    assert 'data-testid="credit-time"' in html
    assert 'data-testid="credit-money"' in html

    end = order.ends_at
    taken = client.post(page(order) + f"credits/{credit.pk}/", {"take": "time"}, follow=True)
    assert taken.redirect_chain[-1][0].endswith("#incidents")
    html = taken.content.decode()
    assert "Added: your window now ends" in html
    assert "Taken as time" in html
    assert 'data-testid="credit-time"' not in html
    assert Order.objects.get(pk=order.pk).ends_at == end + timedelta(hours=6)

    # A second choice changes nothing and says why.
    again = client.post(page(order) + f"credits/{credit.pk}/", {"take": "money"}, follow=True)
    assert "This credit was already taken or refused." in again.content.decode()
    assert Credit.objects.get(pk=credit.pk).status == Credit.Status.TIME
    assert Order.objects.get(pk=order.pk).ends_at == end + timedelta(hours=6)


def test_bad_choices_and_other_orders_credits_change_nothing(
    client: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order, credit = replaced_and_credited(make_request)
    other = place_order(make_request(window_days=3, lot_count=1))
    refused = client.post(page(order) + f"credits/{credit.pk}/", {"take": "both"}, follow=True)
    assert "Choose time or money for this credit." in refused.content.decode()
    # Another order's link never reaches this credit.
    assert client.post(page(other) + f"credits/{credit.pk}/", {"take": "money"}).status_code == 404
    assert client.get(page(order) + f"credits/{credit.pk}/").status_code == 405
    assert Credit.objects.get(pk=credit.pk).status == Credit.Status.OFFERED


@pytest.mark.parametrize(
    ("language", "words"),
    [
        ("de", "Gutgeschrieben"),
        ("fr", "Crédité"),
    ],
)
def test_the_credit_is_offered_in_the_researchers_language(
    client: Client,
    inventory: Inventory,
    make_request: RequestFactory,
    language: str,
    words: str,
) -> None:
    order, _credit = replaced_and_credited(make_request)
    html = client.get(page(order, language)).content.decode()
    assert words in html
