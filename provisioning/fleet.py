"""Fleet health, the operator's view over time (issue 12): each lot's acceptance figures
across its rentals, against its kind's median over all lots, so a card that degrades shows.

From each version-2 report measured on cards (not the CPU stand-in): the matrix product's
share of the datasheet peak (BF16, the lower of the two cards), the HBM bandwidth's share of
the datasheet (the lower card), the all-reduce bus bandwidth at the largest size, and the
failed checks. A lot whose latest figures fall below ACCEPTANCE_DRIFT_SHARE of its kind's
median (of each lot's latest figures) is flagged.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import F
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from provisioning.models import ProvisioningJob

METRICS = ("matmul_share", "hbm_share", "busbw_gbps")
METRIC_LABELS = {
    "matmul_share": _("matrix product"),
    "hbm_share": _("HBM bandwidth"),
    "busbw_gbps": _("all-reduce bus bandwidth"),
}


@dataclass
class Figures:
    job_id: int
    lot_id: int
    kind_id: int
    at: datetime | None
    matmul_share: float | None = None
    hbm_share: float | None = None
    busbw_gbps: float | None = None
    failed: list[str] = field(default_factory=list)

    def get(self, metric: str) -> float | None:
        value: float | None = getattr(self, metric)
        return value


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _lowest_share(checks: list[dict[str, Any]], ident: str) -> float | None:
    shares = [
        value / reference
        for check in checks
        if check.get("id") == ident
        and (value := _number(check.get("value"))) is not None
        and (reference := _number(check.get("reference")))
    ]
    return round(min(shares), 4) if shares else None


def figures_of(row: dict[str, Any]) -> Figures | None:
    """The figures of one job's report (a row of ``_rows``); None when it has none."""
    if not isinstance(row.get("version"), int) or row["version"] < 2 or row.get("stand_in"):
        return None
    acceptance = row.get("acceptance")
    if not isinstance(acceptance, dict):
        return None
    checks = [c for c in acceptance.get("checks") or [] if isinstance(c, dict)]
    busbw = [
        value
        for check in checks
        if check.get("id") == "all_reduce" and (value := _number(check.get("value"))) is not None
    ]
    return Figures(
        job_id=row["pk"],
        lot_id=row["lot_id"],
        kind_id=row["kind_id"],
        at=row.get("ready_at") or row.get("created_at"),
        matmul_share=_lowest_share(checks, "matmul_bf16"),
        hbm_share=_lowest_share(checks, "hbm"),
        busbw_gbps=max(busbw) if busbw else None,
        failed=[str(item) for item in acceptance.get("failed") or []],
    )


def _rows(**filters: Any) -> list[Figures]:
    """Every job's figures, oldest first; only the parts of the reports the figures need."""
    rows = (
        ProvisioningJob.objects.filter(report__isnull=False, **filters)
        .annotate(kind_id=F("lot__host__kind_id"))
        .values(
            "pk",
            "lot_id",
            "kind_id",
            "ready_at",
            "created_at",
            "report__version",
            "report__stand_in",
            "report__acceptance",
        )
        .order_by("created_at", "pk")
    )
    return [
        found
        for row in rows
        if (found := figures_of({key.removeprefix("report__"): v for key, v in row.items()}))
        is not None
    ]


def _median(values: list[float | None]) -> float | None:
    measured = [value for value in values if value is not None]
    return statistics.median(measured) if measured else None


def kind_medians(latest: dict[int, Figures]) -> dict[int, dict[str, float | None]]:
    """Per kind, the median of each metric over its lots' latest figures."""
    by_kind: dict[int, list[Figures]] = {}
    for found in latest.values():
        by_kind.setdefault(found.kind_id, []).append(found)
    return {
        kind: {metric: _median([f.get(metric) for f in lots]) for metric in METRICS}
        for kind, lots in by_kind.items()
    }


def drift(found: Figures, medians: dict[str, float | None], share: float) -> list[str]:
    """The metrics of ``found`` below ``share`` of the kind's median."""
    return [
        metric
        for metric in METRICS
        if (value := found.get(metric)) is not None
        and (median := medians.get(metric))
        and value < share * median
    ]


@dataclass
class Health:
    latest: dict[int, Figures]
    medians: dict[int, dict[str, float | None]]
    share: float

    def flags(self, lot_id: int) -> list[str]:
        found = self.latest.get(lot_id)
        if found is None:
            return []
        return drift(found, self.medians.get(found.kind_id, {}), self.share)

    def flagged(self) -> dict[int, list[str]]:
        """The lots drifting, each with its metrics below the share of its kind's median."""
        return {lot_id: below for lot_id in self.latest if (below := self.flags(lot_id))}

    def describe(self, below: list[str]) -> str:
        return describe(below, self.share)


def describe(below: list[str], share: float | None = None) -> str:
    """The sentence shown for a drifting lot (the list, its page and the desk)."""
    share = settings.ACCEPTANCE_DRIFT_SHARE if share is None else share
    return gettext("below %(share)s of the kind's median: %(metrics)s") % {
        "share": f"{share:.0%}",
        "metrics": ", ".join(str(METRIC_LABELS[metric]) for metric in below),
    }


def health() -> Health:
    """The fleet's latest figures per lot and its kinds' medians (one query)."""
    latest: dict[int, Figures] = {}
    for found in _rows():
        latest[found.lot_id] = found  # oldest first: the last one stays
    return Health(latest, kind_medians(latest), settings.ACCEPTANCE_DRIFT_SHARE)


def lot_history(lot_id: int) -> tuple[list[dict[str, Any]], dict[str, float | None]]:
    """The lot's figures per rental, newest first, each with the metrics below the drift
    share of its kind's median; and those medians."""
    fleet = health()
    found = fleet.latest.get(lot_id)
    medians = fleet.medians.get(found.kind_id, {}) if found else {}
    history = [
        {"figures": row, "below": drift(row, medians, fleet.share)}
        for row in reversed(_rows(lot_id=lot_id))
    ]
    return history, medians
