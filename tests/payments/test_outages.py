"""Outages degrade, they do not break (issue 11, findings 10 and 11): a node that stops
answering shows "checking is delayed" on the page and in the API within a few scan
intervals, and clears when it answers again; with Redis down the API answers JSON (reads
pass, writes a 503 with a code), and a real worker and beat wait the outage out — a
payment made during it settles afterwards."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from django.db import connection
from django.test import Client
from kombu.exceptions import OperationalError as BrokerOperationalError

from accounts.models import User
from api.models import ApiToken
from payments import claims, devchain, invoicing
from payments.devchain import DevChain
from payments.models import Chain, Invoice
from payments.tasks import scan_open_invoices
from reservations.models import Order
from reservations.services import place_order
from tests.conftest import Payments, RequestFactory, build_inventory
from tests.workers import RedisServer, start_worker, wait_for


def page(order: Order) -> str:
    return f"/en/orders/{order.reference}/{order.secret}/payment/"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Owned:
    order: Order
    invoice: Invoice
    token: str


def owned_invoice(make_request: RequestFactory, asset: Any) -> Owned:
    """An order of an account with an API token, and its invoice in ``asset``."""
    build_inventory()
    user = User.objects.create_user("ada@example.org")
    _record, token = ApiToken.issue(user, "pipeline")
    order = place_order(make_request(lot_count=1, window_days=3), user=user)
    return Owned(order, invoicing.create_invoice(order, asset), token)


def delayed(client: Client, owned: Owned) -> tuple[bool, bool, Any]:
    """(the page says so, the API says so, the API's delayed_since)."""
    html = client.get(page(owned.order)).content.decode()
    api = client.get(
        f"/api/v1/orders/{owned.order.reference}/invoice/", headers=bearer(owned.token)
    )
    assert api.status_code == 200, api.content
    body = api.json()
    return "Checking is delayed since" in html, body["check_delayed"], body.get("delayed_since")


# --------------------------------------------------------------------------- finding 10


@pytest.fixture
def own_node(transactional_db: None) -> Iterator[tuple[Any, DevChain, Chain]]:
    """An anvil of this test's own (it is stopped and continued), configured, committed."""
    port = devchain.free_port()
    node = devchain.start_anvil(port)
    dev = DevChain(f"http://127.0.0.1:{port}")
    dev.deploy()
    try:
        yield node, dev, devchain.configure(dev.url, confirmations=2)
    finally:
        node.send_signal(signal.SIGCONT)
        node.terminate()
        node.wait(timeout=10)


def test_a_node_that_stops_answering_shows_checking_is_delayed_until_it_answers_again(
    own_node: tuple[Any, DevChain, Chain],
    make_request: RequestFactory,
    client: Client,
    settings: Any,
) -> None:
    settings.PAYMENT_CHECK_DELAYED_SECONDS = 3
    settings.PAYMENT_RPC_TIMEOUT = 60  # a node that hangs: the scan waits on it, no error yet
    node, dev, chain = own_node
    owned = owned_invoice(make_request, chain.assets.get(symbol="USDC"))
    scan_open_invoices()
    assert delayed(client, owned) == (False, False, None)

    node.send_signal(signal.SIGSTOP)  # the node stops answering (the port still accepts)

    def stuck_scan() -> None:
        try:
            scan_open_invoices()
        finally:
            connection.close()

    scan = threading.Thread(target=stuck_scan, daemon=True)
    scan.start()
    time.sleep(4)  # the threshold (3 s) passes while the scan waits on the node
    on_page, in_api, since = delayed(client, owned)
    assert (on_page, in_api) == (True, True)
    assert since is not None
    assert scan.is_alive()  # no scan has failed: the delay is read from the last success

    node.send_signal(signal.SIGCONT)  # it answers again: the waiting scan completes
    scan.join(timeout=30)
    assert not scan.is_alive()
    assert Chain.objects.get(pk=chain.pk).last_scan_error == ""
    dev.pay_invoice(owned.invoice)
    dev.mine(2)
    assert scan_open_invoices() == 1
    assert delayed(client, owned)[1:] == (False, None)


@pytest.mark.django_db
def test_a_failed_scan_is_recorded_for_the_operator(payments: Payments) -> None:
    Chain.objects.filter(pk=payments.chain.pk).update(
        rpc_url=f"http://127.0.0.1:{devchain.free_port()}"
    )
    scan_open_invoices()
    chain = Chain.objects.get(pk=payments.chain.pk)
    assert chain.last_scan_error.startswith("RpcUnavailable")
    assert chain.last_scan_error_at is not None
    assert chain.last_scan_at is None

    Chain.objects.filter(pk=payments.chain.pk).update(rpc_url=payments.dev.url)
    scan_open_invoices()
    chain = Chain.objects.get(pk=payments.chain.pk)
    assert (chain.last_scan_error, chain.last_scan_at is not None) == ("", True)


# --------------------------------------------------------------------------- finding 11


@pytest.fixture
def redis_down(settings: Any) -> None:
    """This process's cache, rate limits and broker check pointed at a closed port."""
    closed = f"redis://127.0.0.1:{devchain.free_port()}/0"
    settings.REDIS_URL = closed
    settings.CELERY_BROKER_URL = closed
    settings.CACHES = {
        "default": {**settings.CACHES["default"], "LOCATION": closed},
    }


@pytest.mark.django_db
def test_with_redis_down_reads_answer_and_writes_get_a_json_503(
    payments: Payments, make_request: RequestFactory, client: Client, redis_down: None
) -> None:
    owned = owned_invoice(make_request, payments.usdc)
    orders = Order.objects.count()

    kinds = client.get("/api/v1/kinds/")  # public, read-only: the throttle fails open
    assert kinds.status_code == 200
    assert kinds.json()
    invoice = client.get(
        f"/api/v1/orders/{owned.order.reference}/invoice/", headers=bearer(owned.token)
    )
    assert (invoice.status_code, invoice.json()["status"]) == (200, "new")

    placed = client.post(
        "/api/v1/orders/", "{}", content_type="application/json", headers=bearer(owned.token)
    )
    assert placed.status_code == 503
    assert placed["Content-Type"] == "application/json"
    assert placed.json()["code"] == "redis_unavailable"
    assert int(placed["Retry-After"]) > 0
    assert Order.objects.count() == orders  # nothing changed

    assert client.get(page(owned.order)).status_code == 200  # the cache misses, that is all
    health = client.get("/healthz")
    assert health.status_code == 503
    assert "broker" in health.json()["down"]


@pytest.mark.django_db
def test_a_claim_whose_verification_cannot_be_queued_is_queued_by_beat_later(
    payments: Payments, order: Order, client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    invoice = invoicing.create_invoice(order, payments.usdc)
    with (
        mock.patch(
            "payments.tasks.verify_invoice.delay", side_effect=BrokerOperationalError("down")
        ),
        django_capture_on_commit_callbacks(execute=True),
    ):
        response = client.post(f"{page(order)}paid/", {"tx_hash": ""})
    assert response.status_code in (200, 302)
    invoice.refresh_from_db()
    assert invoice.claimed_at is not None
    assert invoice.verification_queued_at is None  # free: dispatch_verifications sends it
    with mock.patch("payments.tasks.verify_invoice.delay") as sent:
        assert claims.dispatch_verifications() == 1
    sent.assert_called_once_with(invoice.pk)


OUTAGE_SECONDS = 30


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_worker_and_beat_wait_out_a_redis_outage_and_a_payment_made_during_it_settles(
    committed_payments: Payments,
    make_request: RequestFactory,
    client: Client,
    settings: Any,
    tmp_path: Path,
) -> None:
    owned = owned_invoice(make_request, committed_payments.usdc)
    redis = RedisServer()
    environ = {
        "REDIS_URL": redis.url(0),
        "CELERY_BROKER_URL": redis.url(1),
        "PAYMENT_SCAN_SECONDS": "2",
    }
    worker_run = contextlib.contextmanager(start_worker)
    try:
        with worker_run(beat_schedule=tmp_path / "beat-schedule", environ=environ) as worker:
            assert wait_for(lambda: Chain.objects.filter(last_scan_at__isnull=False).exists()), (
                worker.log()
            )
            settings.REDIS_URL = redis.url(0)
            settings.CACHES = {"default": {**settings.CACHES["default"], "LOCATION": redis.url(0)}}

            redis.stop()
            stopped = time.monotonic()
            committed_payments.dev.pay_invoice(owned.invoice)  # paid while Redis is down
            committed_payments.dev.mine(2)
            read = client.get(
                f"/api/v1/orders/{owned.order.reference}/invoice/", headers=bearer(owned.token)
            )
            assert read.status_code == 200
            claim = client.post(
                f"/api/v1/orders/{owned.order.reference}/claim/",
                "{}",
                content_type="application/json",
                headers=bearer(owned.token),
            )
            assert (claim.status_code, claim.json()["code"]) == (503, "redis_unavailable")
            time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - stopped)))
            assert worker.process.poll() is None, worker.log()[-3000:]
            assert Order.objects.get(pk=owned.order.pk).status == Order.STATUS_AWAITING_PAYMENT

            redis.start()  # empty, as a restarted Redis without persistence is
            assert wait_for(
                lambda: Order.objects.get(pk=owned.order.pk).status == Order.STATUS_PAID,
                timeout=60,
            ), worker.log()[-3000:]
            assert worker.process.poll() is None
            assert "Connection to broker lost" in worker.log()
    finally:
        redis.stop()
