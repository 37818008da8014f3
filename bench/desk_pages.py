"""The operator desk under load, against the real server as ``make run`` starts it.

A database with 200 lots (50 hosts) and 20,000 orders — a year back and months ahead, each
lot's windows one after another (completed, active, booked, held) — bulk-inserted; then 4
concurrent staff clients (keep-alive, signed in) ask for "Today" (/admin/) and the
occupancy timeline (90 days, and the whole booking horizon). The timeline shows a page of
hosts at a time (reservations.timeline.HOSTS_PER_PAGE): what is measured is its first
page, as the desk's link opens it, and the JSON says how many hosts and lots that page
holds and how many pages there are. One JSON line: requests per second and p50/p95 per
page. Target: p95 under 200 ms for each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
from datetime import timedelta
from typing import Any

from benchdb import drive, fresh_database, h200_request, profile_paths, running_stack

DATABASE = "gpulots_bench_desk"
TARGET_P95_MS = 200.0
HOSTS = 50
LOTS_PER_HOST = 4
ORDERS = 20_000


def seed() -> dict[str, Any]:
    """The lots and orders (bulk inserts); returns what was made."""
    from django.conf import settings
    from django.db.backends.postgresql.psycopg_any import (  # type: ignore[import-untyped]
        DateTimeTZRange,
    )
    from django.utils import timezone

    from reservations.catalogue import load_catalogue
    from reservations.models import HardwareKind, Hold, Host, Lot, Order
    from reservations.services import place_order

    load_catalogue()
    kinds = list(HardwareKind.objects.order_by("slug"))
    hosts = Host.objects.bulk_create(
        Host(name=f"gpu-{kinds[i % 3].slug}-{i}", kind=kinds[i % 3], address=f"10.0.0.{i}")
        for i in range(HOSTS)
    )
    Lot.objects.bulk_create(
        Lot(host=host, gpu_a=2 * j, gpu_b=2 * j + 1) for host in hosts for j in range(LOTS_PER_HOST)
    )
    now = timezone.now()
    template = place_order(h200_request(now + timedelta(days=170), lot_count=1, window_days=3))
    Hold.objects.filter(order=template).update(status=Hold.Status.RELEASED, released_at=now)
    base = Order.objects.get(pk=template.pk)
    fields = {
        f.attname: getattr(base, f.attname)
        for f in Order._meta.concrete_fields
        if not f.primary_key
    }
    lots = list(Lot.objects.select_related("host").order_by("pk"))
    per_lot = ORDERS // len(lots)
    turnaround = settings.RESERVATION_TURNAROUND
    step = timedelta(days=3) + turnaround + timedelta(hours=12)
    first = now - per_lot // 2 * step  # half of each lot's windows behind, half ahead
    orders: list[Order] = []
    spans: list[tuple[Lot, Any, Any]] = []
    for lot in lots:
        for i in range(per_lot):
            starts = first + i * step
            ends = starts + timedelta(days=3)
            if ends < now:
                status = Order.STATUS_COMPLETED
            elif starts < now:
                status = Order.STATUS_ACTIVE
            else:
                status = (Order.STATUS_AWAITING_PAYMENT, Order.STATUS_PAID, Order.STATUS_APPROVED)[
                    i % 3
                ]
            orders.append(
                Order(
                    **{
                        **fields,
                        "reference": f"D{len(orders):06d}{secrets.token_hex(3)}",
                        "secret": secrets.token_urlsafe(24),
                        "kind_id": lot.host.kind_id,
                        "status": status,
                        "starts_at": starts,
                        "ends_at": ends,
                        "hold_expires_at": now + timedelta(minutes=90),
                        "contact_email": f"lab{len(orders) % 500}@example.org",
                    }
                )
            )
            spans.append((lot, starts, ends + turnaround))
    orders = Order.objects.bulk_create(orders, batch_size=2000)
    Hold.objects.bulk_create(
        [
            Hold(
                order=order,
                lot=lot,
                period=DateTimeTZRange(starts, upper),
                status=Hold.Status.HELD
                if order.status == Order.STATUS_AWAITING_PAYMENT
                else Hold.Status.BOOKED,
            )
            for order, (lot, starts, upper) in zip(orders, spans, strict=True)
        ],
        batch_size=2000,
    )
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # the planner's statistics, as autovacuum keeps them
    return {"lots": len(lots), "orders": len(orders) + 1, "holds": len(orders) + 1}


def staff_cookie() -> str:
    """A signed-in superuser's session cookie, made the way a login makes it."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    from accounts.models import User

    user = User.objects.create_superuser("desk@example.org", "a-long-bench-password-1")
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    return f"{settings.SESSION_COOKIE_NAME}={session.session_key}"


def timeline_paging() -> dict[str, int]:
    """What the timeline's first page (the one measured) holds, of how many pages."""
    from reservations import timeline

    first = timeline.build(days=90)
    return {
        "timeline_page": first.page,
        "timeline_pages": first.pages,
        "hosts_per_page": len(first.groups),
        "lots_per_page": sum(len(group.rows) for group in first.groups),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=30, help="per client and page")
    parser.add_argument(
        "--profile", action="store_true", help="profile each page in-process instead of load"
    )
    args = parser.parse_args()

    fresh_database(DATABASE)
    from django.conf import settings
    from django.db import connections

    seeded = seed()
    cookie = staff_cookie()
    paging = timeline_paging()
    horizon = settings.RESERVATION_HORIZON.days
    if args.profile:
        profile_paths(
            {
                "today": "/admin/",
                "timeline_90_days": "/admin/timeline/?days=90",
                f"timeline_{horizon}_days": f"/admin/timeline/?days={horizon}",
            },
            cookie=cookie,
            repeat=10,
        )
        return 0
    connections.close_all()
    # The server signs sessions with the same key as this process made the cookie with.
    with running_stack(DATABASE, DJANGO_SECRET_KEY=os.environ["DJANGO_SECRET_KEY"]) as port:
        n, clients = args.requests, range(args.clients)
        warm = 3  # requests per client before the measured ones, on the same connection
        pages = {
            "today": [["/admin/"] * (warm + n) for _ in clients],
            "timeline_90_days": [["/admin/timeline/?days=90"] * (warm + n) for _ in clients],
            f"timeline_{horizon}_days": [
                [f"/admin/timeline/?days={horizon}"] * (warm + n) for _ in clients
            ],
        }
        results = {
            name: asyncio.run(drive(port, paths, warmup=warm, cookie=cookie))
            for name, paths in pages.items()
        }
    report = {
        "bench": "desk",
        **seeded,
        "clients": args.clients,
        **paging,
        **results,
        "target_p95_ms": TARGET_P95_MS,
        "meets_target": all(r["p95_ms"] < TARGET_P95_MS for r in results.values()),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
