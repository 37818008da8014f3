"""Placing an order: all or nothing, price frozen, every bad input refused with its code."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone

from reservations.errors import BookingRefused, LotUnavailable
from reservations.models import Hold, Lot, Order, OrderEvent, OrderSshKey, Price
from reservations.services import REFERENCE_ALPHABET, place_order
from tests.conftest import PRIVATE_KEY, Inventory, RequestFactory, openssh_public_key

pytestmark = pytest.mark.django_db


def counts() -> tuple[int, int, int, int]:
    return (
        Order.objects.count(),
        Hold.objects.count(),
        OrderSshKey.objects.count(),
        OrderEvent.objects.count(),
    )


def refused_codes(request_factory: RequestFactory, **overrides: object) -> dict[str, list[str]]:
    before = counts()
    with pytest.raises(BookingRefused) as info:
        place_order(request_factory(**overrides))
    assert counts() == before, "a refused order must write nothing"
    errors = info.value.error_dict.items()
    return {field: [str(error.code) for error in found] for field, found in errors}


def test_it_places_an_order_holding_the_lots(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request(lot_count=2))

    assert order.status == Order.STATUS_AWAITING_PAYMENT
    assert order.ends_at - order.starts_at == timedelta(days=7)
    assert order.unit_price_usd == Decimal("1130.00")
    assert order.total_usd == Decimal("2260.00")
    holds = list(order.holds.select_related("lot"))
    assert sorted(h.lot_id for h in holds) == sorted(lot.pk for lot in inventory.h200_lots)
    assert all(h.status == Hold.Status.HELD for h in holds)
    assert all(h.period.lower == order.starts_at for h in holds)
    assert all(h.period.upper == order.ends_at + timedelta(hours=6) for h in holds)
    event = order.events.get()
    assert (event.from_status, event.to_status, event.actor_label) == (
        "",
        Order.STATUS_AWAITING_PAYMENT,
        "researcher",
    )


def test_the_reference_is_unguessable(inventory: Inventory, make_request: RequestFactory) -> None:
    order = place_order(make_request())
    body = order.reference.removeprefix("GL-").replace("-", "")
    assert len(body) == 16
    assert set(body) <= set(REFERENCE_ALPHABET)
    other = place_order(make_request(starts_at=order.starts_at + timedelta(days=30)))
    assert other.reference != order.reference


def test_the_hold_expires_after_the_configured_time(
    inventory: Inventory, make_request: RequestFactory, settings: object
) -> None:
    settings.RESERVATION_HOLD_DURATION = timedelta(minutes=30)  # type: ignore[attr-defined]
    now = timezone.now()
    order = place_order(make_request(), now=now)
    assert order.hold_expires_at == now + timedelta(minutes=30)


def test_a_later_price_change_never_changes_the_order(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request())
    Price.objects.filter(kind=inventory.h200, window_days=7).update(amount_usd=Decimal("9999"))
    order.refresh_from_db()
    assert (order.unit_price_usd, order.total_usd) == (Decimal("1130.00"), Decimal("1130.00"))


def test_it_stores_the_ssh_keys_normalised_with_fingerprints(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    first, second = openssh_public_key("one"), openssh_public_key("two")
    text = f"\n  {first}  \n# my laptop\n{second}\n{first}\n"
    order = place_order(make_request(ssh_public_keys=text))
    stored = list(order.ssh_keys.values_list("public_key", "fingerprint"))
    assert [line for line, _ in stored] == [first, second]
    assert all(fp.startswith("SHA256:") and len(fp) == 50 for _, fp in stored)


def test_two_independent_experiments_is_a_usage_mode(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request(usage_mode="independent", hypothesis="bigger_batch"))
    assert order.usage_mode == "independent"


def test_it_refuses_a_window_other_than_3_7_or_30_days(
    make_request: RequestFactory, inventory: Inventory
) -> None:
    for days in (0, 1, 5, 14, 31, -3):
        assert refused_codes(make_request, window_days=days) == {"window_days": ["invalid_window"]}


def test_it_refuses_zero_or_negative_lots(
    make_request: RequestFactory, inventory: Inventory
) -> None:
    for count in (0, -1):
        assert refused_codes(make_request, lot_count=count) == {"lot_count": ["invalid_lot_count"]}


def test_it_refuses_more_lots_than_exist(
    make_request: RequestFactory, inventory: Inventory
) -> None:
    assert refused_codes(make_request, lot_count=3) == {"lot_count": ["too_many_lots"]}


def test_it_refuses_a_start_in_the_past_or_beyond_the_horizon(
    make_request: RequestFactory, inventory: Inventory, settings: object
) -> None:
    settings.RESERVATION_HORIZON = timedelta(days=90)  # type: ignore[attr-defined]
    past = timezone.now() - timedelta(minutes=1)
    assert refused_codes(make_request, starts_at=past) == {"starts_at": ["start_in_past"]}
    far = timezone.now() + timedelta(days=91)
    assert refused_codes(make_request, starts_at=far) == {"starts_at": ["start_beyond_horizon"]}
    naive = timezone.now().replace(tzinfo=None) + timedelta(days=1)
    assert refused_codes(make_request, starts_at=naive) == {"starts_at": ["start_not_aware"]}


def test_it_refuses_an_environment_incompatible_with_the_kind(
    make_request: RequestFactory, inventory: Inventory
) -> None:
    rocm_on_b200 = refused_codes(make_request, kind="b200", environment="pytorch-2.9-rocm-6.4")
    assert rocm_on_b200 == {"environment": ["incompatible_environment"]}
    old_cuda_on_blackwell = refused_codes(
        make_request, kind="b200", environment="pytorch-2.9-cuda-12.6"
    )
    assert old_cuda_on_blackwell == {"environment": ["incompatible_environment"]}
    assert refused_codes(make_request, environment="windows-xp") == {
        "environment": ["unknown_environment"]
    }


def test_it_refuses_an_unknown_kind(make_request: RequestFactory, inventory: Inventory) -> None:
    assert refused_codes(make_request, kind="a100")["kind"] == ["unknown_kind"]


def test_it_refuses_a_private_key_and_never_stores_it(
    make_request: RequestFactory, inventory: Inventory
) -> None:
    assert refused_codes(make_request, ssh_public_keys=PRIVATE_KEY) == {
        "ssh_public_keys": ["ssh_private_key"]
    }
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM reservations_ordersshkey WHERE public_key LIKE '%%PRIVATE%%'"
        )
        assert cursor.fetchone() == (0,)


def test_it_refuses_a_malformed_public_key(
    make_request: RequestFactory, inventory: Inventory
) -> None:
    for text in ("", "ssh-ed25519", "ssh-ed25519 not-base64!!", "hello world"):
        codes = refused_codes(make_request, ssh_public_keys=text)
        assert codes["ssh_public_keys"][0] in {"ssh_key_invalid", "ssh_key_required"}


def test_it_requires_contact_details(make_request: RequestFactory, inventory: Inventory) -> None:
    codes = refused_codes(make_request, contact_name="  ", contact_email="not-an-address")
    assert codes == {"contact_name": ["required"], "contact_email": ["invalid_email"]}


def test_it_refuses_overlong_text(make_request: RequestFactory, inventory: Inventory) -> None:
    codes = refused_codes(make_request, contact_name="x" * 121, hypothesis_text="y" * 4001)
    assert codes == {"contact_name": ["too_long"], "hypothesis_text": ["too_long"]}


def test_it_refuses_unknown_choices(make_request: RequestFactory, inventory: Inventory) -> None:
    codes = refused_codes(
        make_request, usage_mode="four-cards", hypothesis="world-peace", model_precision="fp2"
    )
    assert codes == {
        "usage_mode": ["invalid_choice"],
        "hypothesis": ["invalid_choice"],
        "model_precision": ["invalid_choice"],
    }


def test_it_refuses_bad_model_facts(make_request: RequestFactory, inventory: Inventory) -> None:
    for value in ("0", "-7", "abc", "NaN", "1e9"):
        assert refused_codes(make_request, model_params_billion=value) == {
            "model_params_billion": ["invalid_params"]
        }
    order = place_order(make_request(model_params_billion="7.5", model_precision="bf16"))
    assert order.model_params_billion == Decimal("7.5")


def test_a_thirty_day_campaign_needs_checkpoints_and_abort_criteria(
    make_request: RequestFactory, inventory: Inventory, soon: datetime
) -> None:
    assert refused_codes(make_request, window_days=30) == {
        "checkpoints": ["checkpoints_required"],
        "abort_criteria": ["abort_criteria_required"],
    }
    order = place_order(
        make_request(
            window_days=30,
            checkpoints=[
                {"date": (soon + timedelta(days=7)).date().isoformat(), "check": "loss below 2.1"},
                {"date": (soon + timedelta(days=20)).date().isoformat(), "check": "held-out eval"},
            ],
            abort_criteria="divergence twice after restart",
        )
    )
    assert order.total_usd == Decimal("4320.00")


def test_it_says_no_longer_available_with_the_next_start(
    make_request: RequestFactory, inventory: Inventory
) -> None:
    first = place_order(make_request(lot_count=2))
    before = counts()
    with pytest.raises(LotUnavailable) as info:
        place_order(make_request(starts_at=first.starts_at + timedelta(days=1)))
    assert counts() == before
    assert info.value.code == "lot_unavailable"
    assert info.value.next_start == first.ends_at + timedelta(hours=6)


def test_it_never_uses_lots_in_maintenance_or_retired(
    make_request: RequestFactory, inventory: Inventory
) -> None:
    first, second = inventory.h200_lots
    first.status = Lot.Status.MAINTENANCE
    first.save(update_fields=["status"])
    order = place_order(make_request())
    assert [h.lot_id for h in order.holds.all()] == [second.pk]
    second.status = Lot.Status.RETIRED
    second.save(update_fields=["status"])
    assert refused_codes(make_request) == {"lot_count": ["too_many_lots"]}


def test_it_ignores_markup_as_data(make_request: RequestFactory, inventory: Inventory) -> None:
    order = place_order(make_request(contact_name="<script>alert(1)</script>"))
    order.refresh_from_db()
    assert order.contact_name == "<script>alert(1)</script>"  # stored as typed, escaped on output
