"""The order page's body reused within a second for the same state (issue 15): a repeat view
costs one statement instead of four to eight, and nothing a researcher sees is older than
the database — a payment seen, a status changed, a key added shows on the next view, even
in the same second; each request gets its own CSRF token; and a page with something of the
request's own (a message, a refused form) is never stored or served to anyone else."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser
from django.db import connection
from django.test import Client, RequestFactory
from django.utils import timezone, translation

from pages import order_page
from payments import invoicing, receipts
from payments.models import Invoice
from provisioning.split_tests import attach_split_test
from reservations import campaign, order_state
from reservations.models import Order
from reservations.services import Actor, place_order
from tests.conftest import Inventory, Payments
from tests.conftest import RequestFactory as OrderRequests
from tests.payments.test_order_page_queries import settle
from tests.provisioning import split_test_reports, v2_reports
from tests.provisioning.test_report_page import delivered
from tests.reservations.test_campaign import campaign_order, running

pytestmark = pytest.mark.django_db

RESEARCHER = Actor("ada@example.org")
TOKEN = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


@pytest.fixture
def frozen_second(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The page cache's clock, held on one second (tests move it on by hand)."""
    second = [1_900_000_000]
    monkeypatch.setattr(order_page, "_second", lambda: second[0])
    return second


@pytest.fixture
def order(inventory: Inventory, make_request: OrderRequests) -> Order:
    return place_order(make_request(lot_count=1, window_days=3))


def url(order: Order) -> str:
    return f"/en/orders/{order.reference}/{order.secret}/"


def view(client: Client, order: Order) -> str:
    response = client.get(url(order))
    assert response.status_code == 200
    return response.content.decode()


def without_tokens(html: str) -> str:
    return TOKEN.sub('name="csrfmiddlewaretoken" value=""', html)


def test_a_repeat_view_in_the_same_second_costs_one_statement(
    client: Client, order: Order, frozen_second: list[int], django_assert_num_queries: Any
) -> None:
    first = view(client, order)
    with django_assert_num_queries(1):  # the order with the state of what its page reads
        second = view(client, order)
    assert without_tokens(second) == without_tokens(first)
    assert "Choose how to pay:" in second


def test_the_next_second_renders_the_page_anew(
    client: Client, order: Order, frozen_second: list[int], django_assert_num_queries: Any
) -> None:
    view(client, order)
    frozen_second[0] += 1
    with django_assert_num_queries(4):  # the order with its state, invoices, billing, SSH keys
        view(client, order)


def rendering_elsewhere(order: Order, second: int) -> None:
    """Another (anonymous) request has taken the page's rendering for ``second``."""
    request = RequestFactory().get(url(order))
    request.user = AnonymousUser()
    with translation.override("en"):
        key = order_page.page_key(request, order, order_state.state_of(order.pk))
    assert order_page.cache.add(f"{key}:{second}", 1, 5)


def test_the_last_seconds_page_is_served_while_another_request_renders_it(
    client: Client, order: Order, frozen_second: list[int], django_assert_num_queries: Any
) -> None:
    view(client, order)
    frozen_second[0] += 1
    rendering_elsewhere(order, frozen_second[0])
    with django_assert_num_queries(1):  # not rendered again
        view(client, order)


def test_a_page_two_seconds_old_is_rendered_anew_even_while_another_request_renders_it(
    client: Client, order: Order, frozen_second: list[int], django_assert_num_queries: Any
) -> None:
    view(client, order)
    frozen_second[0] += 2
    rendering_elsewhere(order, frozen_second[0])
    with django_assert_num_queries(4):
        view(client, order)


def test_a_request_waits_for_the_page_another_is_rendering_instead_of_rendering_it_too(
    client: Client, order: Order, frozen_second: list[int], django_assert_num_queries: Any
) -> None:
    rendering_elsewhere(order, frozen_second[0])  # nothing stored yet: a first view
    request = RequestFactory().get(url(order))
    request.user = AnonymousUser()
    with translation.override("en"):
        key = order_page.page_key(request, order, order_state.state_of(order.pk))
    elsewhere = (frozen_second[0], "<p>rendered by the other request</p>")
    timer = threading.Timer(0.05, order_page.cache.set, (key, elsewhere, 10))
    timer.start()
    with django_assert_num_queries(1):
        html = view(client, order)
    timer.join()
    assert html == "<p>rendered by the other request</p>"


