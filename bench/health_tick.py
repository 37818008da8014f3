"""Health during the window: one tick over many open lots, and a failure's way to a spare.

Two phases, one JSON line, against a real OpenSSH server on loopback (tests/sshd.py) whose
root has the fake nvidia-smi of the tests (tests/provisioning/fakes): this is a CPU machine,
no card is read, but every reading is what production does over SSH — a session per lot,
the probe (validation/benchmark/smi.py) sent on standard input, two nvidia-smi calls and
the kernel log — so the figures are this machine's cost of the loop, not a GPU host's.

- **tick**: ``--small`` then ``--lots`` lots (125 hosts of 4 lots for 500) with access
  open, all due; one health tick each; seconds per tick and per lot, and the database
  statements of each tick (flat in the number of lots: the target). The delivered state is
  written directly (orders placed as a researcher does, then their jobs and access grants
  set as delivered), not provisioned, so the phase measures the tick alone.
- **failure → spare**: ``--runs`` times, a delivered lot with a spare beside it; an XID 79
  line written into the host's kernel log; then health and access ticks back to back until
  access is open on the spare. The time from the line to the spare's keys, median, with
  the acceptance benchmark's own share (it runs on the spare: CPU stand-in, ``--quick``)
  shown apart, and what the health tick took to see it and move the booking. In
  production the first reading comes within PROVISIONING_HEALTH_SECONDS and the spare's
  preparation at the next access tick (PROVISIONING_TICK_SECONDS): not included here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchdb import NO_UNPAID_LIMITS, ROOT, fresh_database, h200_request, median

DATABASE = "gpulots_bench_health"
FAKE_SMI = ROOT / "tests" / "provisioning" / "fakes" / "nvidia-smi"
LOTS_PER_HOST = 4


def host_root(folder: Path) -> Path:
    """A host's filesystem root with the fake nvidia-smi of an 8-card H200 host."""
    tools = folder / "usr" / "bin"
    tools.mkdir(parents=True, exist_ok=True)
    shutil.copy(FAKE_SMI, tools / "nvidia-smi")
    (tools / "nvidia-smi").chmod(0o755)
    return folder


def add_hosts(prefix: str, count: int, lots: int, sshd: Any) -> list[Any]:
    from reservations.models import HardwareKind, Host, Lot

    kind = HardwareKind.objects.get(slug="h200")
    made = []
    for number in range(count):
        host = Host.objects.create(
            name=f"{prefix}-{number}",
            kind=kind,
            address="127.0.0.1",
            ssh_port=sshd.port,
            ssh_user=sshd.user,
            ssh_host_key=sshd.host_key,
        )
        Lot.objects.bulk_create(Lot(host=host, gpu_a=2 * i, gpu_b=2 * i + 1) for i in range(lots))
        made.append(host)
    return made


def delivered(count: int, now: Any) -> list[Any]:
    """``count`` one-lot orders placed and paid as a researcher's are, then delivered by
    writing what provisioning would have: the window began an hour ago, each job ready,
    each grant open with the keys in."""
    from django.db import transaction
    from django.db.backends.postgresql.psycopg_any import DateTimeTZRange  # type: ignore[import-untyped]

    from provisioning.models import AccessGrant, ProvisioningJob
    from reservations.models import Hold, Order
    from reservations.services import mark_paid, place_order, system

    starts = (now + timedelta(days=3)).replace(minute=0, second=0, microsecond=0)
    orders = []
    for _ in range(count):
        order = place_order(h200_request(starts, lot_count=1, window_days=7))
        with transaction.atomic():
            mark_paid(order, actor=system("bench"), reason="paid")
        orders.append(order)
    began = now - timedelta(hours=1)
    ids = [order.pk for order in orders]
    Order.objects.filter(pk__in=ids).update(
        status=Order.STATUS_ACTIVE, starts_at=began, ends_at=began + timedelta(days=7)
    )
    Hold.objects.filter(order_id__in=ids).update(
        status=Hold.Status.BOOKED,
        period=DateTimeTZRange(began, began + timedelta(days=7, hours=6)),
    )
    jobs = []
    for hold in Hold.objects.filter(order_id__in=ids).select_related("order"):
        jobs.append(
            ProvisioningJob(
                order=hold.order,
                lot_id=hold.lot_id,
                status=ProvisioningJob.Status.READY,
                steps_done=len(ProvisioningJob.STEPS),
                accounts=[f"gl-bench-{hold.order_id}"],
                ready_at=began,
            )
        )
    ProvisioningJob.objects.bulk_create(jobs)
    AccessGrant.objects.bulk_create(
        AccessGrant(
            job=job,
            lot_id=job.lot_id,
            order=job.order,
            period=DateTimeTZRange(began - timedelta(hours=1), None),
            prepare_from=began - timedelta(hours=1),
            window_start=began,
            window_end=began + timedelta(days=7),
            opened_at=began - timedelta(hours=1),
            keys_at=began,
        )
        for job in jobs
    )
    return orders


class Counted:
    """The database statements run inside the block."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        self.count += 1
        return execute(sql, params, many, context)


def one_tick(backend: Any, now: Any) -> dict[str, Any]:
    from django.db import connection

    from provisioning import health

    counted = Counted()
    started = time.perf_counter()
    with connection.execute_wrapper(counted):
        done = health.tick(now=now, backend=backend)
    seconds = time.perf_counter() - started
    return {
        "lots": done.read,
        "unhealthy": done.unhealthy,
        "seconds": round(seconds, 2),
        "per_lot_ms": round(seconds / max(done.read, 1) * 1000, 1),
        "statements": counted.count,
    }


class Timed:
    """The SSH backend, its benchmark runs timed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.benchmark_s = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def run_validation(self, *args: Any, **kwargs: Any) -> str:
        started = time.perf_counter()
        try:
            return str(self.inner.run_validation(*args, **kwargs))
        finally:
            self.benchmark_s += time.perf_counter() - started


