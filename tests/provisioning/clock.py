"""Driving provisioning on a simulated clock, as the schedule (provisioning.schedule) would."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from provisioning import access, services
from provisioning.backends import Backend, HostUnreachable, LocalBackend
from provisioning.models import ProvisioningJob
from reservations.models import Host


def run_at_start(
    job_id: int, backend: Backend | None = None, *, at: datetime | None = None
) -> ProvisioningJob:
    """The job's turn at its window's start (or ``at``): its grant opens if the lot is
    free, and its steps run on that clock."""
    job = ProvisioningJob.objects.select_related("order").get(pk=job_id)
    now = at or job.order.starts_at
    access.open_grant(job, now=now)
    return services.run_job(job_id, backend, now=now)


class WorkerKilled(BaseException):
    """The worker process died mid-job: nothing after this point ran or was recorded."""


@dataclass
class Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now


@dataclass
class SimulatedHost(LocalBackend):
    """The local backend's host scripts, on a clock: the host can be down for a while, a
    worker can die before one step, and the benchmark is recorded (when, which cards)."""

    root: Path = Path()
    clock: Clock = field(default_factory=lambda: Clock(datetime.min))
    down: tuple[datetime, datetime] | None = None
    down_hosts: set[str] = field(default_factory=set)
    """Hosts that refuse every connection, whatever the time."""
    kill_before: set[tuple[str, str]] = field(default_factory=set)
    benchmarks: list[tuple[datetime, str, str]] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    """(script, account) of every script that ran on the host."""

    def script(self, host: Host, name: str, *args: str) -> None:
        if (self.down and self.down[0] <= self.clock.now < self.down[1]) or (
            host.name in self.down_hosts
        ):
            raise HostUnreachable(f"{host.name}: connection refused")
        if (name, args[0]) in self.kill_before:
            self.kill_before.discard((name, args[0]))
            raise WorkerKilled
        super().script(host, name, *args)
        self.calls.append((name, args[0]))

    def stop_validation(self, host: Host, report_name: str) -> None:
        self.calls.append(("stop_validation", report_name))
        super().stop_validation(host, report_name)

    def run_validation(
        self, host: Host, report_name: str, arguments: list[str], *, cards: str
    ) -> str:
        self.benchmarks.append((self.clock.now, report_name, cards))
        out = self.host_root(host) / "reports" / f"{report_name}.json"
        out.parent.mkdir(exist_ok=True)
        devices = {"ok": True, "cards": [int(c) for c in cards.split(",")], "problem": ""}
        out.write_text(json.dumps({"version": 1, "devices": devices, "verdict": {"answer": "-"}}))
        return str(out)

    def read_health(self, host: Host, cards: str, since: float, until: float) -> dict[str, Any]:
        if (self.down and self.down[0] <= self.clock.now < self.down[1]) or (
            host.name in self.down_hosts
        ):
            raise HostUnreachable(f"{host.name}: connection refused")
        self.calls.append(("health", cards))
        return super().read_health(host, cards, since, until)
