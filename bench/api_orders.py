"""Scripted clients booking through the REST API, against the real server as `make run`
starts it.

16 concurrent keep-alive clients each place orders (each with its own Idempotency-Key) for
windows that never collide; then 16 clients send the same order with the same key at the
same moment. One JSON line: orders per second, p50/p95 latency, and what the retried key
booked (it must be one order; zero overbooked lots). Exits non-zero otherwise.

``--profile`` places orders in this process instead (Django's test client, no server) and
prints the SQL statements of one and a cProfile of 30.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from datetime import timedelta
from typing import Any

from benchdb import (
    NO_UNPAID_LIMITS,
    SSH_KEY,
    fresh_database,
    percentile,
    profile_calls,
    running_stack,
)
from booking_race import INTEGRITY_SQL

DATABASE = "gpulots_bench_api"


async def post(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
) -> tuple[int, bytes]:
    payload = json.dumps(body).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n{head}\r\n".encode()
        + payload
    )
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return status, await reader.readexactly(length)


def window_start(base: Any, number: int, lots: int) -> str:
    """Order ``number``'s start: every lot once per 3-day window (windows 4 days apart)."""
    return str((base + timedelta(days=4 * (number // lots))).isoformat())


def order(starts_at: str) -> dict[str, Any]:
    return {
        "kind": "h200",
        "lot_count": 1,
        "window_days": 3,
        "starts_at": starts_at,
        "environment": "pytorch-2.9-cuda-12.8",
        "usage_mode": "distributed",
        "hypothesis": "shorter_step",
        "contact_name": "Bench",
        "contact_email": "bench@example.org",
        "ssh_public_keys": [SSH_KEY],
    }


async def client(
    port: int,
    token: str,
    jobs: list[tuple[str, dict[str, Any]]],
    latencies: list[float],
    statuses: list[int],
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for key, body in jobs:
            started = time.perf_counter()
            status, _ = await post(
                reader,
                writer,
                "/api/v1/orders/",
                body,
                {"Authorization": f"Bearer {token}", "Idempotency-Key": key},
            )
            latencies.append((time.perf_counter() - started) * 1000)
            statuses.append(status)
    finally:
        writer.close()


async def run(
    port: int, token: str, per_client: dict[int, list[tuple[str, dict[str, Any]]]]
) -> tuple[list[float], list[int], float]:
    latencies: list[float] = []
    statuses: list[int] = []
    started = time.perf_counter()
    await asyncio.gather(
        *(client(port, token, jobs, latencies, statuses) for jobs in per_client.values())
    )
    return latencies, statuses, time.perf_counter() - started


def profile_placing(token: str, base: Any, lots: int) -> None:
    """``--profile``: ``POST /api/v1/orders/`` in this process (Django's test client), each
    call a new order on its own window and Idempotency-Key."""
    from django.test import Client

    browser = Client(HTTP_HOST="localhost", HTTP_AUTHORIZATION=f"Bearer {token}")

    def place(number: int) -> None:
        response = browser.post(
            "/api/v1/orders/",
            json.dumps(order(window_start(base, number, lots))),
            content_type="application/json",
            headers={"Idempotency-Key": f"profile-{number}"},
            secure=True,
        )
        if response.status_code != 201:
            raise RuntimeError(f"{response.status_code}: {response.content[:300]!r}")

    profile_calls({"POST /api/v1/orders/": place}, repeat=30, unit="request")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--orders", type=int, default=20, help="per client")
    parser.add_argument(
        "--profile", action="store_true", help="profile placing orders in-process instead"
    )
    args = parser.parse_args()

    # One client places every order: the throttles and the unpaid limits are out of reach
    # (for the server started below and for this process under --profile).
    throttles = {"API_THROTTLE_TOKEN": "1000000/minute", "API_THROTTLE_ADDRESS": "1000000/minute"}
    os.environ.update(throttles, **NO_UNPAID_LIMITS)
    fresh_database(DATABASE)
    from django.db import connection, connections
    from django.utils import timezone

    from accounts.models import User
    from api.models import ApiToken
    from reservations.catalogue import load_catalogue
    from reservations.models import HardwareKind, Host, Lot, Order

    load_catalogue()
    host = Host.objects.create(
        name="bench", kind=HardwareKind.objects.get(slug="h200"), address="x"
    )
    lots = args.clients * 4
    Lot.objects.bulk_create(Lot(host=host, gpu_a=2 * i, gpu_b=2 * i + 1) for i in range(lots))
    _record, token = ApiToken.issue(User.objects.create_user("bench@example.org"), "bench")
    base = timezone.now() + timedelta(days=1)
    if args.profile:
        profile_placing(token, base, lots)
        return 0
    connections.close_all()

    with running_stack(DATABASE, **throttles, **NO_UNPAID_LIMITS) as port:
        # Client c, order i: window 4 days apart per round, one lot each: never colliding.
        per_client = {
            c: [
                (f"c{c}-o{i}", order(window_start(base, i * args.clients + c, lots)))
                for i in range(args.orders)
            ]
            for c in range(args.clients)
        }
        latencies, statuses, seconds = asyncio.run(run(port, token, per_client))
        same = {
            c: [("same-key", order((base + timedelta(days=170)).isoformat()))]
            for c in range(args.clients)
        }
        _l, same_statuses, _s = asyncio.run(run(port, token, same))
    with connection.cursor() as cursor:
        cursor.execute(INTEGRITY_SQL["overbooked"])
        overbooked = cursor.fetchone()[0]
    same_key_orders = Order.objects.filter(starts_at__gte=base + timedelta(days=169)).count()
    placed = statuses.count(201)
    report = {
        "bench": "api_orders",
        "clients": args.clients,
        "requests": len(statuses),
        "placed": placed,
        "orders_per_second": round(placed / seconds, 1),
        "p50_ms": round(percentile(latencies, 0.5), 2),
        "p95_ms": round(percentile(latencies, 0.95), 2),
        "same_key_requests": len(same_statuses),
        "same_key_statuses": {
            str(code): same_statuses.count(code) for code in sorted(set(same_statuses))
        },
        "same_key_orders": same_key_orders,
        "overbooked": overbooked,
    }
    print(json.dumps(report))
    ok = placed == len(statuses) and same_key_orders == 1 and overbooked == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
