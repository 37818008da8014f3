"""The expiry flow through a real Celery worker process and the Redis broker."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from payments.tasks import expire_unpaid_holds
from reservations.models import Hold, Order
from reservations.services import place_order
from reservations.tasks import send_missing_order_mails
from tests.conftest import RequestFactory, build_inventory
from tests.workers import WorkerProcess, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


def test_a_real_worker_expires_unpaid_orders(
    celery_worker: WorkerProcess, make_request: RequestFactory
) -> None:
    build_inventory()
    late = place_order(make_request())
    on_time = place_order(make_request())
    Order.objects.filter(pk=late.pk).update(hold_expires_at=timezone.now() - timedelta(minutes=1))

    expire_unpaid_holds.apply_async(queue=celery_worker.queue)

    assert wait_for(lambda: Order.objects.get(pk=late.pk).status == Order.STATUS_EXPIRED), (
        celery_worker.log()
    )
    assert late.holds.get().status == Hold.Status.RELEASED
    assert Order.objects.get(pk=on_time.pk).status == Order.STATUS_AWAITING_PAYMENT
    # The worker writes "succeeded" after the task's transaction commits, so the line can
    # trail the database by a moment on a loaded machine: wait for it rather than read once.
    assert wait_for(
        lambda: re.search(r"expire_unpaid_holds\[\S+\] succeeded", celery_worker.log())
    ), celery_worker.log()


def test_beat_catches_up_every_minute() -> None:
    for name, task in [
        ("expire-unpaid-holds", expire_unpaid_holds),
        ("send-missing-order-mails", send_missing_order_mails),
    ]:
        entry = settings.CELERY_BEAT_SCHEDULE[name]
        assert entry["task"] == task.name
        schedule: Any = entry["schedule"]
        assert schedule.minute == set(range(60))