def test_a_request_renders_the_page_itself_when_the_other_takes_too_long(
    client: Client, order: Order, frozen_second: list[int], django_assert_num_queries: Any
) -> None:
    rendering_elsewhere(order, frozen_second[0])  # and nothing ever stored
    # Rendered: the order with its state, invoices, billing, SSH keys, and the summary's
    # kind, environment and keys (its fragment cached from the first rendering on).
    with django_assert_num_queries(7):
        html = view(client, order)
    assert "Choose how to pay:" in html


def test_a_new_state_is_never_served_an_old_body(
    client: Client, order: Order, frozen_second: list[int]
) -> None:
    assert "Cancel the order" in view(client, order)
    frozen_second[0] += 1
    Order.objects.filter(pk=order.pk).update(status=Order.STATUS_CANCELLED)
    rendering_elsewhere(order, frozen_second[0])
    assert "Cancel the order" not in view(client, order)


def test_a_payment_seen_in_the_same_second_shows_at_once(
    client: Client, payments: Payments, order: Order, frozen_second: list[int]
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    assert "Partly paid" not in view(client, order)
    # As the scanner writes it: a queryset update, no model signal, no save().
    Invoice.objects.filter(pk=invoice.pk).update(amount_seen=invoice.amount_due // 2)
    assert "Partly paid" in view(client, order)


def test_a_status_and_a_key_change_show_at_once(
    client: Client, order: Order, frozen_second: list[int], ssh_key: str
) -> None:
    before = view(client, order)
    assert "Cancel the order" in before
    Order.objects.filter(pk=order.pk).update(status=Order.STATUS_CANCELLED)
    after = view(client, order)
    assert "Cancel the order" not in after
    assert after != before


def test_each_request_gets_its_own_working_csrf_token(
    order: Order, frozen_second: list[int]
) -> None:
    browser = Client(enforce_csrf_checks=True)
    first = view(browser, order)
    second = view(browser, order)  # from the cache
    tokens = TOKEN.findall(first) + TOKEN.findall(second)
    assert tokens
    assert order_page.CSRF_PLACEHOLDER not in first + second
    assert len(set(TOKEN.findall(second))) == 1
    assert set(TOKEN.findall(first)).isdisjoint(TOKEN.findall(second))  # masked anew
    response = browser.post(
        f"/en/orders/{order.reference}/{order.secret}/cancel/",
        {"csrfmiddlewaretoken": TOKEN.findall(second)[0], "confirm": "on", "reason": ""},
    )
    assert response.status_code == 302
    order.refresh_from_db()
    assert order.status == Order.STATUS_CANCELLED


def test_a_refused_form_is_shown_to_its_sender_only(
    client: Client, order: Order, frozen_second: list[int]
) -> None:
    view(client, order)  # the plain page, stored
    refused = client.post(
        f"/en/orders/{order.reference}/{order.secret}/ssh-keys/",
        {"ssh_public_keys": "not a key"},
    )
    assert refused.status_code == 400
    assert "not a key" in refused.content.decode()
    other = Client()
    assert "not a key" not in view(other, order)
    assert "not a key" not in view(client, order)


def test_a_flash_message_is_not_served_to_the_next_visitor(
    client: Client, order: Order, frozen_second: list[int]
) -> None:
    response = client.post(
        f"/en/orders/{order.reference}/{order.secret}/billing/",
        {"organisation": "Lab of Ada", "address": "1 Road", "vat_id": ""},
    )
    assert response.status_code == 302
    saved = view(client, order)
    assert "Your billing details are saved." in saved
    assert "Your billing details are saved." not in view(Client(), order)
    assert "Your billing details are saved." not in view(client, order)


def test_the_order_read_with_its_state_is_the_orms_order(order: Order) -> None:
    read, state = order_state.order_and_state_by_link(order.reference, order.secret)
    assert state == order_state.state_of(order.pk)
    fresh = Order.objects.get(pk=order.pk)
    for field in Order._meta.concrete_fields:
        assert getattr(read, field.attname) == getattr(fresh, field.attname), field.name
        assert type(getattr(read, field.attname)) is type(getattr(fresh, field.attname))
    assert read.kind == fresh.kind


def test_a_wrong_secret_opens_nothing(client: Client, order: Order) -> None:
    assert client.get(f"/en/orders/{order.reference}/{order.secret[:-1]}x/").status_code == 404
    assert client.get(f"/en/orders/GL-NOPE/{order.secret}/").status_code == 404


def test_a_signed_in_visitor_gets_their_own_menu(
    client: Client, order: Order, frozen_second: list[int], ada: tuple[Any, str]
) -> None:
    assert "Sign in" in view(client, order)
    client.force_login(ada[0])
    signed_in = view(client, order)
    assert "Sign out" in signed_in
    assert "Sign in" not in signed_in
    assert "Sign in" in view(Client(), order)


def test_each_language_has_its_own_page(
    client: Client, order: Order, frozen_second: list[int]
) -> None:
    english = view(client, order)
    german = client.get(f"/de/orders/{order.reference}/{order.secret}/").content.decode()
    assert "Choose how to pay:" in english
    assert "Choose how to pay:" not in german


# --------------------------------------------------------------------------- what it reads


TABLE = re.compile(r'(?:FROM|JOIN)\s+"?([a-z_]+)"?', re.IGNORECASE)


def tables_read(client: Client, order: Order) -> set[str]:
    seen: list[str] = []

    def record(execute: Any, sql: str, *args: Any) -> Any:
        seen.append(sql)
        return execute(sql, *args)

    with connection.execute_wrapper(record):
        order_page.cache.clear()
        view(client, order)
    found = {table for sql in seen for table in TABLE.findall(sql)}
    return found - {"django_session"}


def delivered_with_split_test(make_request: OrderRequests, tmp_path: Path) -> Order:
    job = delivered(make_request, tmp_path, v2_reports.report())
    attach_split_test(job.order, split_test_reports.report(), actor=RESEARCHER)
    order: Order = job.order
    return order


def states(
    make_request: OrderRequests, payments: Payments, tmp_path: Path, soon: datetime
) -> Iterator[tuple[str, Order]]:
    """An order in each state whose page reads something the others' do not."""

    def placed(week: int) -> Order:
        return place_order(
            make_request(lot_count=1, window_days=3, starts_at=soon + timedelta(days=7 * week))
        )

    # First: it builds the inventory (2 H200 lots) and takes one for the first window.
    yield "delivered with a split test", delivered_with_split_test(make_request, tmp_path)
    yield "awaiting its coin", placed(1)
    partly = placed(2)
    invoice = invoicing.create_invoice(partly, payments.usdc)
    Invoice.objects.filter(pk=invoice.pk).update(amount_seen=invoice.amount_due // 3)
    yield "partly paid", partly
    paid = placed(3)
    settle(invoicing.create_invoice(paid, payments.usdc), paid)
    receipts.save_billing(paid, organisation="Lab", address="1 Road", vat_id="")
    receipts.issue_receipt(paid)
    yield "paid with a receipt", paid
    started = timezone.now() - timedelta(days=2)
    campaign_run = running(campaign_order(make_request, soon, 1, 5), started=started)
    campaign.request_early_end(campaign_run, reason="done early", actor=RESEARCHER)
    yield "a running campaign", campaign_run


def test_every_table_the_page_reads_is_in_its_state(
    client: Client,
    payments: Payments,
    make_request: OrderRequests,
    tmp_path: Path,
    soon: datetime,
) -> None:
    read: dict[str, set[str]] = {}
    for name, order in states(make_request, payments, tmp_path, soon):
        read[name] = tables_read(client, order)
    everything = set().union(*read.values())
    assert {"payments_transfer", "provisioning_splittest", "reservations_checkpoint"} <= everything
    missing = {name: tables - set(order_state.SOURCES) for name, tables in read.items()}
    assert not any(missing.values()), missing


def test_the_state_changes_with_every_row_it_names(
    order: Order, payments: Payments, ssh_key: str
) -> None:
    before = order_state.state_of(order.pk)
    assert order_state.state_of(order.pk) == before  # reading changes nothing
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM reservations_order WHERE id = %s FOR UPDATE", [order.pk])
    assert order_state.state_of(order.pk) == before  # nor does a lock
    invoice = invoicing.create_invoice(order, payments.usdc)
    after_invoice = order_state.state_of(order.pk)
    assert after_invoice != before
    Invoice.objects.filter(pk=invoice.pk).update(amount_seen=1)
    assert order_state.state_of(order.pk) != after_invoice
    deleted = order_state.state_of(order.pk)
    order.ssh_keys.all().delete()
    assert order_state.state_of(order.pk) != deleted


def test_the_state_is_prepared_on_the_server_unless_prepared_statements_are_off(
    order: Order, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DATABASE_PREPARED_STATEMENTS=0 (behind a pooler in transaction mode) sets psycopg's
    prepare_threshold to None: then nothing is prepared, infra.prepared's statements too."""

    def prepared_here() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
                ["%string_agg(id::text%"],
            )
            return int(cursor.fetchone()[0])

    connection.ensure_connection()
    monkeypatch.setattr(connection.connection, "prepare_threshold", None)
    state = order_state.state_of(order.pk)
    assert prepared_here() == 0
    monkeypatch.setattr(connection.connection, "prepare_threshold", 5)
    assert order_state.state_of(order.pk) == state
    assert prepared_here() == 1
