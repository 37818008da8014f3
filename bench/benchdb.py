"""Shared set-up for the benchmarks: a fresh database of their own, Django configured for it.

Benchmarks run with DEBUG off (Django records every query when DEBUG is on) against the
same local PostgreSQL the product uses, in a database named after the benchmark.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def fresh_database(name: str, *, debug: bool = False) -> None:
    """Drop and recreate database ``name``, point Django at it, migrate. ``debug``: with
    DJANGO_DEBUG=1 (what delivers to loopback, say; the benchmark must say so)."""
    import psycopg
    from psycopg import sql

    os.environ["DJANGO_DEBUG"] = "1" if debug else "0"
    os.environ.setdefault("DJANGO_SECRET_KEY", "benchmark-only-not-a-secret")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["LOG_LEVEL"] = "WARNING"
    host = os.environ.get("BENCH_PGHOST", "127.0.0.1")
    with psycopg.connect(host=host, user="postgres", dbname="postgres", autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    os.environ["DATABASE_URL"] = f"postgres://postgres@{host}:5432/{name}"

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHYRHhEGbyZH3Bu5Kvq+fbY34OnhAE+pRyQNyOi6s9F7 bench"


def h200_request(starts_at: Any, *, lot_count: int, window_days: int, name: str = "Bench") -> Any:
    """An order for H200 lots as the benchmarks place them (call after fresh_database)."""
    from reservations.services import OrderRequest

    return OrderRequest(
        kind="h200",
        lot_count=lot_count,
        window_days=window_days,
        starts_at=starts_at,
        environment="pytorch-2.9-cuda-12.8",
        usage_mode="distributed",
        hypothesis="shorter_step",
        contact_name=name,
        contact_email="bench@example.org",
        ssh_public_keys=SSH_KEY,
    )


NO_UNPAID_LIMITS = {
    "RESERVATION_UNPAID_ORDERS_PER_CLIENT": "1000000",
    "RESERVATION_UNPAID_ORDERS_PER_MAILBOX": "1000000",
    "RESERVATION_UNPAID_SHARE_PERCENT": "100",
}
"""The limits on what one party holds unpaid (reservations.fairness), out of reach: for the
benchmarks that measure speed from one client; inventory_attack measures the limits."""


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


STACK_START_S = 240
"""How long a benchmark waits for its stack's /healthz before it gives up, saying what
`make run` printed."""


@contextmanager
def running_stack(database: str, **extra_env: str) -> Iterator[int]:
    """The product as `make run` starts it (web, worker, beat, dev chain) on ``database``,
    on free ports; yields the web port once /healthz answers, stops it all afterwards."""
    import signal
    import subprocess
    import tempfile
    import time
    import urllib.request

    port = free_port()
    environ = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SECRET_KEY", "LOG_LEVEL"}}
    environ.update(
        DJANGO_DEBUG="1",
        DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/{database}",
        REDIS_URL=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13"),
        CELERY_TASK_DEFAULT_QUEUE=f"bench-{database}",
        PORT=str(port),
        DEVCHAIN_PORT=str(free_port()),
        RUN_DIR=(run_dir := tempfile.mkdtemp(prefix=f"{database}-")),
    )
    environ.update(extra_env)
    log_path = Path(run_dir) / "stack.log"
    with log_path.open("wb") as log:
        stack = subprocess.Popen(
            [sys.executable, str(ROOT / "scripts" / "devstack.py")],
            cwd=ROOT,
            env=environ,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        # Migrating a fresh database and starting four web workers, two Celery workers and
        # a chain takes seconds alone, and minutes where the parallel suite runs beside it.
        deadline = time.monotonic() + STACK_START_S
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or stack.poll() is not None:
                    waited = "it exited" if stack.poll() is not None else f"{STACK_START_S} s"
                    tail = log_path.read_text(errors="replace").splitlines()[-40:]
                    raise RuntimeError(
                        f"the server did not start ({waited}); make run printed:\n"
                        + "\n".join(tail)
                    ) from None
                time.sleep(0.3)
        yield port
    finally:
        stack.send_signal(signal.SIGINT)
        try:
            stack.wait(timeout=30)
        except subprocess.TimeoutExpired:
            stack.kill()


# --------------------------------------------------------------------------- load


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))
    return ordered[index]


async def client(
    port: int,
    paths: list[str],
    latencies: list[float],
    *,
    warmup: int = 0,
    window: list[float] | None = None,
    cookie: str = "",
    headers: dict[str, str] | None = None,
) -> None:
    """One keep-alive connection asking for ``paths`` in turn (with ``cookie`` and
    ``headers``, if any); the latency of each after the first ``warmup`` is recorded, and
    ``window`` widened to the first measured start and the last measured end."""
    window = window if window is not None else [float("inf"), 0.0]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    extra = f"Cookie: {cookie}\r\n" if cookie else ""
    extra += "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    try:
        for number, path in enumerate(paths):
            started = time.perf_counter()
            writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode())
            await writer.drain()
            status = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            await reader.readexactly(length)
            if number >= warmup:
                ended = time.perf_counter()
                latencies.append((ended - started) * 1000)
                window[0] = min(window[0], started)
                window[1] = max(window[1], ended)
            if not status.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"{path}: {status!r}")
    finally:
        writer.close()


async def drive(
    port: int,
    paths: list[list[str]],
    *,
    warmup: int = 3,
    cookie: str = "",
    headers: dict[str, str] | None = None,
) -> dict[str, float]:
    """One client per list of paths, all at once, each on its own keep-alive connection;
    latency of every request after each client's first ``warmup`` (on the same connection:
    the server's processes have each rendered the page once, as in steady use, and the
    clients stay spread over them as they are when measured)."""
    latencies: list[float] = []
    window = [float("inf"), 0.0]
    await asyncio.gather(
        *(
            client(
                port, mine, latencies, warmup=warmup, window=window, cookie=cookie, headers=headers
            )
            for mine in paths
        )
    )
    return {
        # Measured requests over the time from the first measured one's start to the last's
        # end (clients still warming up share it): a lower bound of the rate.
        "rps": round(len(latencies) / (window[1] - window[0]), 1),
        "p50_ms": round(percentile(latencies, 0.50), 2),
        "p95_ms": round(percentile(latencies, 0.95), 2),
        "p99_ms": round(percentile(latencies, 0.99), 2),
        "requests": len(latencies),
    }


# --------------------------------------------------------------------------- profile


OWN_CODE = r"/(accounts|api|config|payments|provisioning|reservations)/"
"""What ``--profile`` lists first: functions of the project's own packages."""


