"""Fleet health (issue 12): each lot's acceptance figures across its rentals against its
kind's median over all lots; a lot whose latest figures drift below ACCEPTANCE_DRIFT_SHARE
of the median is flagged in the lot list, and its page lists the figures per rental."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from django.test import Client

from accounts.models import User
from provisioning import fleet
from provisioning.models import ProvisioningJob
from reservations.models import Lot
from tests.conftest import RequestFactory
from tests.provisioning import v2_reports
from tests.provisioning.test_operator import approved_job

pytestmark = pytest.mark.django_db


def measured(matmul: float, hbm: float, busbw: float, failed: list[str] | None = None) -> Any:
    report = copy.deepcopy(v2_reports.PASSING)
    for check in report["acceptance"]["checks"]:
        if check["id"] == "matmul_bf16":
            check["value"] = matmul
        elif check["id"] == "hbm":
            check["value"] = hbm
        elif check["id"] == "all_reduce":
            check["value"] = busbw
    report["acceptance"]["failed"] = failed or []
    return report


def rented(make_request: RequestFactory, lot: Lot, report: dict[str, Any], **over: Any) -> None:
    """A past rental of ``lot`` with ``report`` (the job moved onto the lot)."""
    job = approved_job(make_request, inventory=not Lot.objects.exists(), **over)
    ProvisioningJob.objects.filter(pk=job.pk).update(lot=lot, report=report)


@pytest.fixture
def desk(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("operator@example.org", "a-long-pw-1"))
    return client


def test_a_lot_drifting_below_the_kind_median_is_flagged(
    make_request: RequestFactory, desk: Client, settings: Any
) -> None:
    settings.ACCEPTANCE_DRIFT_SHARE = 0.9
    job = approved_job(make_request)
    first = job.lot
    second = Lot.objects.filter(host__kind=first.host.kind).exclude(pk=first.pk).get()
    ProvisioningJob.objects.filter(pk=job.pk).update(report=measured(700, 4.1, 360))
    starts = job.order.starts_at
    for i, (lot, figures) in enumerate(
        [
            (second, measured(705, 4.1, 362)),
            (second, measured(520, 3.2, 361, ["matmul_bf16 (card 0): 53 % of peak"])),
        ],
        start=1,
    ):
        rented(make_request, lot, figures, starts_at=starts + i * (job.order.ends_at - starts))
    stand_in = v2_reports.stand_in()  # the CPU stand-in's figures are never the fleet's
    rented(make_request, first, stand_in, starts_at=starts + 3 * (job.order.ends_at - starts))

    health = fleet.health()
    assert health.flags(second.pk) == ["matmul_share", "hbm_share"]  # 520 vs median 610
    assert health.flags(first.pk) == []
    medians = health.medians[first.host.kind_id]
    assert medians["busbw_gbps"] == pytest.approx(360.5)

    page = desk.get("/admin/reservations/lot/").content.decode()
    assert page.count('data-testid="drift"') == 1
    assert "below 90% of the kind&#x27;s median: matrix product, HBM bandwidth" in page

    lot_page = desk.get(f"/admin/reservations/lot/{second.pk}/change/").content.decode()
    assert 'data-testid="acceptance-history"' in lot_page
    assert "matmul_bf16 (card 0): 53 % of peak" in lot_page
    assert lot_page.count('data-testid="below"') == 2  # the latest rental's two shares
    assert "71 %" in lot_page  # the earlier rental: 705 of 989 TFLOP/s


def test_without_drift_nothing_is_flagged(make_request: RequestFactory, desk: Client) -> None:
    job = approved_job(make_request)
    ProvisioningJob.objects.filter(pk=job.pk).update(report=measured(700, 4.1, 360))
    assert fleet.health().flags(job.lot_id) == []
    page = desk.get("/admin/reservations/lot/").content.decode()
    assert 'data-testid="drift"' not in page
    assert "in line with the kind" in page
