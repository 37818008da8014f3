"""A booking moved to another lot (a lot taken out of service) takes its provisioning with
it while nothing of the order is on the old lot; once preparation began there, the move is
refused and nothing changes."""

from __future__ import annotations

import pytest

from provisioning import access, services
from provisioning.models import ProvisioningJob
from reservations.errors import MoveRefused
from reservations.inventory import free_lots_for, move_booking
from reservations.models import Hold
from tests.conftest import RequestFactory
from tests.provisioning.test_provisioning import OPERATOR, paid_order

pytestmark = pytest.mark.django_db


def test_a_scheduled_lot_follows_its_booking_to_the_new_lot(make_request: RequestFactory) -> None:
    order = paid_order(make_request)
    services.approve_order(order, actor=OPERATOR)
    hold = Hold.objects.get(order=order, status=Hold.Status.BOOKED)
    (target,) = free_lots_for(hold)
    moved = move_booking(hold, target, actor=OPERATOR, reason="maintenance")
    job = ProvisioningJob.objects.get(order=order)
    assert moved.lot_id == job.lot_id == target.pk
    grant = access.open_grant(job, now=order.starts_at)
    assert grant is not None
    assert grant.lot_id == target.pk


def test_a_lot_already_being_prepared_cannot_be_moved(make_request: RequestFactory) -> None:
    order = paid_order(make_request)
    services.approve_order(order, actor=OPERATOR)
    job = ProvisioningJob.objects.get(order=order)
    assert access.open_grant(job, now=order.starts_at) is not None
    hold = Hold.objects.get(order=order, status=Hold.Status.BOOKED)
    (target,) = free_lots_for(hold)
    with pytest.raises(MoveRefused, match="already being prepared"):
        move_booking(hold, target, actor=OPERATOR, reason="maintenance")
    assert ProvisioningJob.objects.get(pk=job.pk).lot_id == hold.lot_id
    assert Hold.objects.get(pk=hold.pk).status == Hold.Status.BOOKED
    assert not Hold.objects.filter(order=order, lot=target).exists()