def failure_to_spare(run: int, sshd: Any, backend: Any, root: Path) -> dict[str, Any]:
    """One delivered lot, an XID 79 on its first card, ticks until the spare's keys. The
    order may be placed on any free lot: the XID names the PCI bus of the one it got."""
    from django.utils import timezone

    from provisioning import health, schedule, services
    from provisioning.models import AccessGrant, ProvisioningJob

    add_hosts(f"fail-{run}", 1, 2, sshd)
    now = timezone.now()
    (order,) = delivered(1, now)
    first = order.holds.select_related("lot").get(status="booked").lot
    first_lot = first.pk
    bus = 0x18 + 0x10 * first.gpu_a  # the fake nvidia-smi's PCI bus of the lot's first card
    timed = Timed(backend)
    log = root / "var" / "log" / "kernel.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    failed_at = time.time()
    with log.open("a") as handle:
        handle.write(
            f"{failed_at:.6f} bench kernel: NVRM: Xid (PCI:0000:{bus:02x}:00): 79, pid=1, "
            "GPU has fallen off the bus.\n"
        )
    detect_s, ticks = 0.0, 0

    def run_now(job_id: int) -> None:  # the job's steps at once, as a worker would
        services.run_job(job_id, timed)

    while True:
        ticks += 1
        started = time.perf_counter()
        done = health.tick(now=timezone.now(), backend=timed)
        if done.replaced:
            detect_s = time.perf_counter() - started
        schedule.tick(
            now=timezone.now(),
            backend=timed,
            start=run_now,
        )
        spare = (
            ProvisioningJob.objects.filter(order=order, replaced_at__isnull=True)
            .exclude(lot_id=first_lot)
            .first()
        )
        grant = AccessGrant.objects.filter(job=spare).first() if spare else None
        if grant is not None and grant.keys_at is not None:
            break
        if ticks > 20:
            state = (spare.status, spare.error[-300:]) if spare else "no spare job yet"
            raise RuntimeError(f"run {run}: no access on the spare after {ticks} ticks: {state}")
    total = time.time() - failed_at
    return {
        "failure_to_access_s": round(total, 2),
        "benchmark_s": round(timed.benchmark_s, 2),
        "detect_and_move_s": round(detect_s, 2),
        "other_steps_s": round(total - timed.benchmark_s - detect_s, 2),
        "ticks": ticks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lots", type=int, default=500)
    parser.add_argument("--small", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.environ.update(NO_UNPAID_LIMITS)
    os.environ["PROVISIONING_CPU_STAND_IN_HOSTS"] = ",".join(
        f"fail-{run}-0" for run in range(args.runs)
    )
    fresh_database(DATABASE)

    from django.conf import settings
    from django.utils import timezone

    from provisioning.ssh import SshBackend
    from reservations.catalogue import load_catalogue
    from tests.sshd import start_sshd

    load_catalogue()
    folder = Path(tempfile.mkdtemp(prefix="bench-health-"))
    servers = start_sshd(folder / "sshd")
    sshd = next(servers)
    try:

        def backend(root: Path) -> SshBackend:
            return SshBackend(
                client_key=sshd.client_key,
                remote_dir=str(root / "var" / "lib" / "gpulots"),
                remote_root=str(host_root(root)),
                real_accounts=False,
                python=sys.executable,  # this machine's PyTorch stands for the host's
                benchmark_args=["--quick"],
            )

        # Phase 2 first, on hosts of its own (phase 1 books every lot it adds).
        spares = [
            failure_to_spare(run, sshd, backend(folder / "fail-root"), folder / "fail-root")
            for run in range(args.runs)
        ]
        reader = backend(folder / "tick-root")
        ticks: list[dict[str, Any]] = []
        hosts = placed = 0
        for lots in (args.small, args.lots):
            add = -(-lots // LOTS_PER_HOST) - hosts
            for number in range(hosts, hosts + add):
                add_hosts(f"tick-{number}", 1, LOTS_PER_HOST, sshd)
            hosts += add
            now = timezone.now()
            delivered(lots - placed, now)
            placed = lots
            # All due, whatever was read before: later than the interval after any reading.
            interval = timedelta(seconds=settings.PROVISIONING_HEALTH_SECONDS + 1)
            ticks.append(one_tick(reader, now + interval * (len(ticks) + 1)))
    finally:
        servers.close()  # type: ignore[attr-defined]
        shutil.rmtree(folder, ignore_errors=True)
    small, large = ticks
    print(
        json.dumps(
            {
                "benchmark": "health_tick",
                "where": "this machine's CPUs; loopback sshd, fake nvidia-smi: no GPU read",
                "concurrency": settings.PROVISIONING_HEALTH_CONCURRENCY,
                "ticks": ticks,
                "statements_flat": small["statements"] == large["statements"],
                "all_healthy": small["unhealthy"] == large["unhealthy"] == 0,
                "failure_to_spare": {
                    "runs": spares,
                    "median_s": median([r["failure_to_access_s"] for r in spares]),
                    "median_benchmark_s": median([r["benchmark_s"] for r in spares]),
                    "median_detect_and_move_s": median([r["detect_and_move_s"] for r in spares]),
                    "note": "ticks back to back: production adds up to "
                    "PROVISIONING_HEALTH_SECONDS before the reading and up to "
                    "PROVISIONING_TICK_SECONDS before the spare's preparation",
                },
            }
        )
    )


if __name__ == "__main__":
    main()
