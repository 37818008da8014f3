"""The live quote while a researcher types (issue 15): the plan's part — price, free lots,
calendar, other kinds — is read and rendered once per few seconds per plan, not at every
keystroke of the model size, and what it shows is never older than that reading."""

from __future__ import annotations

import time
from datetime import date, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from pages.booking import QUOTE_SECONDS
from reservations import quotes
from reservations.services import place_order
from tests.conftest import Inventory, RequestFactory

pytestmark = pytest.mark.django_db


def quote_page(client: Client, day: date, params: str) -> str:
    fields: dict[str, str | int] = {
        "kind": "h200",
        "lot_count": 1,
        "window_days": 7,
        "start_date": day.isoformat(),
        "environment": "pytorch-2.9-cuda-12.8",
        "model_params_billion": params,
        "model_precision": "bf16",
        "model_workload": "training",
    }
    response = client.get("/en/book/quote/", fields)
    assert response.status_code == 200
    return response.content.decode()


def free_shown(html: str) -> str:
    start = html.index('data-testid="availability">') + len('data-testid="availability">')
    return html[start : html.index("</p>", start)]


def test_a_new_model_size_on_the_same_plan_reads_nothing_again(
    client: Client, inventory: Inventory, django_assert_num_queries: Any
) -> None:
    day = (timezone.now() + timedelta(days=3)).date()
    first = quote_page(client, day, "7")
    with django_assert_num_queries(0):  # the plan and the advisor's catalogue are shared
        second = quote_page(client, day, "70")
    assert free_shown(first) == free_shown(second)
    advice = 'class="advice"'
    assert first.split(advice)[1] != second.split(advice)[1]  # the advice is the new model's


def test_the_shared_part_is_never_older_than_its_reading(
    client: Client,
    inventory: Inventory,
    make_request: RequestFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    day = (timezone.now() + timedelta(days=3)).date()
    before = free_shown(quote_page(client, day, "7"))
    from reservations.availability import handover

    place_order(make_request(lot_count=1, window_days=7, starts_at=handover(day)))
    assert free_shown(quote_page(client, day, "7.5")) == before  # within its few seconds
    # The plan's reading expires (its few seconds are over), in Redis and in this process's
    # copy alike; the fragment rendered from it may still be in the cache, but it is not
    # shown for the new reading.
    later = time.time() + QUOTE_SECONDS + 0.1
    monkeypatch.setattr(quotes, "_clock", lambda: later)
    after = free_shown(quote_page(client, day, "8"))
    assert before != after
    count = int(before.split()[0])
    assert after.startswith(f"{count - 1} lot")
