"""Health during the window (issue 33): every lot whose access is open is read on its host
by the probe (validation/benchmark/smi.py, run for real on the sandbox host with the fake
nvidia-smi in its root and the root's kernel log), and a reading outside the kind's limits
opens an incident, replaced at once when the card is gone, after a while when it is only
degraded, and credited when it ends. On the simulated clock, the access invariant checked
at every tick."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.core import mail
from django.db import transaction
from django.urls import reverse
from django.utils.formats import date_format

from infra.models import FailedReaction
from provisioning import health, services
from provisioning.models import AccessGrant, HealthReading, ProvisioningJob
from reservations.models import Credit, Incident, Lot, Order
from reservations.services import mark_paid, place_order, system
from tests.conftest import RequestFactory, build_inventory
from tests.provisioning.clock import Clock
from tests.provisioning.test_access_window_clock import LEAD, check_invariant
from tests.provisioning.test_provisioning import OPERATOR
from tests.provisioning.test_replacement import FailingCards, ticking

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("eager_tasks")]
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
FAKES = Path(__file__).resolve().parent / "fakes"
HOST = "test-h200"


def uuid_of(card: int) -> str:
    return f"GPU-5c4d2c8e-0000-4000-8000-00000000000{card}"  # as the fake nvidia-smi says


def bus_of(card: int) -> str:
    return f"0000:{0x18 + 0x10 * card:02x}:00"  # as the driver's XID lines name a card


class Cards(FailingCards):
    """The sandbox host whose acceptance reads the lot's cards as the fake tool lists them
    (their UUIDs are what health readings must find again)."""

    def run_validation(
        self, host: Any, report_name: str, arguments: list[str], *, cards: str
    ) -> str:
        path = super().run_validation(host, report_name, arguments, cards=cards)
        report = json.loads(Path(path).read_text())
        rows = [
            {"index": int(c), "uuid": uuid_of(int(c)), "ecc.errors.uncorrected.volatile.total": 0}
            for c in cards.split(",")
        ]
        report["telemetry"] = {"source": "nvidia-smi", "before": {"cards": rows}}
        Path(path).write_text(json.dumps(report))
        return path


class Host:
    """The test host's own tools and kernel log, in its sandbox root."""

    def __init__(self, hosts: Cards, name: str = HOST) -> None:
        self.root = hosts.root / name
        self.bin = self.root / "usr" / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        shutil.copy(FAKES / "nvidia-smi", self.bin / "nvidia-smi")
        (self.bin / "nvidia-smi").chmod(0o755)
        self.state({})

    def state(self, state: dict[str, Any]) -> None:
        (self.bin / "nvidia-smi.json").write_text(json.dumps(state))

    def kernel(self, at: datetime, text: str) -> None:
        log = self.root / "var" / "log" / "kernel.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as handle:
            handle.write(f"{at.timestamp():.6f} {HOST} kernel: {text}\n")


Delivered = tuple[Order, Cards, Callable[[datetime], None], dict[str, datetime]]


def open_order(
    make_request: RequestFactory, tmp_path: Path, settings: Any, capture: Any, days: int = 7
) -> Delivered:
    """A one-lot order of ``days`` days on the first H200 lot (the second is free: the
    spare), delivered: its window started and access open. Returns the order, the host,
    one tick (the schedule, then the health check, as beat runs both) and the invariant's
    record."""
    settings.PROVISIONING_PREPARE_LEAD = LEAD
    settings.PROVISIONING_HEALTH_SECONDS = 300
    build_inventory()
    order = place_order(make_request(lot_count=1, window_days=days))
    with transaction.atomic():
        assert mark_paid(order, actor=system("test"), reason="paid")
    services.approve_order(order, actor=OPERATOR)
    clock = Clock(order.starts_at - LEAD)
    hosts = Cards(root=tmp_path / "hosts", clock=clock)
    run_schedule = ticking(hosts, clock, capture)
    seen: dict[str, datetime] = {}

    def tick(now: datetime) -> None:
        run_schedule(now)
        with capture(execute=True):
            health.tick(now=now, backend=hosts)
        check_invariant(hosts, now, seen)

    tick(order.starts_at - LEAD)
    tick(order.starts_at)
    assert ProvisioningJob.objects.get(order=order).status == ProvisioningJob.Status.READY
    return order, hosts, tick, seen


