"""A lot that fails its acceptance is replaced by a spare and the time lost is credited
(issue 33), on a simulated clock with the local backend's host scripts (the sandbox, whose
files show who has an account and keys on which lot): the schedule's tick runs as beat runs
it, its receivers after each commit, and at every tick the access invariant holds."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from django.db import IntegrityError, transaction

from infra.models import FailedReaction
from provisioning import replacement, schedule, services
from provisioning.models import AccessGrant, ProvisioningJob
from reservations import incidents
from reservations.models import Credit, Host, Incident, Lot, Order
from reservations.services import mark_paid, place_order, system
from tests.conftest import RequestFactory, build_inventory
from tests.provisioning import v2_reports
from tests.provisioning.clock import Clock, SimulatedHost
from tests.provisioning.test_access_window_clock import LEAD, check_invariant
from tests.provisioning.test_provisioning import OPERATOR, paid_order

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("eager_tasks")]
HOUR = timedelta(hours=1)


@dataclass
class FailingCards(SimulatedHost):
    """The sandbox's host scripts on a clock, whose benchmark fails the acceptance on the
    lots named in ``failing`` (host name, first card) and passes everywhere else."""

    failing: set[tuple[str, int]] = field(default_factory=set)

    def run_validation(
        self, host: Host, report_name: str, arguments: list[str], *, cards: str
    ) -> str:
        self.benchmarks.append((self.clock.now, report_name, cards))
        first = int(cards.split(",")[0])
        report = (
            v2_reports.failed_acceptance()
            if (host.name, first) in self.failing
            else v2_reports.report()
        )
        out = self.host_root(host) / "reports" / f"{report_name}.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(report))
        return str(out)


def ticking(hosts: FailingCards, clock: Clock, capture: Any) -> Callable[[datetime], schedule.Tick]:
    """One tick of the schedule at ``now``, its jobs run at once on the clock, and the
    receivers of what it announced run after its commits (as on a worker)."""

    def run(job_id: int) -> None:
        services.run_job(job_id, hosts, now=clock.now)

    def tick(now: datetime) -> schedule.Tick:
        clock.now = now
        with capture(execute=True):
            return schedule.tick(now=now, backend=hosts, start=run)

    return tick


def drive(
    tick: Callable[[datetime], schedule.Tick],
    hosts: FailingCards,
    start: datetime,
    end: datetime,
    step: timedelta = HOUR,
) -> None:
    seen: dict[str, datetime] = {}
    now = start
    while now <= end:
        tick(now)
        check_invariant(hosts, now, seen)
        now += step


def approved_on_first_lot(make_request: RequestFactory, **overrides: Any) -> Order:
    order = paid_order(make_request, **overrides)
    services.approve_order(order, actor=OPERATOR)
    return order


def failing_first_lot(tmp_path: Path, clock: Clock) -> FailingCards:
    return FailingCards(root=tmp_path / "hosts", clock=clock, failing={("test-h200", 0)})


def test_a_lot_failing_its_acceptance_before_the_window_moves_to_the_spare_losing_nothing(
    make_request: RequestFactory,
    tmp_path: Path,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.PROVISIONING_PREPARE_LEAD = LEAD
    order = approved_on_first_lot(make_request)
    failed, spare = Lot.objects.filter(host__kind__slug="h200").order_by("gpu_a")
    assert order.holds.get().lot == failed
    clock = Clock(order.starts_at - LEAD)
    hosts = failing_first_lot(tmp_path, clock)
    tick = ticking(hosts, clock, django_capture_on_commit_callbacks)

    mail.outbox.clear()
    drive(tick, hosts, order.starts_at - LEAD, order.starts_at + 2 * HOUR)

    old = ProvisioningJob.objects.get(order=order, lot=failed)
    new = ProvisioningJob.objects.get(order=order, lot=spare)
    assert old.replaced_at is not None
    assert old.status == ProvisioningJob.Status.REVOKED
    assert AccessGrant.objects.get(job=old).closed_at is not None
    assert new.status == ProvisioningJob.Status.READY
    assert isinstance(new.report, dict)
    assert new.report["acceptance"]["passed"] is True  # validated before it opened
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_ACTIVE
    assert order.holds.get(status="booked").lot == spare
    assert Lot.objects.get(pk=failed.pk).status == Lot.Status.MAINTENANCE
    incident = Incident.objects.get(order=order)
    assert incident.lot == failed
    assert incident.replacement == spare
    assert incident.kind == Incident.Kind.ACCEPTANCE
    assert "matmul_bf16" in incident.summary
    # Replaced during the lead, open at the window's start: nothing of the window was lost.
    assert incident.ended_at == order.starts_at
    assert not Credit.objects.exists()
    # The benchmark ran on the spare's cards, after the failed lot's run.
    assert [cards for _at, _name, cards in hosts.benchmarks] == ["0,1", "2,3"]
    # Nothing left of the order on the failed lot's cards; keys on the spare only.
    home = hosts.root / "test-h200" / "home"
    (account,) = [a for a, _c in services.accounts_for(new)]
    assert sorted(p.name for p in home.iterdir()) == [account]
    assert (home / account / ".ssh" / "authorized_keys").read_text().strip()
    replaced_mail = next(m for m in mail.outbox if "replaced" in m.subject)
    assert str(spare) in replaced_mail.body
    assert "files you left on the failed lot's host stay there" in replaced_mail.body
    assert f"ssh -p 22 {account}@127.0.0.1" in replaced_mail.body
    assert not FailedReaction.objects.exists()


def test_a_lot_failing_after_the_window_began_is_credited_until_access_opens_on_the_spare(
    make_request: RequestFactory,
    tmp_path: Path,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.PROVISIONING_PREPARE_LEAD = LEAD
    order = approved_on_first_lot(make_request)
    _failed, spare = Lot.objects.filter(host__kind__slug="h200").order_by("gpu_a")
    # The lot's turn comes only 5 hours into the window (a worker and beat away until then).
    first_tick = order.starts_at + 5 * HOUR
    clock = Clock(first_tick)
    hosts = failing_first_lot(tmp_path, clock)
    tick = ticking(hosts, clock, django_capture_on_commit_callbacks)

    tick(first_tick)  # the failed lot is prepared, fails, is replaced
    incident = Incident.objects.get(order=order)
    assert incident.started_at == first_tick
    assert incident.ended_at is None
    tick(first_tick + HOUR)  # the spare is prepared and validated, access opens on it

    incident.refresh_from_db()
    assert incident.ended_at == first_tick + HOUR
    credit = Credit.objects.get(incident=incident)
    # From the window's start (the lot never passed) to access on the spare: 6 hours of a
    # 3-day, one-lot order.
    assert credit.seconds == 6 * 3600
    assert credit.share == Decimal("0.08333333")  # 6 / 72, to eight places, rounded down
    assert order.total_usd == Decimal("500.00")
    assert credit.value_usd == Decimal("41.67")  # 500 × 6 / 72 = 41.666…
    assert credit.status == Credit.Status.OFFERED
    assert any("6.0 hours credited" in m.subject for m in mail.outbox)
    new = ProvisioningJob.objects.get(order=order, lot=spare)
    assert new.status == ProvisioningJob.Status.READY
    assert not FailedReaction.objects.exists()


def test_with_no_lot_free_the_failed_lot_is_held_and_its_whole_share_credited(
    make_request: RequestFactory,
    tmp_path: Path,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.PROVISIONING_PREPARE_LEAD = LEAD
    build_inventory()
    order = place_order(make_request(lot_count=2, window_days=3))  # both H200 lots: no spare
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="paid")
    services.approve_order(order, actor=OPERATOR)
    clock = Clock(order.starts_at - LEAD)
    hosts = failing_first_lot(tmp_path, clock)
    tick = ticking(hosts, clock, django_capture_on_commit_callbacks)

    drive(tick, hosts, order.starts_at - LEAD, order.ends_at + HOUR, step=3 * HOUR)

    failed = Lot.objects.get(host__name="test-h200", gpu_a=0)
    job = ProvisioningJob.objects.get(order=order, lot=failed)
    assert job.replaced_at is None
    assert Lot.objects.get(pk=failed.pk).status == Lot.Status.ACTIVE  # the operator decides
    order.refresh_from_db()
    assert order.status == Order.STATUS_COMPLETED  # never active: a lot was never delivered
    incident = Incident.objects.get(order=order)
    assert incident.ended_at == order.ends_at
    credit = Credit.objects.get(incident=incident)
    assert credit.seconds == 72 * 3600  # the whole window of that lot
    assert credit.share == Decimal("0.5")  # one of two lots
    assert any(
        "no lot of the kind is free to replace it" in note
        for note in order.events.values_list("reason", flat=True)
    )
    assert not FailedReaction.objects.exists()


def test_the_same_incident_seen_twice_opens_one_incident_and_credits_once(
    make_request: RequestFactory, settings: Any
) -> None:
    order = approved_on_first_lot(make_request)
    lot = order.holds.get().lot
    at = order.starts_at + HOUR
    first, opened = incidents.open_incident(
        order, lot, kind="acceptance", summary="x", at=at, at_acceptance=True
    )
    again, opened_again = incidents.open_incident(order, lot, kind="cards", summary="y", at=at)
    assert opened
    assert not opened_again
    assert again.pk == first.pk
    assert incidents.end_incident(first, at=at + HOUR, why="test") is not None
    assert incidents.end_incident(first, at=at + 2 * HOUR, why="test") is None
    # Even a second credit written behind the service's back is refused by the unique key.
    with pytest.raises(IntegrityError), transaction.atomic():
        Credit.objects.create(
            incident=first, order=order, seconds=1, share=Decimal(0), value_usd=Decimal(0)
        )
    assert Credit.objects.get().seconds == 2 * 3600  # from the window's start
    # The job is replaced once, however often its failure is delivered.
    job = ProvisioningJob.objects.get(order=order)
    ProvisioningJob.objects.filter(pk=job.pk).update(status=ProvisioningJob.Status.HELD)
    assert replacement.after_failure(job.pk, failed=True, now=at) is not None
    assert replacement.after_failure(job.pk, failed=True, now=at) is None
    assert ProvisioningJob.objects.filter(order=order).count() == 2


def test_an_operator_hold_is_no_incident(make_request: RequestFactory) -> None:
    order = approved_on_first_lot(make_request)
    job = ProvisioningJob.objects.get(order=order)
    ProvisioningJob.objects.filter(pk=job.pk).update(status=ProvisioningJob.Status.HELD)
    assert replacement.after_failure(job.pk, failed=False) is None
    assert not Incident.objects.exists()


def test_replacing_can_be_turned_off_and_the_incident_still_opens(
    make_request: RequestFactory, settings: Any
) -> None:
    settings.PROVISIONING_REPLACE_FAILED_LOTS = False
    order = approved_on_first_lot(make_request)
    job = ProvisioningJob.objects.get(order=order)
    ProvisioningJob.objects.filter(pk=job.pk).update(status=ProvisioningJob.Status.HELD)
    assert replacement.after_failure(job.pk, failed=True, now=order.starts_at) is None
    assert Incident.objects.get(order=order).ended_at is None
    assert ProvisioningJob.objects.filter(order=order).count() == 1


def test_a_spare_lot_is_out_of_sale_and_taken_first_by_a_replacement(
    make_request: RequestFactory,
) -> None:
    inventory = build_inventory()
    h200 = inventory.h200_lots
    third = Lot.objects.create(host=h200[0].host, gpu_a=4, gpu_b=5, status=Lot.Status.SPARE)
    order = paid_order(make_request, inventory=False)
    services.approve_order(order, actor=OPERATOR)
    assert order.holds.get().lot != third  # never sold
    job = ProvisioningJob.objects.get(order=order)
    ProvisioningJob.objects.filter(pk=job.pk).update(status=ProvisioningJob.Status.HELD)
    new = replacement.after_failure(job.pk, failed=True, now=order.starts_at)
    assert new is not None
    assert new.lot == third
