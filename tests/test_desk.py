"""The operator desk's home page, "Today": each section lists an item while its condition
holds and drops it once the operator (or the system) has handled it."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings
from django.db import transaction
from django.test import Client
from django.utils import timezone

from accounts.models import User
from desk import today as desk
from payments.models import Chain, DepositAddress, Invoice
from provisioning.models import ProvisioningJob
from reservations.models import Host, Order
from reservations.services import cancel_order, mark_paid, place_order, system
from tests.conftest import Inventory, RequestFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("op@example.org", "a-long-password-1"))
    return client


def section(key: str) -> desk.Section:
    found = {s.key: s for s in desk.sections()}
    return found[key]


def labels(key: str) -> list[str]:
    return [item.label for item in section(key).items]


def paid(make_request: RequestFactory, **overrides: object) -> Order:
    order = place_order(make_request(lot_count=1, window_days=3, **overrides))
    assert mark_paid(order, actor=system("test"), reason="paid")
    order.refresh_from_db()
    return order


def test_the_desk_opens_on_today_with_every_section_and_the_models_below(
    operator: Client, inventory: Inventory
) -> None:
    response = operator.get("/admin/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<h1>Today</h1>" in html
    for key in (
        "approvals",
        "payments",
        "refunds",
        "provisioning",
        "incidents",
        "drift",
        "host_keys",
        "revocations",
        "campaigns",
        "chains",
        "opening",
        "closing",
    ):
        assert f'id="today-{key}"' in html
    assert html.count("Nothing waiting.") == 12
    assert "Reservations" in html  # the usual list of models is still there


def test_the_desk_is_for_staff_only(client: Client) -> None:
    response = client.get("/admin/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_a_paid_order_waits_for_approval_until_it_is_approved_or_cancelled(
    operator: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = paid(make_request)
    assert labels("approvals") == [order.reference]
    html = operator.get("/admin/").content.decode()
    assert re.search(
        rf'href="/admin/reservations/order/{order.pk}/change/">{order.reference}', html
    )
    cancel_order(order, actor=system("test"), reason="withdrawn")
    assert labels("approvals") == []


def test_a_window_opening_tomorrow_and_one_closing_today_are_listed(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    soon = paid(make_request, starts_at=timezone.now() + timedelta(hours=20))
    later = paid(make_request, starts_at=timezone.now() + timedelta(days=10))
    assert labels("opening") == [soon.reference]
    Order.objects.filter(pk=later.pk).update(
        starts_at=timezone.now() - timedelta(days=2), ends_at=timezone.now() + timedelta(hours=3)
    )
    assert labels("closing") == [later.reference]
    Order.objects.filter(pk=later.pk).update(status=Order.STATUS_COMPLETED)
    assert labels("closing") == []


def test_a_late_payment_waits_for_a_decision_until_it_is_refunded(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    chain = Chain.objects.create(chain_id=777, name="Test chain", rpc_url="http://127.0.0.1:1")
    usdc = chain.assets.create(symbol="USDC", contract_address="0x" + "1" * 40, decimals=6)
    order = place_order(make_request(lot_count=1, window_days=3))
    now = timezone.now()
    invoice = Invoice.objects.create(
        order=order,
        asset=usdc,
        deposit_address=DepositAddress.objects.create(
            chain=chain, index=1, address="0x" + "2" * 40
        ),
        amount_due=Decimal(500_000_000),
        usd_due=Decimal(500),
        usd_per_unit=Decimal(1),
        created_block=1,
        expires_at=now - timedelta(hours=1),
        monitor_until=now + timedelta(hours=20),
        status=Invoice.STATUS_EXPIRED,
        exception=Invoice.EXCEPTION_PAID_LATE,
        amount_seen=Decimal(500_000_000),
        amount_confirmed=Decimal(500_000_000),
    )
    assert labels("payments") == [f"{order.reference} · 500 USDC"]
    assert "paid after expiry" in section("payments").items[0].detail
    Invoice.objects.filter(pk=invoice.pk).update(status=Invoice.STATUS_INVALID)  # refunded
    assert labels("payments") == []


def test_a_refund_due_is_listed_until_nothing_is_owed(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    chain = Chain.objects.create(chain_id=778, name="Test chain", rpc_url="http://127.0.0.1:1")
    usdc = chain.assets.create(symbol="USDC", contract_address="0x" + "3" * 40, decimals=6)
    order = paid(make_request)
    now = timezone.now()
    invoice = Invoice.objects.create(
        order=order,
        asset=usdc,
        deposit_address=DepositAddress.objects.create(
            chain=chain, index=2, address="0x" + "4" * 40
        ),
        amount_due=Decimal(500_000_000),
        usd_due=Decimal(500),
        usd_per_unit=Decimal(1),
        created_block=1,
        expires_at=now + timedelta(hours=1),
        monitor_until=now + timedelta(hours=20),
        status=Invoice.STATUS_SETTLED,
        amount_seen=Decimal(600_000_000),
        amount_confirmed=Decimal(600_000_000),
        amount_to_refund=Decimal(100_000_000),
    )
    assert labels("refunds") == [f"{order.reference} · 100 USDC"]
    assert "address" in section("refunds").items[0].detail
    Invoice.objects.filter(pk=invoice.pk).update(
        amount_to_refund=0, amount_refunded=Decimal(100_000_000)
    )
    assert labels("refunds") == []


def test_a_failed_job_and_a_refused_host_key_wait_until_handled(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    order = paid(make_request)
    lot = order.holds.get().lot
    job = ProvisioningJob.objects.create(
        order=order, lot=lot, status=ProvisioningJob.Status.FAILED, error="ssh: connection refused"
    )
    assert labels("provisioning") == [f"{order.reference} · {lot}"]
    assert section("provisioning").items[0].detail == "ssh: connection refused"
    ProvisioningJob.objects.filter(pk=job.pk).update(status=ProvisioningJob.Status.PENDING)
    assert labels("provisioning") == []

    host = lot.host
    Host.objects.filter(pk=host.pk).update(
        ssh_host_key_presented="ssh-ed25519 AAAA other", ssh_host_key_refused_at=timezone.now()
    )
    assert labels("host_keys") == [host.name]
    Host.objects.filter(pk=host.pk).update(ssh_host_key_refused_at=None)
    assert labels("host_keys") == []


def test_a_chain_with_a_deep_reorganisation_or_no_recent_scan_needs_a_look(db: None) -> None:
    chain = Chain.objects.create(
        chain_id=779, name="Test chain", rpc_url="http://127.0.0.1:1", last_scan_at=timezone.now()
    )
    assert labels("chains") == []
    Chain.objects.filter(pk=chain.pk).update(
        deep_reorg_at=timezone.now(), deep_reorg_note="block 9 changed"
    )
    assert labels("chains") == [str(chain)]
    assert "block 9 changed" in section("chains").items[0].detail
    Chain.objects.filter(pk=chain.pk).update(deep_reorg_at=None)
    assert labels("chains") == []
    Chain.objects.filter(pk=chain.pk).update(last_scan_at=timezone.now() - timedelta(hours=1))
    assert labels("chains") == [str(chain)]


# --------------------------------------------------------------------------- the timeline


def bars_of(timeline: object, lot_pk: int) -> list[tuple[str, float, float, str, float]]:
    from reservations.timeline import Timeline

    assert isinstance(timeline, Timeline)
    for group in timeline.groups:
        for row in group.rows:
            if row.lot.pk == lot_pk:
                return [(b.kind, b.x, b.width, b.url, b.turnaround) for b in row.bars]
    raise AssertionError(f"lot {lot_pk} not on the timeline")


def test_the_timeline_draws_each_booking_where_its_window_is(
    inventory: Inventory, make_request: RequestFactory
) -> None:
    from reservations import timeline
    from reservations.models import Lot

    now = timezone.now()
    start = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    held = place_order(
        make_request(lot_count=1, window_days=3, starts_at=start + timedelta(days=2))
    )
    booked = paid(make_request, starts_at=start + timedelta(days=10))
    drawn = timeline.build(now=now, days=30)
    assert drawn.today_x == pytest.approx(
        ((now - (start - timedelta(days=7))).total_seconds() / 86400) * timeline.DAY_WIDTH, abs=0.1
    )
    day = timeline.DAY_WIDTH
    held_lot = held.holds.get().lot
    bars = bars_of(drawn, held_lot.pk)
    window = [b for b in bars if b[0] == "held"]
    # A week back is x = 0: the window starts 9 days later and lasts 3 days; its turnaround
    # is the bar's grey right edge, right after it.
    turnaround = settings.RESERVATION_TURNAROUND.total_seconds() / 86400 * day
    url = f"/admin/reservations/order/{held.pk}/change/"
    assert window == [("held", 9 * day, 3 * day, url, pytest.approx(turnaround, abs=0.1))]
    booked_lot = booked.holds.get().lot
    assert [b[:3] for b in bars_of(drawn, booked_lot.pk) if b[0] == "booked"] == [
        ("booked", 17 * day, 3 * day)
    ]
    # A lot in maintenance: one bar over the whole range; a retired one is not drawn.
    spare = Lot.objects.exclude(pk__in=[held_lot.pk, booked_lot.pk]).first()
    assert spare is not None
    Lot.objects.filter(pk=spare.pk).update(status=Lot.Status.MAINTENANCE)
    assert [b[0] for b in bars_of(timeline.build(now=now, days=30), spare.pk)] == ["maintenance"]
    Lot.objects.filter(pk=spare.pk).update(status=Lot.Status.RETIRED)
    with pytest.raises(AssertionError):
        bars_of(timeline.build(now=now, days=30), spare.pk)
    # A released hold leaves the timeline.
    cancel_order(held, actor=system("test"), reason="withdrawn")
    left = bars_of(timeline.build(now=now, days=30), held_lot.pk)
    assert [b for b in left if b[3] == url] == []


def test_the_timeline_page_filters_by_kind_and_links_each_bar_to_its_order(
    operator: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    order = place_order(make_request(lot_count=1, window_days=3))
    response = operator.get("/admin/timeline/?days=30")
    assert response.status_code == 200
    html = response.content.decode()
    assert f'href="/admin/reservations/order/{order.pk}/change/"' in html
    assert f"{order.reference} · held until" in html  # the hover and focus label
    assert '<label for="tl-kind">' in html
    kind = order.kind.slug
    other = "mi300x" if kind != "mi300x" else "h200"
    assert order.reference in operator.get(f"/admin/timeline/?kind={kind}").content.decode()
    assert order.reference not in operator.get(f"/admin/timeline/?kind={other}").content.decode()
    assert operator.get("/admin/").content.decode().count('href="/admin/timeline/"') == 1


def test_a_lot_drifting_below_its_kind_waits_until_its_figures_are_back_in_line(
    operator: Client, make_request: RequestFactory, settings: object
) -> None:
    from provisioning.models import ProvisioningJob
    from reservations.models import Lot
    from tests.provisioning.test_fleet_health import measured, rented
    from tests.provisioning.test_operator import approved_job

    settings.ACCEPTANCE_DRIFT_SHARE = 0.9  # type: ignore[attr-defined]
    job = approved_job(make_request)
    ProvisioningJob.objects.filter(pk=job.pk).update(report=measured(700, 4.1, 360))
    other = Lot.objects.filter(host__kind=job.lot.host.kind).exclude(pk=job.lot.pk).get()
    later = job.order.starts_at + (job.order.ends_at - job.order.starts_at)
    rented(make_request, other, measured(500, 4.1, 361), starts_at=later)
    assert labels("drift") == [str(other)]
    assert section("drift").items[0].detail == "below 90% of the kind's median: matrix product"
    assert section("drift").items[0].url == f"/admin/reservations/lot/{other.pk}/change/"
    listed = operator.get(section("drift").all_url).content.decode()
    assert f"/admin/reservations/lot/{other.pk}/change/" in listed
    assert f"/admin/reservations/lot/{job.lot.pk}/change/" not in listed

    ProvisioningJob.objects.filter(lot=other).update(report=measured(702, 4.1, 361))
    assert labels("drift") == []


def test_the_timeline_shows_a_page_of_hosts_at_a_time_each_host_on_exactly_one_page(
    inventory: Inventory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reservations import timeline
    from reservations.models import Lot

    now = timezone.now()

    def hosts_and_lots(drawn: timeline.Timeline) -> tuple[list[str], list[int]]:
        return [g.title for g in drawn.groups], [r.lot.pk for g in drawn.groups for r in g.rows]

    everything = timeline.build(now=now, days=30)
    assert (everything.page, everything.pages, everything.hosts) == (1, 1, 3)
    monkeypatch.setattr(timeline, "HOSTS_PER_PAGE", 2)
    first, second = (timeline.build(now=now, days=30, page=n) for n in (1, 2))
    assert [(p.page, p.pages, p.hosts) for p in (first, second)] == [(1, 2, 3), (2, 2, 3)]
    # Whole hosts, in the order of the one-page timeline: none lost, none twice.
    assert [len(first.groups), len(second.groups)] == [2, 1]
    hosts, lots = hosts_and_lots(everything)
    assert hosts_and_lots(first)[0] + hosts_and_lots(second)[0] == hosts
    assert hosts_and_lots(first)[1] + hosts_and_lots(second)[1] == lots
    assert sorted(lots) == sorted(Lot.objects.values_list("pk", flat=True))
    # A page out of range is the nearest one; a filter to one host is one page.
    assert timeline.build(now=now, days=30, page=0).page == 1
    assert hosts_and_lots(timeline.build(now=now, days=30, page=99)) == hosts_and_lots(second)
    one = timeline.build(now=now, days=30, host="test-h200", page=2)
    assert (one.page, one.pages, one.hosts, len(one.groups)) == (1, 1, 1, 1)


def test_the_timeline_page_links_keep_the_filters_and_mark_the_current_page(
    operator: Client,
    inventory: Inventory,
    make_request: RequestFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reservations import timeline

    monkeypatch.setattr(timeline, "HOSTS_PER_PAGE", 1)
    order = place_order(make_request(lot_count=1, window_days=3))  # on an H200 lot
    pages = {}
    for n in (1, 2, 3):
        response = operator.get(f"/admin/timeline/?days=30&page={n}")
        assert response.status_code == 200
        pages[n] = response.content.decode()
    on = [n for n, html in pages.items() if f"/admin/reservations/order/{order.pk}/change/" in html]
    assert len(on) == 1  # the order's host is on one page, its bar with it
    second = pages[2]
    assert '<nav class="tl-pages" aria-label="Pages of the timeline">' in second
    assert "Hosts 2\N{EN DASH}2 of 3" in second
    for n in (1, 2, 3):  # each page a link that keeps the range
        assert f'href="?days=30&amp;page={n}"' in second
    assert 'href="?days=30&amp;page=2" aria-current="page">2</a>' in second
    assert 'href="?days=30&amp;page=1" rel="prev"' in second
    assert 'href="?days=30&amp;page=3" rel="next"' in second
    assert 'rel="prev"' not in pages[1]
    assert 'rel="next"' not in pages[3]
    kept = operator.get("/admin/timeline/?kind=h200&host=&days=90&page=1").content.decode()
    assert '<nav class="tl-pages"' not in kept  # one H200 host: one page, no page links
    assert order.reference in kept
    assert operator.get("/admin/timeline/?page=junk").status_code == 200


def test_the_timeline_page_echoes_only_its_filters_and_is_compressed_for_a_browser(
    operator: Client, inventory: Inventory, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gzip

    from reservations import timeline

    monkeypatch.setattr(timeline, "HOSTS_PER_PAGE", 1)
    plain = operator.get("/admin/timeline/?days=30&page=2&guess=D0001")
    html = plain.content.decode()
    assert 'href="?days=30&amp;page=3"' in html
    assert "guess" not in html  # nothing else from the address
    assert "D0001" not in html
    assert not plain.has_header("Content-Encoding")
    packed = operator.get("/admin/timeline/?days=30&page=2", headers={"accept-encoding": "gzip"})
    assert packed["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in packed["Vary"]
    page = gzip.decompress(packed.content).decode()
    assert 'aria-current="page">2</a>' in page
    assert len(packed.content) < len(page)


def test_the_timeline_places_its_tracks_and_today_in_pixels_in_every_language(
    operator: Client, inventory: Inventory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reservations import timeline

    monkeypatch.setattr(timeline, "HOSTS_PER_PAGE", 1)
    # German and French write 3008,0 for 3008.0: a CSS length with a comma is no length.
    html = operator.get("/admin/timeline/?days=30", headers={"accept-language": "de"})
    text = html.content.decode()
    assert 'lang="de"' in text
    assert 'aria-label="Seiten des Belegungsplans"' in text
    assert "Hosts 1\N{EN DASH}1 von 3" in text
    assert 'rel="next">Weiter ' in text
    tracks = re.findall(r'class="tl-(?:track|days)" style="width:([^"]*)px"', text)
    today = re.findall(r'class="tl-today" style="left:([^"]*)px"', text)
    assert tracks
    assert today
    assert all(re.fullmatch(r"\d+(\.\d+)?", value) for value in tracks + today), tracks + today


def test_today_counts_a_short_section_from_its_rows_and_a_long_one_in_full(
    inventory: Inventory,
    make_request: RequestFactory,
    soon: datetime,
    django_assert_max_num_queries: Any,
) -> None:
    # Nothing waiting: one query per section for its rows, no count queries on top (issue 15).
    with django_assert_max_num_queries(15):  # 14 sections and the failing webhooks
        assert all(s.count == 0 for s in desk.sections() if s.key != "chains")
    for week in range(desk.SHOWN + 1):
        paid(make_request, starts_at=soon + timedelta(days=7 * week))
    approvals = section("approvals")
    assert approvals.count == desk.SHOWN + 1  # more than shown: counted in full
    assert len(approvals.items) == desk.SHOWN


def test_the_timeline_bands_the_time_a_lot_was_not_usable_and_links_the_incident(
    operator: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    from django.db.backends.postgresql.psycopg_any import (  # type: ignore[import-untyped]
        DateTimeTZRange,
    )
    from django.db.models import F

    from reservations import incidents, timeline
    from reservations.models import Hold

    now = timezone.now()
    start = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    order = paid(make_request, starts_at=start + timedelta(days=2))
    # Its window began four days earlier than booked (as if booked then): shifted alike.
    shift = timedelta(days=4)
    Order.objects.filter(pk=order.pk).update(
        starts_at=F("starts_at") - shift, ends_at=F("ends_at") - shift
    )
    hold = order.holds.get()
    Hold.objects.filter(pk=hold.pk).update(
        period=DateTimeTZRange(hold.period.lower - shift, hold.period.upper - shift)
    )
    order.refresh_from_db()
    lot = hold.lot
    ended, _ = incidents.open_incident(
        order, lot, kind="xid", summary="the card fell off the bus", at=start - timedelta(days=1)
    )
    incidents.end_incident(ended, at=start - timedelta(hours=12), why="test")
    still, _ = incidents.open_incident(
        order, lot, kind="thermal", summary="card 1 at 96 °C", at=start - timedelta(hours=2)
    )
    day = timeline.DAY_WIDTH
    bands = [b for b in bars_of(timeline.build(now=now, days=30), lot.pk) if b[0] == "incident"]
    # A week back to the range's start: the ended one from day 6 for half a day, the open
    # one from 22:00 the day before to now.
    first, second = bands
    assert first[:4] == (
        "incident",
        6 * day,
        0.5 * day,
        f"/admin/reservations/incident/{ended.pk}/change/",
    )
    assert second[3] == f"/admin/reservations/incident/{still.pk}/change/"
    assert second[1] == pytest.approx((7 - 2 / 24) * day, abs=0.1)
    hours_open = (now - (start - timedelta(hours=2))).total_seconds() / 3600
    assert second[2] == pytest.approx(hours_open / 24 * day, abs=0.2)
    html = operator.get("/admin/timeline/?days=30").content.decode()
    assert f"{order.reference} · overheating or throttled · " in html
    assert "→ (not over) · card 1 at 96 °C" in html
    assert html.count('class="bar bar-incident"') == 2


def test_the_timeline_shows_an_extension_as_the_continuation_of_its_order(
    operator: Client, inventory: Inventory, make_request: RequestFactory
) -> None:
    from provisioning.services import approve_order
    from reservations import timeline
    from reservations.extensions import place_extension
    from tests.provisioning.test_provisioning import OPERATOR

    now = timezone.now()
    start = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    order = paid(make_request, starts_at=start + timedelta(days=2))
    approve_order(order, actor=OPERATOR)
    extension = place_extension(order, 7, actor=system("test"), now=now)
    lot = order.holds.get().lot
    # Placed, not joined yet: its own bar, marked as continuing the order before it.
    html = operator.get("/admin/timeline/?days=30").content.decode()
    assert f"{extension.reference} · extension of {order.reference} · held until" in html
    (bar,) = re.findall(rf'<a class="([^"]+)" href="[^"]*/order/{extension.pk}/change/"', html)
    assert bar == "bar bar-held bar-continues"
    with transaction.atomic():
        assert mark_paid(extension, actor=system("test"), reason="paid")
    approve_order(Order.objects.get(pk=extension.pk), actor=OPERATOR)
    # Joined: one bar for the order over both windows, the seam where the extension begins.
    day = timeline.DAY_WIDTH
    bars = bars_of(timeline.build(now=now, days=30), lot.pk)
    url = f"/admin/reservations/order/{order.pk}/change/"
    assert [b[:4] for b in bars if b[0] != "turnaround"] == [
        ("booked", 9 * day, 10 * day, url),
        ("joined", 12 * day, 0, url),
    ]
    assert not [b for b in bars if f"/{extension.pk}/" in b[3]]
    html = operator.get("/admin/timeline/?days=30").content.decode()
    assert f"{order.reference} · extended by {extension.reference} from" in html
    assert 'class="tl-joint"' in html
