"""Many clients, each with its own database connection, race for the last lots of a kind.

Every client is a separate process that calls ``place_order`` at the same instant (a
barrier) for overlapping windows. Prints one JSON line; exits non-zero when any lot was
overbooked, any order was left half-made, or the number of successes differs from capacity.

``--profile`` places and refuses orders one after another in this process instead and
prints the SQL statements of each and a cProfile of 30.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from datetime import timedelta
from typing import Any

from benchdb import fresh_database, h200_request, profile_calls


def client(index: int, args: argparse.Namespace, base: float, barrier: Any, results: Any) -> None:
    from datetime import UTC, datetime

    from django.db import connections

    from reservations.errors import LotUnavailable
    from reservations.services import place_order

    # Windows of 7 days starting within 2 days of each other: every pair overlaps.
    starts_at = datetime.fromtimestamp(base, tz=UTC) + timedelta(minutes=(index * 47) % 2880)
    request = h200_request(
        starts_at, lot_count=args.lots_per_order, window_days=7, name=f"Racer {index}"
    )
    connections.close_all()  # each process opens its own connection
    barrier.wait()
    try:
        place_order(request)
        results.put("placed")
    except LotUnavailable:
        results.put("unavailable")
    except Exception as exc:  # reported, and it fails the benchmark
        results.put(f"error: {type(exc).__name__}: {exc}")
    finally:
        connections.close_all()


INTEGRITY_SQL = {
    "overbooked": """
        SELECT count(*) FROM reservations_hold a JOIN reservations_hold b
          ON a.lot_id = b.lot_id AND a.id < b.id AND a.period && b.period
         WHERE a.status IN ('held', 'booked') AND b.status IN ('held', 'booked')
    """,
    "orphans": """
        SELECT count(*) FROM reservations_order o
         WHERE o.lot_count <> (SELECT count(*) FROM reservations_hold h WHERE h.order_id = o.id)
            OR NOT EXISTS (SELECT 1 FROM reservations_orderevent e WHERE e.order_id = o.id)
    """,
}


def profile_outcomes(args: argparse.Namespace, base: float) -> None:
    """``--profile``: ``place_order`` as the racers call it, one after another in this
    process: placed (on the windows after the contested one, while they have room) and
    refused (the contested window, once every lot in it is taken: what most racers get)."""
    from datetime import UTC, datetime

    from reservations.errors import LotUnavailable
    from reservations.services import place_order

    contested = datetime.fromtimestamp(base, tz=UTC)
    for _lot in range(args.capacity):
        place_order(h200_request(contested, lot_count=args.lots_per_order, window_days=7))

    def placed(number: int) -> None:
        # The next windows after the contested one, each taking as many orders as lots.
        starts_at = contested + timedelta(days=8 * (1 + number // args.capacity))
        place_order(h200_request(starts_at, lot_count=args.lots_per_order, window_days=7))

    def refused(number: int) -> None:
        try:
            place_order(h200_request(contested, lot_count=args.lots_per_order, window_days=7))
        except LotUnavailable:
            return
        raise RuntimeError("a full window took another order")

    profile_calls({"placed": placed, "refused": refused}, repeat=30, unit="placement")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--capacity", type=int, default=8, help="orders that can succeed")
    parser.add_argument("--lots-per-order", type=int, default=1)
    parser.add_argument(
        "--drop-constraint",
        action="store_true",
        help="drop the exclusion constraint first, to see what the row locks alone keep out",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="profile the race's two outcomes (placed, refused) in one process instead",
    )
    args = parser.parse_args()

    fresh_database("gpulots_bench_race")
    from django.db import connection, connections
    from django.utils import timezone

    from reservations.catalogue import load_catalogue
    from reservations.models import HardwareKind, Host, Lot

    if args.drop_constraint:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE reservations_hold DROP CONSTRAINT hold_no_overlap_per_lot")
    load_catalogue()
    host = Host.objects.create(
        name="race-h200", kind=HardwareKind.objects.get(slug="h200"), address="127.0.0.1"
    )
    for i in range(args.capacity * args.lots_per_order):
        Lot.objects.create(host=host, gpu_a=2 * i, gpu_b=2 * i + 1)
    base = (timezone.now() + timedelta(days=3)).timestamp()
    if args.profile:
        profile_outcomes(args, base)
        return 0
    connections.close_all()

    context = mp.get_context("fork")
    barrier = context.Barrier(args.clients)
    results = context.Queue()
    processes = [
        context.Process(target=client, args=(i, args, base, barrier, results))
        for i in range(args.clients)
    ]
    for process in processes:
        process.start()
    started = time.perf_counter()
    outcomes = [results.get(timeout=120) for _ in processes]
    seconds = time.perf_counter() - started
    for process in processes:
        process.join()

    with connection.cursor() as cursor:
        integrity = {}
        for name, query in INTEGRITY_SQL.items():
            cursor.execute(query)
            integrity[name] = cursor.fetchone()[0]
    errors = [o for o in outcomes if o.startswith("error")]
    report = {
        "bench": "booking_race",
        "constraint": not args.drop_constraint,
        "attempts": args.clients,
        "capacity": args.capacity,
        "succeeded": outcomes.count("placed"),
        "unavailable": outcomes.count("unavailable"),
        "errors": len(errors),
        **integrity,
        "seconds": round(seconds, 3),
    }
    print(json.dumps(report))
    for error in errors[:3]:
        print(error, file=sys.stderr)
    ok = (
        report["overbooked"] == 0
        and report["orphans"] == 0
        and report["errors"] == 0
        and report["succeeded"] == args.capacity
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
