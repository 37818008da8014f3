"""The order's link is mailed once, in the order's language, even when the broker was away."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.core import mail
from django.core.mail import EmailMultiAlternatives
from django.test import Client
from django.utils import timezone

from reservations import notifications
from reservations.models import Order
from reservations.services import place_order
from tests.conftest import Inventory, RequestFactory
from tests.reservations.test_booking_pages import book_until_review

pytestmark = pytest.mark.django_db


def test_the_mail_goes_out_once(inventory: Inventory, make_request: RequestFactory) -> None:
    order = place_order(make_request(language="fr", contact_name="<b>Ada</b>"))
    assert notifications.send_order_placed_once(order.pk) is True
    assert notifications.send_order_placed_once(order.pk) is False
    (message,) = mail.outbox
    assert message.subject == f"Votre commande {order.reference}"
    assert f"/fr/orders/{order.reference}/{order.secret}/" in message.body
    assert isinstance(message, EmailMultiAlternatives)
    html = str(message.alternatives[0][0])
    assert "&lt;b&gt;Ada&lt;/b&gt;" in html
    assert "<b>Ada</b>" not in html
    assert Order.objects.get(pk=order.pk).placed_mail_sent_at is not None


def test_a_broker_outage_never_fails_the_booking_and_the_catch_up_sends_the_mail(
    client: Client, inventory: Inventory, django_capture_on_commit_callbacks: Any
) -> None:
    book_until_review(client)
    broken = mock.patch(
        "reservations.tasks.send_order_placed.delay", side_effect=ConnectionError("broker down")
    )
    with broken, django_capture_on_commit_callbacks(execute=True):
        response = client.post("/en/book/review/")
    assert response.status_code == 302
    order = Order.objects.get()
    assert order.placed_mail_sent_at is None
    assert mail.outbox == []

    assert notifications.send_missing_order_mails() == 0  # too fresh: its own task may run
    later = timezone.now() + timedelta(minutes=2)
    assert notifications.send_missing_order_mails(now=later) == 1
    assert notifications.send_missing_order_mails(now=later) == 0
    assert len(mail.outbox) == 1


def test_old_orders_are_left_to_the_operator(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    place_order(make_request())
    assert notifications.send_missing_order_mails(now=timezone.now() + timedelta(days=3)) == 0
    assert mail.outbox == []
