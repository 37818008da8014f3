"""The booking pages under load, against the real server as ``make run`` starts it.

Starts scripts/devstack.py (gunicorn, worker, beat) on a database of its own, places one
order, then drives three pages with 16 concurrent keep-alive clients: the landing page, the
booking form's live update (the quote) and the order page. One JSON line: requests per
second and p50/p95 latency per page. Target: p95 under 50 ms for each.

The quote is measured twice: "quote" with 16 clients each repeating its own form state (a
fragment is reused for 5 s, as when researchers pause on a choice), and "quote_uncached"
where every request is a form state never seen before (nothing reused), for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import date, timedelta

from benchdb import drive, fresh_database, h200_request, running_stack

DATABASE = "gpulots_bench_pages"
TARGET_P95_MS = 50.0


def quote_path(day: date, client: int, request: int) -> str:
    """The live update for one form state; distinct (client, request) pairs never repeat."""
    lots = 1 + client % 2
    window = (3, 7, 30)[client % 3]
    start = day + timedelta(days=client // 2)
    params = f"{6 + request / 1000:.3f}"  # the model size a researcher is still typing
    return (
        f"/en/book/quote/?kind=h200&lot_count={lots}&window_days={window}"
        f"&start_date={start.isoformat()}&environment=pytorch-2.9-cuda-12.8"
        f"&model_params_billion={params}&model_precision=bf16&model_workload=training"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=100, help="per client and page")
    args = parser.parse_args()

    fresh_database(DATABASE)
    from django.db import connections
    from django.utils import timezone

    from reservations.availability import handover
    from reservations.catalogue import load_catalogue
    from reservations.services import place_order

    load_catalogue(demo_inventory=True)
    day = (timezone.now() + timedelta(days=3)).date()
    order = place_order(h200_request(handover(day), lot_count=2, window_days=7))
    connections.close_all()

    with running_stack(DATABASE) as port:
        n, clients = args.requests, range(args.clients)
        pages = {
            "landing": [["/en/"] * n for _ in clients],
            # Each client edits its own form: 16 distinct states, each asked again and again.
            "quote": [[quote_path(day, c, 0)] * n for c in clients],
            # Every request a form state never seen before: no fragment can be reused.
            "quote_uncached": [[quote_path(day, c, i) for i in range(n)] for c in clients],
            "order": [[f"/en/orders/{order.reference}/{order.secret}/"] * n for _ in clients],
        }
        results = {name: asyncio.run(drive(port, paths)) for name, paths in pages.items()}
    report = {
        "bench": "booking_pages",
        "clients": args.clients,
        **results,
        "target_p95_ms": TARGET_P95_MS,
        "meets_target": all(
            results[name]["p95_ms"] < TARGET_P95_MS for name in ("landing", "quote", "order")
        ),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
