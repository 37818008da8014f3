"""The booking pages under load, on a year of business, against the real server as
``make run`` starts it.

Seeds a year of business (bench/yearseed.py: 100,000 orders, ~300,000 holds, 100,000
invoices and transfers, 200 lots), starts scripts/devstack.py (gunicorn, worker, beat, dev
chain) on it, then drives each page with 16 concurrent keep-alive clients: the landing
page, the booking form's live update (the quote), the order page in each state — unpaid
with its payment panel (an invoice chosen, nothing paid), partly paid (40 % sent on the dev
chain and seen by the scanner), active with access (a year-old order's lots ready, with
their report) — and the API's GET of an order. One JSON line: requests per second and
p50/p95/p99 latency per page. Target: p95 under 50 ms for each. Each client first makes
``--warmup`` requests (50) on its connection, not measured: every server process has then
rendered the page (the first requests after a start take 0.4 to 1.2 s, templates compiled,
statements prepared) — the figures are of steady use, not of a cold start.

The quote is measured three times: "quote" with 16 clients each repeating its own form
state (a fragment is reused for 5 s, as when researchers pause on a choice),
"quote_uncached" where every request is a form state never seen before (a new model size
on the client's plan: the plan's part is shared, the advisor and the rendering are not),
and "calendar" where every request is a plan never asked before (a new start and window:
price, free lots, the calendar of free starts and the other kinds read anew; reported,
without a target).

``--profile`` asks each page in this process instead (Django's test client, no server) and
prints its SQL statements and a cProfile of it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import date, timedelta
from typing import Any

from benchdb import (
    NO_UNPAID_LIMITS,
    drive,
    fresh_database,
    h200_request,
    profile_paths,
    running_stack,
)
from yearseed import seed_year

DATABASE = "gpulots_bench_pages"
TARGET_P95_MS = 50.0
REPORTED_ONLY = {"calendar"}
"""Measured and printed, without a target: a new plan at every request (issue 14 asks for
its figure; issue 15's target is the quote's, a new model size at every request)."""


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


def plan_path(today: date, client: int, request: int) -> str:
    """The live update for a plan never asked before (each client its own kind and lot
    count, each request its own start and window): the price, free lots, calendar and other
    kinds read and rendered anew, as when a researcher moves the start date."""
    kind = ("h200", "b200")[client % 2]
    lots = 1 + (client // 2) % 3
    window = (3, 7, 30)[request % 3]
    start = today + timedelta(days=1 + (client // 6) * 50 + request // 3)
    environment = "pytorch-2.9-cuda-12.8"
    return (
        f"/en/book/quote/?kind={kind}&lot_count={lots}&window_days={window}"
        f"&start_date={start.isoformat()}&environment={environment}"
        "&model_params_billion=7&model_precision=bf16&model_workload=training"
    )


def active_with_access() -> Any:
    """A seeded active order, its lots delivered as the provisioning worker leaves them:
    a job ready with its account and passing report, and an access grant with keys in."""
    from django.db.backends.postgresql.psycopg_any import (  # type: ignore[import-untyped]
        DateTimeTZRange,
    )
    from django.utils import timezone

    from provisioning.models import AccessGrant, ProvisioningJob
    from reservations.models import Order
    from tests.provisioning.v2_reports import PASSING

    order = Order.objects.filter(status=Order.STATUS_ACTIVE).order_by("pk").first()
    assert order is not None, "the year of business has an active order"
    opened = order.starts_at - timedelta(hours=1)
    for hold in order.holds.all():
        job = ProvisioningJob.objects.create(
            order=order,
            lot_id=hold.lot_id,
            status=ProvisioningJob.Status.READY,
            steps_done=len(ProvisioningJob.STEPS),
            accounts=[f"r{order.pk}"],
            report=PASSING,
            ready_at=order.starts_at,
        )
        AccessGrant.objects.create(
            job=job,
            lot_id=hold.lot_id,
            order=order,
            prepare_from=opened,
            window_start=order.starts_at,
            window_end=order.ends_at,
            opened_at=opened,
            period=DateTimeTZRange(opened, None, "[)"),
            keys_at=order.starts_at,
        )
    assert order.starts_at <= timezone.now() < order.ends_at
    return order


def with_invoice(order: Any, *, pay_share: float = 0.0) -> Any:
    """``order`` with a USDC invoice chosen on the running dev chain; ``pay_share`` of it
    sent there and waited for until the scanner has seen it (the panel says "partly paid")."""
    import time

    from payments.devchain import DevChain
    from payments.invoicing import create_invoice
    from payments.models import Asset, Chain, Invoice

    chain = Chain.objects.get(is_active=True)
    invoice = create_invoice(order, Asset.objects.get(chain=chain, symbol="USDC"))
    if pay_share:
        dev = DevChain(chain.rpc_url)
        dev.pay_invoice(invoice, amount=invoice.asset.from_units(invoice.amount_due) * 4 / 10)
        dev.mine(chain.confirmations + 1)
        deadline = time.monotonic() + 90
        while not Invoice.objects.filter(pk=invoice.pk, amount_seen__gt=0).exists():
            if time.monotonic() > deadline:
                raise RuntimeError("the scanner did not see the partial payment in 90 s")
            time.sleep(0.5)
    return order


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=100, help="per client and page")
    parser.add_argument(
        "--warmup",
        type=int,
        default=50,
        help="requests per client and page before the measured ones, on the same connection",
    )
    parser.add_argument("--pages", default="", help="comma-separated subset of the pages")
    parser.add_argument("--orders", type=int, default=100_000, help="the year's orders")
    parser.add_argument(
        "--profile", action="store_true", help="profile each page in-process instead of load"
    )
    args = parser.parse_args()

    fresh_database(DATABASE)
    from django.contrib.auth import get_user_model
    from django.db import connections
    from django.utils import timezone

    from api.models import ApiToken
    from reservations.availability import handover
    from reservations.services import place_order

    seeded = seed_year(orders=args.orders)
    today = timezone.now().date()
    day = today + timedelta(days=3)
    # Unpaid orders on the first free lots after the year's bookings (90 days ahead).
    later = handover((timezone.now() + timedelta(days=90)).date())
    unpaid = place_order(h200_request(later, lot_count=1, window_days=7))
    partly = place_order(h200_request(later, lot_count=1, window_days=7))
    active = active_with_access()
    user = get_user_model().objects.create_user("bench@example.org")
    _record, token = ApiToken.issue(user, "bench")
    active.user = user
    active.save(update_fields=["user"])

    def page(order: Any) -> str:
        return f"/en/orders/{order.reference}/{order.secret}/"

    if args.profile:
        profile_paths(
            {
                "landing": "/en/",
                "quote_uncached": lambda number: quote_path(day, 0, number),
                "order_awaiting_coin": page(unpaid),
                "order_active": page(active),
            }
        )
        profile_paths(
            {"api_order": f"/api/v1/orders/{active.reference}/"},
            headers={"Authorization": f"Bearer {token}"},
        )
        return 0
    connections.close_all()

    throttles = {"API_THROTTLE_TOKEN": "1000000/minute", "API_THROTTLE_ADDRESS": "1000000/minute"}
    with running_stack(DATABASE, **throttles, **NO_UNPAID_LIMITS) as port:
        with_invoice(unpaid)
        with_invoice(partly, pay_share=0.4)
        connections.close_all()
        n, clients, w = args.requests, range(args.clients), args.warmup
        pages = {
            "landing": [["/en/"] * (w + n) for _ in clients],
            # Each client edits its own form: 16 distinct states, each asked again and again.
            "quote": [[quote_path(day, c, 0)] * (w + n) for c in clients],
            # Every request a form state never seen before, warm-up ones included.
            "quote_uncached": [
                [quote_path(day, c, i) for i in range(n, n + w)]
                + [quote_path(day, c, i) for i in range(n)]
                for c in clients
            ],
            # Every request a plan never asked before: the calendar of free starts anew.
            "calendar": [
                [plan_path(today, c, i) for i in range(n, n + w)]
                + [plan_path(today, c, i) for i in range(n)]
                for c in clients
            ],
            "order_unpaid": [[page(unpaid)] * (w + n) for _ in clients],
            "order_partly_paid": [[page(partly)] * (w + n) for _ in clients],
            "order_active": [[page(active)] * (w + n) for _ in clients],
            "api_order": [[f"/api/v1/orders/{active.reference}/"] * (w + n) for _ in clients],
        }
        chosen = [name for name in args.pages.split(",") if name] or list(pages)
        results = {
            name: asyncio.run(
                drive(
                    port,
                    pages[name],
                    warmup=w,
                    headers={"Authorization": f"Bearer {token}"} if name.startswith("api") else {},
                )
            )
            for name in chosen
        }
    report = {
        "bench": "booking_pages",
        "clients": args.clients,
        "warmup_requests_per_client": args.warmup,
        "data": {k: seeded[k] for k in ("orders", "holds", "invoices", "transfers", "lots")},
        **results,
        "target_p95_ms": TARGET_P95_MS,
        # The calendar is reported (issue 14), the pages of issue 15 are held to the target.
        "meets_target": all(
            result["p95_ms"] < TARGET_P95_MS
            for name, result in results.items()
            if name not in REPORTED_ONLY
        ),
        "reported_only": sorted(REPORTED_ONLY & set(results)),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