def profile_paths(
    paths: dict[str, Any],
    *,
    repeat: int = 30,
    cookie: str = "",
    headers: dict[str, str] | None = None,
) -> None:
    """``--profile``: each page asked ``repeat`` times in this process (Django's test client,
    no server), under cProfile; per page the SQL statements of one request, the time per
    request and the 25 functions with the most cumulative time, on standard error. A page
    given as a function of the request's number is a new path each time (nothing cached)."""

    from django.conf import settings
    from django.test import override_settings

    # Static files un-hashed, as the server the benchmarks start serves them (DEBUG on there).
    storages = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    with override_settings(STORAGES=storages):
        _profile_each(paths, repeat=repeat, cookie=cookie, headers=headers or {})


def _profile_each(
    paths: dict[str, Any], *, repeat: int, cookie: str, headers: dict[str, str]
) -> None:
    from django.test import Client

    meta: dict[str, Any] = {"HTTP_HOST": "localhost"}
    meta.update({"HTTP_" + k.upper().replace("-", "_"): v for k, v in headers.items()})
    browser = Client(**meta)
    if cookie:
        name, _, value = cookie.partition("=")
        browser.cookies[name] = value
    calls = {}
    for page, path_of in paths.items():
        path_at = path_of if callable(path_of) else lambda _number, path=path_of: path

        def ask(number: int, path_at: Any = path_at) -> None:
            path = path_at(number)
            response = browser.get(path, secure=True)
            if response.status_code != 200:
                raise RuntimeError(f"{path}: {response.status_code}")

        calls[f"{page}: {path_at(1)}"] = ask
    profile_calls(calls, repeat=repeat, unit="request")


def profile_calls(calls: dict[str, Any], *, repeat: int = 30, unit: str = "call") -> None:
    """``--profile``: each of ``calls`` (a function of the call's number, which may make
    each call new) once to warm up, once with its SQL statements recorded, then ``repeat``
    times under cProfile; per call its statements, the time per call and the functions
    with the most time (the project's own first), on standard error."""
    import cProfile
    import io
    import pstats

    from django.db import connection

    for name, call in calls.items():
        call(0)  # warm: templates compiled, caches filled, statements prepared
        statements: list[str] = []

        def record(execute: Any, sql: str, *args: Any, seen: list[str] = statements) -> Any:
            seen.append(sql)
            return execute(sql, *args)

        with connection.execute_wrapper(record):
            call(1)
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        for number in range(repeat):
            call(2 + number)
        profiler.disable()
        per_call = (time.perf_counter() - started) * 1000 / repeat
        out = io.StringIO()
        # The project's own functions first (by cumulative time), then everything by own time.
        stats = pstats.Stats(profiler, stream=out)
        stats.sort_stats("cumulative").print_stats(OWN_CODE, 30)
        stats.sort_stats("tottime").print_stats(15)
        print(
            f"== {name}\n{len(statements)} SQL statements, {per_call:.2f} ms a {unit} "
            "in-process (under the profiler)\n"
            + "\n".join(f"  {sql[:200]}" for sql in statements)
            + "\n"
            + out.getvalue(),
            file=sys.stderr,
        )
