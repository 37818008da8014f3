"""Webhooks through a real Celery worker: every event type reaches each endpoint that hears
of it once, signed (verified with standardwebhooks), a researcher's endpoint never hears of
another's order; and a worker killed in the middle of a delivery loses nothing: the pending
delivery is in PostgreSQL and beat, in a worker started afterwards, resumes it."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from accounts.models import User
from payments import invoicing
from payments.events import invoice_exception, refund_sent
from payments.models import Invoice, Refund
from provisioning import services as provisioning
from provisioning.events import (
    access_closed,
    access_closing_soon,
    access_opened,
    lot_held,
    lot_replaced,
    report_ready,
)
from provisioning.models import ProvisioningJob
from reservations import incidents
from reservations.events import order_expired, order_extended, order_paid_late
from reservations.services import cancel_order, mark_paid, place_order, system
from tests.conftest import Payments, RequestFactory, build_inventory
from tests.webhooks.receiver import Receiver, Script
from tests.workers import WorkerProcess, start_worker, wait_for
from webhooks import catalogue, services
from webhooks.models import Attempt, Delivery

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

OPERATORS_ONLY = {e.name for e in catalogue.EVENT_TYPES if e.operators_only}


def test_every_event_reaches_each_endpoint_that_hears_of_it_once(
    celery_worker: WorkerProcess,
    committed_payments: Payments,
    receiver: Receiver,
    make_request: RequestFactory,
) -> None:
    build_inventory()
    ada = User.objects.create_user("ada@example.org")
    eve = User.objects.create_user("eve@example.org")
    operator = User.objects.create_superuser("op@example.org", "a-long-password-1")
    secrets = {
        "ada": services.create_endpoint(ada, url=receiver.url("/ada"), event_types=[])[1],
        "eve": services.create_endpoint(eve, url=receiver.url("/eve"), event_types=[])[1],
        "desk": services.create_endpoint(
            operator, url=receiver.url("/desk"), event_types=[], all_orders=True
        )[1],
    }
    order = place_order(make_request(lot_count=1, window_days=3), user=ada)  # order.placed
    invoice = invoicing.create_invoice(order, committed_payments.usdc)
    for status, exception in (
        (Invoice.STATUS_PROCESSING, Invoice.EXCEPTION_PAID_PARTIAL),  # order.partially_paid
        (Invoice.STATUS_EXPIRED, Invoice.EXCEPTION_PAID_LATE),  # payment.needs_decision
        (Invoice.STATUS_SETTLED, Invoice.EXCEPTION_PAID_OVER),  # order.overpaid
    ):
        Invoice.objects.filter(pk=invoice.pk).update(status=status, exception=exception)
        invoice_exception.announce(invoice_id=invoice.pk)
    with transaction.atomic():  # as the settling scan does
        assert mark_paid(order, actor=system("test"), reason="invoice settled")  # order.paid
    order_paid_late.announce(order_id=order.pk)
    provisioning.approve_order(order, actor=system("test"))  # order.approved
    job = ProvisioningJob.objects.get(order=order)
    ProvisioningJob.objects.filter(pk=job.pk).update(
        report={"version": 2, "exit_code": 0, "complete": True, "acceptance": {"passed": True}}
    )
    for event in (report_ready, lot_held, access_opened, access_closed):
        event.announce(order_id=order.pk, job_id=job.pk)
    access_closing_soon.announce(order_id=order.pk)
    refund = Refund.objects.create(
        invoice=invoice,
        chain=committed_payments.chain,
        amount=Decimal(1),
        to_address="0x" + "11" * 20,
        tx_hash="0x" + "22" * 32,
    )
    refund_sent.announce(refund_id=refund.pk)
    other = place_order(
        make_request(lot_count=1, window_days=3, starts_at=order.starts_at + timedelta(days=10)),
        user=ada,
    )
    cancel_order(other, actor=system("test"), reason="the grant fell through")  # placed, cancelled
    order_expired.announce(order_id=other.pk)
    # order.extended (tests/reservations/test_extensions.py extends for real; here only the
    # fan-out counts, and the extension's id only keys the message)
    order_extended.announce(order_id=order.pk, extension_id=other.pk)
    # lot.incident_opened and order.credited, from the incident's own services (committed:
    # no transaction of the test's is open); lot.replaced keyed by the jobs only.
    incident, _opened = incidents.open_incident(
        order, job.lot, kind="acceptance", summary="test", at=order.starts_at, at_acceptance=True
    )
    incidents.end_incident(incident, at=order.starts_at + timedelta(hours=1), why="test")
    lot_replaced.announce(order_id=order.pk, job_id=job.pk, replacement_job_id=job.pk)

    every = {e.name for e in catalogue.EVENT_TYPES}
    expected = {
        "ada": Counter({name: 1 for name in every - OPERATORS_ONLY})
        + Counter({"order.placed": 1, "order.cancelled": 0}),
        "desk": Counter({name: 1 for name in every}) + Counter({"order.placed": 1}),
    }
    for path, counts in expected.items():
        got = receiver.wait_for(f"/{path}", sum(counts.values()), timeout=90)
        assert len(got) == sum(counts.values()), (path, [json.loads(r.body)["type"] for r in got])
    assert wait_for(lambda: not Delivery.objects.exclude(status="delivered").exists(), 30)
    for path, counts in expected.items():
        payloads = [
            Webhook(secrets[path]).verify(r.body, r.headers) for r in receiver.at(f"/{path}")
        ]
        assert Counter(p["type"] for p in payloads) == +counts, path
        assert len({r.headers["webhook-id"] for r in receiver.at(f"/{path}")}) == len(payloads)
        references = {p["data"]["order"]["reference"] for p in payloads}
        assert references == {order.reference, other.reference}
        report = next(p for p in payloads if p["type"] == "report.ready")["data"]
        assert (report["report"]["accepted"], report["lot"]["job"]) == (True, job.pk)
        needs = [p for p in payloads if p["type"] == "payment.needs_decision"]
        assert len(needs) == (1 if path == "desk" else 0)
    assert receiver.at("/eve") == []  # eve's endpoint never hears of ada's orders
    assert Attempt.objects.count() == Delivery.objects.count()  # each delivered at once


def test_a_worker_killed_mid_delivery_loses_nothing_beat_resumes_it(
    transactional_db: None,
    receiver: Receiver,
    make_request: RequestFactory,
    tmp_path: Path,
) -> None:
    build_inventory()
    ada = User.objects.create_user("ada@example.org")
    _hook, secret = services.create_endpoint(
        ada, url=receiver.url("/ada", Script(hang_s=60, hang_once=True)), event_types=[]
    )
    first = start_worker()
    worker = next(first)
    try:
        order = place_order(make_request(lot_count=1, window_days=3), user=ada)
        assert receiver.wait_for("/ada", 1, timeout=60), worker.log()[-2000:]
        delivery = Delivery.objects.get()
        assert delivery.leased_until is not None  # a worker is posting it
        os.kill(worker.process.pid, signal.SIGKILL)  # killed in the middle of the POST
        worker.process.wait(timeout=10)
    finally:
        first.close()
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("pending", 0)  # nothing lost
    assert not Attempt.objects.exists()
    # The simulated clock: the lease (the timeout and its margin) and the re-queue wait pass.
    past = timezone.now() - timedelta(seconds=1)
    Delivery.objects.filter(pk=delivery.pk).update(
        leased_until=past, queued_at=past - services.REQUEUE_AFTER
    )
    second = start_worker(
        beat_schedule=tmp_path / "beat-schedule", environ={"WEBHOOK_DUE_SECONDS": "1"}
    )
    worker = next(second)
    try:
        assert receiver.wait_for("/ada", 2, timeout=60), worker.log()[-3000:]
        assert wait_for(
            lambda: Delivery.objects.filter(pk=delivery.pk, status="delivered").exists(), 30
        ), worker.log()[-3000:]
    finally:
        second.close()
    killed, resumed = receiver.at("/ada")
    assert killed.headers["webhook-id"] == resumed.headers["webhook-id"]
    payload: dict[str, Any] = Webhook(secret).verify(resumed.body, resumed.headers)
    assert payload["data"]["order"]["reference"] == order.reference
    assert Attempt.objects.get().status_code == 200
