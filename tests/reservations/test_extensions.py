"""Extending an order on the same lots, on a simulated clock: the schedule (provisioning's
tick, payments' expiry) runs at every tick as beat runs it, and the host is the local
backend's sandbox running the real host scripts."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from django.db import IntegrityError, connections, transaction
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange  # type: ignore[import-untyped]

from payments.expiry import expire_unpaid_holds
from provisioning import schedule, services
from provisioning.models import AccessGrant, ProvisioningJob
from reservations import extensions
from reservations.availability import next_handover
from reservations.errors import LotUnavailable
from reservations.extensions import ExtensionRefused, place_extension
from reservations.models import Hold, Lot, Order
from reservations.services import (
    cancel_order,
    mark_paid,
    place_order,
    reinstate_paid,
    system,
)
from tests.conftest import RequestFactory, build_inventory
from tests.provisioning.clock import Clock, SimulatedHost
from tests.provisioning.test_provisioning import OPERATOR

LEAD = timedelta(hours=6)
TURNAROUND = timedelta(hours=6)
HOUR = timedelta(hours=1)
RESEARCHER = system("researcher")


@pytest.fixture
def timing(settings: Any) -> None:
    settings.PROVISIONING_PREPARE_LEAD = LEAD
    settings.RESERVATION_TURNAROUND = TURNAROUND
    settings.RESERVATION_EXTENSION_PAY_LEAD = timedelta(hours=2)
    settings.PROVISIONING_AUTO_APPROVE = False


def paid(make_request: RequestFactory, starts_at: datetime, **fields: Any) -> Order:
    fields.setdefault("window_days", 3)
    order = place_order(make_request(starts_at=starts_at, **fields))
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="paid")
    return order


def pay(order: Order) -> None:
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="extension paid")


def keys_file(hosts: SimulatedHost, job: ProvisioningJob) -> Path:
    (account, _cards) = services.accounts_for(job)[0]
    return hosts.root / job.lot.host.name / "home" / account / ".ssh" / "authorized_keys"


def has_keys(path: Path) -> bool:
    return path.exists() and bool(path.read_text().strip())


def tick(clock: Clock, hosts: SimulatedHost) -> None:
    """Beat's tick at the clock's time, each job it starts run at once (as a worker would)."""
    messages: list[int] = []
    schedule.tick(now=clock.now, backend=hosts, start=messages.append)
    while messages:
        services.run_job(messages.pop(0), hosts, now=clock.now)


def fresh(order: Order) -> Order:
    return Order.objects.get(pk=order.pk)


def counting_periods(lot: Lot) -> list[DateTimeTZRange]:
    return [h.period for h in Hold.objects.filter(lot=lot, status__in=Hold.COUNTING)]


@pytest.mark.django_db
def test_an_extension_paid_during_the_window_keeps_access_open_to_the_new_end(
    make_request: RequestFactory, tmp_path: Path, soon: datetime, timing: None
) -> None:
    build_inventory()
    order = paid(make_request, soon)
    services.approve_order(order, actor=OPERATOR)
    clock = Clock(soon - LEAD - HOUR)
    hosts = SimulatedHost(root=tmp_path / "hosts", clock=clock)
    (job,) = ProvisioningJob.objects.filter(order=order)
    keys = keys_file(hosts, job)
    original_end = order.ends_at
    extension: Order | None = None
    kept: Path | None = None
    while clock.now <= soon + timedelta(days=11):
        tick(clock, hosts)
        current = fresh(order)
        if soon + HOUR <= clock.now < current.ends_at:
            # Access is open, and it never closes between the original end and the new one.
            assert has_keys(keys), clock.now
            assert AccessGrant.objects.get(job=job).closed_at is None
        if extension is None and clock.now >= soon + timedelta(days=1):
            assert current.status == Order.STATUS_ACTIVE
            offer = extensions.offers(current, now=clock.now)
            assert offer.refused == ""
            assert [o.days for o in offer.offers if o.fits] == [3, 7, 30]
            extension = place_extension(current, 7, actor=RESEARCHER, now=clock.now)
            assert extension.starts_at == original_end
            assert extension.hold_expires_at <= original_end - timedelta(hours=2)
            # The extension holds the same lot right after the order's blocked period.
            (hold,) = extension.holds.all()
            assert hold.lot_id == job.lot_id
            assert hold.period.lower == original_end + TURNAROUND
            pay(extension)
            services.approve_order(fresh(extension), actor=OPERATOR)
            # A file the researcher wrote in the first window is still there after it.
            kept = keys.parent.parent / "results.txt"
            kept.write_text("epoch 41\n")
        if kept is not None and clock.now > original_end + HOUR and clock.now < current.ends_at:
            assert kept.read_text() == "epoch 41\n"
        clock.now += HOUR

    assert extension is not None
    order.refresh_from_db()
    extension.refresh_from_db()
    assert order.ends_at == original_end + timedelta(days=7)
    assert order.window_days == 3  # what was booked; the extension is its own 7 days
    assert extension.joined_at is not None
    grant = AccessGrant.objects.get(job=job)
    assert grant.window_end == order.ends_at
    assert grant.closed_at is not None
    assert grant.closed_at >= order.ends_at
    assert not keys.exists()
    assert order.status == Order.STATUS_COMPLETED
    assert extension.status == Order.STATUS_COMPLETED
    # One account, one job: no second preparation, no new account.
    assert ProvisioningJob.objects.filter(order__in=[order, extension]).count() == 1
    assert [name for name, _a in hosts.calls].count("prepare_access") == 1
    # The lot was never held twice at one instant, and the order's hold reaches the new end.
    (lot,) = Lot.objects.filter(pk=job.lot_id)
    (period,) = counting_periods(lot)
    assert period.upper == order.ends_at + TURNAROUND


@pytest.mark.django_db
def test_an_unpaid_extension_is_released_at_its_deadline_and_access_closes_as_booked(
    make_request: RequestFactory, tmp_path: Path, soon: datetime, timing: None
) -> None:
    build_inventory()
    order = paid(make_request, soon)
    services.approve_order(order, actor=OPERATOR)
    clock = Clock(soon + timedelta(days=2))
    extension = place_extension(order, 3, actor=RESEARCHER, now=clock.now)
    deadline = extension.hold_expires_at
    assert deadline == min(clock.now + timedelta(minutes=120), order.ends_at - timedelta(hours=2))
    while clock.now <= order.ends_at + HOUR:
        expire_unpaid_holds(now=clock.now)
        state = fresh(extension).status
        if clock.now < deadline:
            assert state == Order.STATUS_AWAITING_PAYMENT
        else:
            assert state == Order.STATUS_EXPIRED, clock.now
        clock.now += timedelta(minutes=15)
    assert not Hold.objects.filter(order=extension, status__in=Hold.COUNTING).exists()
    assert fresh(order).ends_at == soon + timedelta(days=3)
    # The window's end closes access as booked: nothing waits for the expired extension.
    hosts = SimulatedHost(root=tmp_path / "hosts", clock=clock)
    schedule.tick(now=order.ends_at + timedelta(seconds=1), backend=hosts, start=lambda j: None)
    assert fresh(order).status == Order.STATUS_COMPLETED


@pytest.mark.django_db
def test_a_late_payment_accepted_while_the_lots_are_free_extends_the_window(
    make_request: RequestFactory, soon: datetime, timing: None
) -> None:
    build_inventory()
    order = paid(make_request, soon)
    services.approve_order(order, actor=OPERATOR)
    extension = place_extension(order, 3, actor=RESEARCHER, now=soon + timedelta(days=1))
    expire_unpaid_holds(now=extension.hold_expires_at + timedelta(seconds=1))
    assert fresh(extension).status == Order.STATUS_EXPIRED
    with transaction.atomic():
        reinstate_paid(fresh(extension), actor=OPERATOR, reason="late payment accepted")
    extension.refresh_from_db()
    assert extension.status == Order.STATUS_PAID
    (hold,) = Hold.objects.filter(order=extension, status=Hold.Status.BOOKED)
    assert hold.lot_id == order.holds.get().lot_id  # the same lot, not any free one
    services.approve_order(extension, actor=OPERATOR)
    assert fresh(order).ends_at == soon + timedelta(days=6)


@pytest.mark.django_db
def test_a_late_payment_is_refused_when_the_lots_were_taken_meanwhile(
    make_request: RequestFactory, soon: datetime, timing: None
) -> None:
    build_inventory()
    order = paid(make_request, soon, lot_count=2)
    extension = place_extension(order, 3, actor=RESEARCHER, now=soon - timedelta(days=1))
    expire_unpaid_holds(now=extension.hold_expires_at + timedelta(seconds=1))
    paid(make_request, soon + timedelta(days=4), lot_count=2)  # right after the turnaround
    with pytest.raises(LotUnavailable), transaction.atomic():
        reinstate_paid(fresh(extension), actor=OPERATOR, reason="late payment accepted")
    assert fresh(extension).status == Order.STATUS_EXPIRED


@pytest.mark.django_db
def test_lots_booked_after_the_window_limit_the_lengths_offered_and_refuse_the_rest(
    make_request: RequestFactory, soon: datetime, timing: None
) -> None:
    build_inventory()
    order = paid(make_request, soon)
    now = soon - timedelta(days=1)
    assert [o.days for o in extensions.offers(order, now=now).offers if o.fits] == [3, 7, 30]
    # Someone books both lots four days after the window's end (its turnaround included).
    later = order.ends_at + TURNAROUND + timedelta(days=4)
    paid(make_request, later, lot_count=2)
    offer = extensions.offers(order, now=now)
    assert offer.free_until == later - TURNAROUND
    assert [o.days for o in offer.offers if o.fits] == [3]
    # Longer, no lot of the kind is free before that booking ends: a new order from then.
    after = next_handover(later + timedelta(days=3) + TURNAROUND)
    assert [(o.days, o.elsewhere_from) for o in offer.offers] == [
        (3, None),
        (7, after),
        (30, after),
    ]
    with pytest.raises(ExtensionRefused) as refused:
        place_extension(order, 7, actor=RESEARCHER, now=now)
    assert refused.value.code == "lots_not_free_until"
    assert refused.value.params["free_until"] == later - TURNAROUND
    assert not order.extensions.exists()
    assert place_extension(order, 3, actor=RESEARCHER, now=now).window_days == 3


@pytest.mark.django_db
def test_what_cannot_be_extended_is_refused_with_its_code(
    make_request: RequestFactory, soon: datetime, timing: None
) -> None:
    build_inventory()
    unpaid = place_order(make_request(starts_at=soon, window_days=3))
    with pytest.raises(ExtensionRefused) as refused:
        place_extension(unpaid, 3, actor=RESEARCHER, now=soon)
    assert refused.value.code == "not_extendable"
    order = paid(make_request, soon)
    with pytest.raises(ExtensionRefused) as refused:
        place_extension(order, 3, actor=RESEARCHER, now=order.ends_at - timedelta(hours=2))
    assert refused.value.code == "too_late_to_extend"
    with pytest.raises(ExtensionRefused) as refused:
        place_extension(order, 5, actor=RESEARCHER, now=soon)
    assert refused.value.code == "invalid_window"
    extension = place_extension(order, 3, actor=RESEARCHER, now=soon)
    with pytest.raises(ExtensionRefused) as refused:
        place_extension(order, 7, actor=RESEARCHER, now=soon)
    assert refused.value.code == "extension_pending"
    with pytest.raises(ExtensionRefused) as refused:
        place_extension(extension, 3, actor=RESEARCHER, now=soon)
    assert refused.value.code == "not_extendable"
    # A 30-day extension is a campaign: checkpoints and abort criteria, as a booking asks.
    cancel_order(extension, actor=RESEARCHER, reason="changed my mind")
    with pytest.raises(ExtensionRefused) as refused:
        place_extension(order, 30, actor=RESEARCHER, now=soon)
    assert refused.value.code == "checkpoints_required"
    day = (order.ends_at + timedelta(days=10)).date().isoformat()
    plan = {"date": day, "check": "loss < 2"}
    with pytest.raises(ExtensionRefused) as refused:
        place_extension(order, 30, actor=RESEARCHER, now=soon, checkpoints=[plan])
    assert refused.value.code == "abort_criteria_required"
    campaign = place_extension(
        order,
        30,
        actor=RESEARCHER,
        now=soon,
        checkpoints=[plan],
        abort_criteria="loss diverges",
    )
    assert list(campaign.campaign_checkpoints.values_list("what", flat=True)) == ["loss < 2"]
    assert campaign.abort_criteria == "loss diverges"


@pytest.mark.django_db
def test_the_database_refuses_two_holds_on_the_days_after_the_window(
    make_request: RequestFactory, soon: datetime, timing: None
) -> None:
    build_inventory()
    order = paid(make_request, soon)
    extension = place_extension(order, 7, actor=RESEARCHER, now=soon)
    (hold,) = extension.holds.all()
    # Not a check in Python: the exclusion constraint refuses an overlapping hold, and the
    # partial unique key a second pending extension, whatever code tries.
    with pytest.raises(IntegrityError), transaction.atomic():
        Hold.objects.create(order=order, lot_id=hold.lot_id, period=hold.period)
    Order.objects.filter(pk=extension.pk).update(status=Order.STATUS_PAID)  # still pending
    second = Order.objects.get(pk=extension.pk)
    second.pk = None
    second.reference = "X" + extension.reference[1:]
    second.status = Order.STATUS_AWAITING_PAYMENT
    with pytest.raises(IntegrityError, match="one_pending_extension"), transaction.atomic():
        second.save()


@pytest.mark.django_db(transaction=True)
def test_two_extensions_raced_for_the_same_days_one_wins_and_nothing_overlaps(
    make_request: RequestFactory, soon: datetime, timing: None
) -> None:
    build_inventory()
    order = paid(make_request, soon)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def extend(days: int) -> None:
        try:
            barrier.wait()
            place_extension(Order.objects.get(pk=order.pk), days, actor=RESEARCHER, now=soon)
            outcomes.append("placed")
        except ExtensionRefused as exc:
            outcomes.append(exc.code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=extend, args=(days,)) for days in (7, 3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["extension_pending", "placed"]
    (lot,) = Lot.objects.filter(holds__order=order)
    periods = sorted(counting_periods(lot), key=lambda p: p.lower)
    assert len(periods) == 2
    assert periods[0].upper <= periods[1].lower  # 0 overlaps


@pytest.mark.django_db
def test_access_waits_for_the_operator_while_a_paid_extension_awaits_approval(
    make_request: RequestFactory, tmp_path: Path, soon: datetime, timing: None
) -> None:
    build_inventory()
    order = paid(make_request, soon)
    services.approve_order(order, actor=OPERATOR)
    extension = place_extension(order, 3, actor=RESEARCHER, now=soon + timedelta(days=1))
    pay(extension)
    hosts = SimulatedHost(root=tmp_path / "hosts", clock=Clock(order.ends_at))
    schedule.tick(now=order.ends_at + HOUR, backend=hosts, start=lambda j: None)
    assert fresh(order).status == Order.STATUS_APPROVED  # not completed: the operator decides
    # Refused with a reason: the extension is cancelled (its money to refund), and the
    # window closes at the next tick.
    cancel_order(extension, actor=OPERATOR, reason="the lot goes to maintenance")
    schedule.tick(now=order.ends_at + 2 * HOUR, backend=hosts, start=lambda j: None)
    assert fresh(order).status == Order.STATUS_COMPLETED
    assert fresh(extension).status == Order.STATUS_CANCELLED


@pytest.mark.django_db
def test_cancelling_an_order_cancels_its_pending_extension(
    make_request: RequestFactory, soon: datetime, timing: None
) -> None:
    build_inventory()
    order = paid(make_request, soon)
    extension = place_extension(order, 7, actor=RESEARCHER, now=soon - timedelta(days=1))
    cancel_order(order, actor=OPERATOR, reason="the researcher asked")
    assert fresh(extension).status == Order.STATUS_CANCELLED
    assert not Hold.objects.filter(order=extension, status__in=Hold.COUNTING).exists()


@pytest.mark.django_db
def test_a_late_payment_accepted_after_the_window_ended_prepares_the_extension_on_its_own(
    make_request: RequestFactory, tmp_path: Path, soon: datetime, timing: None
) -> None:
    build_inventory()
    order = paid(make_request, soon)
    services.approve_order(order, actor=OPERATOR)
    extension = place_extension(order, 3, actor=RESEARCHER, now=soon + timedelta(days=1))
    expire_unpaid_holds(now=extension.hold_expires_at + timedelta(seconds=1))
    hosts = SimulatedHost(root=tmp_path / "hosts", clock=Clock(order.ends_at))
    schedule.tick(now=order.ends_at + HOUR, backend=hosts, start=lambda j: None)
    assert fresh(order).status == Order.STATUS_COMPLETED
    with transaction.atomic():
        reinstate_paid(fresh(extension), actor=OPERATOR, reason="late payment accepted")
    services.approve_order(fresh(extension), actor=OPERATOR)
    extension.refresh_from_db()
    assert extension.joined_at is None
    assert fresh(order).ends_at == soon + timedelta(days=3)  # the ended window stays as it was
    (job,) = ProvisioningJob.objects.filter(order=extension)
    assert job.lot_id == order.holds.get().lot_id


@pytest.mark.django_db
def test_an_operator_refusing_a_paid_extension_mails_the_reason_and_the_refund(
    make_request: RequestFactory,
    soon: datetime,
    timing: None,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    build_inventory()
    order = paid(make_request, soon)
    extension = place_extension(order, 7, actor=RESEARCHER, now=soon - timedelta(days=1))
    pay(extension)
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        cancel_order(extension, actor=OPERATOR, reason="the lot goes to maintenance on day 4")
    (message,) = [m for m in mail.outbox if "cancelled" in m.subject]
    assert message.subject.endswith(f"The extension of order {order.reference} is cancelled")
    assert message.to == [order.contact_email]
    assert "the lot goes to maintenance on day 4" in message.body
    assert f"Order {order.reference} keeps its window" in message.body
    assert "sent back to you in full" in message.body
    assert isinstance(message, mail.EmailMultiAlternatives)
    html = str(message.alternatives[0][0])
    assert "the lot goes to maintenance on day 4" in html


@pytest.mark.django_db
def test_a_cancelled_unpaid_order_is_mailed_its_reason_in_its_language(
    make_request: RequestFactory,
    soon: datetime,
    timing: None,
    eager_tasks: None,
    django_capture_on_commit_callbacks: Any,
) -> None:
    build_inventory()
    order = place_order(make_request(starts_at=soon, window_days=3, language="de"))
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        cancel_order(order, actor=OPERATOR, reason="doppelt gebucht")
    (message,) = mail.outbox
    assert order.reference in message.subject
    assert "storniert" in message.subject
    assert "doppelt gebucht" in message.body
    assert "zurückgeschickt" not in message.body  # nothing was paid


@pytest.mark.django_db
def test_a_thirty_day_extension_joined_before_the_start_runs_its_campaign_with_the_order(
    make_request: RequestFactory, tmp_path: Path, soon: datetime, timing: None
) -> None:
    from reservations import campaign

    build_inventory()
    order = paid(make_request, soon)
    services.approve_order(order, actor=OPERATOR)
    day = (order.ends_at + timedelta(days=10)).date()
    extension = place_extension(
        order,
        30,
        actor=RESEARCHER,
        now=soon - timedelta(days=1),
        checkpoints=[{"date": day.isoformat(), "check": "eval loss below 2.1"}],
        abort_criteria="loss diverges twice",
    )
    pay(extension)
    services.approve_order(fresh(extension), actor=OPERATOR)
    assert fresh(extension).status == Order.STATUS_APPROVED  # joined before the window began
    (checkpoint,) = extension.campaign_checkpoints.all()
    clock = Clock(soon - LEAD - HOUR)
    hosts = SimulatedHost(root=tmp_path / "hosts", clock=clock)
    reminded_at: datetime | None = None
    while clock.now <= order.ends_at + timedelta(days=31):
        tick(clock, hosts)
        if campaign.send_checkpoint_reminders(now=clock.now):
            reminded_at = clock.now
        current, joined = fresh(order), fresh(extension)
        # The extension's status follows its order's while its days are the order's.
        if current.status in (Order.STATUS_ACTIVE, Order.STATUS_COMPLETED):
            assert joined.status == current.status, clock.now
        if clock.now == campaign.day_start(day) + HOUR:
            assert joined.status == Order.STATUS_ACTIVE
            recorded = campaign.record_outcome(
                checkpoint, outcome="continue", note="", actor=RESEARCHER, now=clock.now
            )
            assert recorded.outcome == "continue"
        clock.now += HOUR
    assert reminded_at is not None
    assert campaign.reminder_due_at(checkpoint) <= reminded_at < campaign.day_start(day)
    assert fresh(extension).status == Order.STATUS_COMPLETED
    assert fresh(order).ends_at == soon + timedelta(days=33)