@pytest.fixture
def three_days(
    make_request: RequestFactory,
    tmp_path: Path,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> Delivered:
    """A three-day order delivered on the first H200 lot, the second free (open_order)."""
    return open_order(make_request, tmp_path, settings, django_capture_on_commit_callbacks, days=3)


def the_lots() -> tuple[Lot, Lot]:
    first, spare = Lot.objects.filter(host__kind__slug="h200").order_by("gpu_a")
    return first, spare


def test_an_xid_on_day_two_of_seven_moves_the_booking_to_the_spare_and_credits_the_gap(
    client: Any,
    make_request: RequestFactory,
    tmp_path: Path,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    order, hosts, tick, _seen = open_order(
        make_request, tmp_path, settings, django_capture_on_commit_callbacks
    )
    host = Host(hosts)
    failed, spare = the_lots()
    start = order.starts_at
    now = start
    while now < start + DAY:  # day one: healthy readings, every lot read each tick
        now += 6 * HOUR
        tick(now)
    assert not Incident.objects.exists()
    readings = HealthReading.objects.filter(lot=failed)
    assert readings.count() == 5
    assert all(r.healthy for r in readings)
    assert readings.first().tool == "nvidia-smi"  # type: ignore[union-attr]
    assert [c["uuid"] for c in readings.first().cards] == [uuid_of(0), uuid_of(1)]  # type: ignore[union-attr]

    # Day two, 01:30: the first card falls off the bus (and an application's own error on
    # the second card, which is the job's, not the card's).
    host.kernel(
        start + DAY + 90 * timedelta(minutes=1),
        f"NVRM: Xid (PCI:{bus_of(1)}): 13, pid=7, Graphics Exception",
    )
    host.kernel(
        start + DAY + 91 * timedelta(minutes=1),
        f"NVRM: Xid (PCI:{bus_of(0)}): 79, pid=7, GPU has fallen off the bus.",
    )
    host.kernel(
        start + DAY + 92 * timedelta(minutes=1),
        f"NVRM: Xid (PCI:{bus_of(2)}): 79, pid=9, GPU has fallen off the bus.",
    )
    mail.outbox.clear()
    seen_at = start + DAY + 2 * HOUR
    tick(seen_at)

    incident = Incident.objects.get(order=order)
    assert incident.lot == failed
    assert incident.kind == Incident.Kind.CARDS
    assert incident.started_at == seen_at
    assert not incident.at_acceptance
    assert "fell off the bus (XID 79)" in incident.summary
    assert "XID 13" not in incident.summary  # the application's error is not judged
    assert bus_of(2) not in incident.summary  # another tenant's card on the same host
    assert [e["code"] for e in incident.evidence["xid"]] == [13, 79]
    # Replaced at once: the booking is on the spare, the failed lot in maintenance.
    assert incident.replacement == spare
    assert order.holds.get(status="booked").lot == spare
    assert Lot.objects.get(pk=failed.pk).status == Lot.Status.MAINTENANCE
    old = ProvisioningJob.objects.get(order=order, lot=failed)
    assert old.replaced_at == seen_at
    replaced_mail = next(m for m in mail.outbox if "replaced" in m.subject)
    assert (
        "stays reachable with your keys until 60 minutes after access opens" in replaced_mail.body
    )
    # Still reachable for copying files off it until access opens on the spare, and after.
    account = old.accounts[0]
    keys = hosts.root / HOST / "home" / account / ".ssh" / "authorized_keys"
    assert keys.read_text().strip()

    page = client.get(reverse("pages:order", args=[order.reference, order.secret]))
    text = page.content.decode()
    assert "Seen by the health check" in text
    assert "Your booking moved to" in text
    tick(seen_at + HOUR)  # the spare is prepared, validated, access opens on it
    text = client.get(reverse("pages:order", args=[order.reference, order.secret])).content
    # Reachable until an hour after access opened on the spare.
    until = date_format(seen_at + 2 * HOUR, "DATETIME_FORMAT")
    assert f"stays reachable with your keys until {until} (UTC)" in text.decode()
    new = ProvisioningJob.objects.get(order=order, lot=spare)
    assert new.status == ProvisioningJob.Status.READY
    assert AccessGrant.objects.get(job=new).keys_at == seen_at + HOUR
    incident.refresh_from_db()
    assert incident.ended_at == seen_at + HOUR
    credit = Credit.objects.get(incident=incident)
    assert credit.seconds == 3600  # from the reading that saw it to access on the spare
    assert credit.share == Decimal("0.00595238")  # 1 / 168 of the one lot's 7 days
    assert credit.value_usd == Decimal("6.73")  # 1130 USD × 1 / 168
    credited = next(m for m in mail.outbox if "credited" in m.subject)
    assert "Access is open on the lot that replaced it" in credited.body
    assert keys.read_text().strip()  # the grace: an hour after access opened on the spare
    assert AccessGrant.objects.get(job=old).closed_at is None

    tick(seen_at + 2 * HOUR)  # the grace is over: the failed lot's access is removed
    old.refresh_from_db()
    assert old.status == ProvisioningJob.Status.REVOKED
    assert AccessGrant.objects.get(job=old).closed_at == seen_at + 2 * HOUR
    assert not (hosts.root / HOST / "home" / account).exists()
    # The spare is read from then on; its cards are healthy.
    now = seen_at + 2 * HOUR
    while now < order.ends_at + HOUR:
        now += 12 * HOUR
        tick(now)
    assert HealthReading.objects.filter(lot=spare).exists()
    assert all(r.healthy for r in HealthReading.objects.filter(lot=spare))
    assert Incident.objects.count() == 1
    assert Order.objects.get(pk=order.pk).status == Order.STATUS_COMPLETED
    assert not FailedReaction.objects.exists()


def test_a_hot_card_is_an_incident_that_ends_when_it_cools_and_is_credited(
    admin_client: Any, three_days: Delivered, settings: Any
) -> None:
    order, hosts, tick, _seen = three_days
    host = Host(hosts)
    failed, _spare = the_lots()
    t = order.starts_at + 3 * HOUR
    host.state(
        {
            "values": {
                "1": {"temperature.gpu": 96, "clocks_event_reasons.active": "0x0000000000000040"}
            }
        }
    )
    tick(t)
    incident = Incident.objects.get(order=order)
    assert incident.kind == Incident.Kind.THERMAL
    assert "card 1 at 96 °C (limit 90 °C)" in incident.summary
    assert "hw_thermal_slowdown" in incident.summary
    assert incident.replacement is None  # degraded: not moved at once
    assert Lot.objects.get(pk=failed.pk).status == Lot.Status.ACTIVE

    host.state({})
    tick(t + 20 * timedelta(minutes=1))
    incident.refresh_from_db()
    assert incident.ended_at == t + 20 * timedelta(minutes=1)
    assert Credit.objects.get(incident=incident).seconds == 20 * 60
    assert ProvisioningJob.objects.filter(order=order).count() == 1  # never replaced
    # Another reading within the interval is not taken (each lot once per interval).
    before = HealthReading.objects.count()
    tick(t + 21 * timedelta(minutes=1))
    assert HealthReading.objects.count() == before
    # The lot's page on the desk shows its readings and the incident.
    page = admin_client.get(f"/admin/reservations/lot/{failed.pk}/change/").content.decode()
    assert "Health during the window" in page
    assert "1: 96.0 °C, 64, 0.0" in page  # card 1: 96 °C, mask 0x40, no ECC errors
    assert "card 1 at 96 °C (limit 90 °C)" in page
    assert "stand-in (no GPU tool)" in page  # the first reading, before the tool was there


def test_a_card_that_stays_degraded_past_the_limit_is_replaced(
    three_days: Delivered, settings: Any
) -> None:
    order, hosts, tick, _seen = three_days
    settings.PROVISIONING_HEALTH_REPLACE_AFTER = timedelta(minutes=30)
    _failed, spare = the_lots()
    Host(hosts).state({"values": {"0": {"remapped_rows.pending": "Yes"}}})
    t = order.starts_at + HOUR
    tick(t)
    incident = Incident.objects.get(order=order)
    assert incident.kind == Incident.Kind.ECC
    assert incident.replacement is None
    tick(t + 10 * timedelta(minutes=1))
    assert Incident.objects.get(pk=incident.pk).replacement is None  # 10 minutes: not yet
    tick(t + 30 * timedelta(minutes=1))
    assert Incident.objects.get(pk=incident.pk).replacement == spare
    assert Incident.objects.count() == 1  # the same incident, seen by three ticks


def test_a_card_missing_from_the_tool_is_replaced_at_once(
    three_days: Delivered, settings: Any
) -> None:
    order, hosts, tick, _seen = three_days
    _failed, spare = the_lots()
    Host(hosts).state({"missing": [1]})
    tick(order.starts_at + HOUR)
    incident = Incident.objects.get(order=order)
    assert incident.kind == Incident.Kind.CARDS
    assert "card 1 is not listed by nvidia-smi" in incident.summary
    assert "Unable to determine the device handle" in incident.summary
    assert incident.replacement == spare


def test_a_host_not_reached_twice_in_a_row_is_an_incident_from_the_first_miss(
    three_days: Delivered, settings: Any
) -> None:
    order, hosts, tick, _seen = three_days
    settings.PROVISIONING_HEALTH_REPLACE_AFTER = timedelta(hours=2)
    t = order.starts_at + HOUR
    hosts.down = (t, t + 11 * timedelta(minutes=1))
    tick(t)
    assert not Incident.objects.exists()  # once is a hiccup
    assert (
        HealthReading.objects.filter(healthy=False, error__contains="connection refused").count()
        == 1
    )
    tick(t + 10 * timedelta(minutes=1))
    incident = Incident.objects.get(order=order)
    assert incident.kind == Incident.Kind.UNREACHABLE
    assert incident.started_at == t
    tick(t + 20 * timedelta(minutes=1))  # back: healthy again, the 20 minutes credited
    incident.refresh_from_db()
    assert incident.ended_at == t + 20 * timedelta(minutes=1)
    assert Credit.objects.get(incident=incident).seconds == 20 * 60


def test_a_changed_card_or_grown_ecc_counter_is_fatal_and_a_stand_in_judges_the_log_only() -> None:
    accepted = {0: {"index": 0, "uuid": uuid_of(0)}, 1: {"index": 1, "uuid": uuid_of(1)}}
    healthy = {
        "tool": "nvidia-smi",
        "cards": [
            {"index": 0, "uuid": uuid_of(0), "temperature.gpu": 40.0, "throttle_reasons": 0x4},
            {"index": 1, "uuid": uuid_of(1), "ecc.errors.uncorrected.volatile.total": 2.0},
        ],
        "xid": [],
    }

    def judged(reading: dict[str, Any], previous: dict[int, Any] | None = None) -> list[str]:
        findings = health.judge(
            reading, cards=[0, 1], accepted=accepted, previous=previous or {}, max_temperature=90
        )
        return [f"{f.code}{'!' if f.fatal else ''}" for f in findings]

    # The power cap (0x4) is the job's doing, not the card's; 2 uncorrected errors that were
    # already there at the previous reading did not grow.
    assert judged(healthy, {1: {"ecc.errors.uncorrected.volatile.total": 2.0}}) == []
    assert judged(healthy) == ["ecc_uncorrected!"]  # grown from acceptance's none
    swapped = json.loads(json.dumps(healthy))
    swapped["cards"][0]["uuid"] = "GPU-another"
    assert judged(swapped, {1: healthy["cards"][1]}) == ["card_changed!"]
    stand_in = {"tool": "stand-in", "cards": [{"index": 0}], "xid": []}
    assert judged(stand_in) == []
    stand_in["xid"] = [{"code": 94, "line": "NVRM: Xid (PCI:0000:18:00): 94, ..."}]
    assert judged(stand_in) == ["xid_94"]
