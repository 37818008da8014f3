"""The inventory attack, replayed against the real server as ``make run`` starts it.

One anonymous client books as a guest through the pages, as fast as it can, for every kind
and every start across the booking horizon: all lots for 30 days first, then fewer lots and
shorter windows where that is refused — a new guest session, a new e-mail address and a
made-up ``X-Forwarded-For`` on every attempt. It once held 94 % of all lot-days of the
horizon with 38 orders in 3.7 s.

One JSON line: attempts, orders placed, refusals by reason, and ``share_held``, the largest
share of any kind's lot-days over the horizon the client's unpaid orders hold (per kind in
``share_by_kind``). Target: at most ``RESERVATION_UNPAID_SHARE_PERCENT`` (10 %).
``--no-limits`` raises the limits out of reach, to show the measurement can fail.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from datetime import date, timedelta
from typing import Any

import requests
from benchdb import NO_UNPAID_LIMITS, SSH_KEY, fresh_database, running_stack

DATABASE = "gpulots_bench_attack"
TARGET_SHARE = 0.10
ENVIRONMENTS = {
    "b200": "pytorch-2.9-cuda-12.8",
    "h200": "pytorch-2.9-cuda-12.8",
    "mi300x": "pytorch-2.9-rocm-6.4",
}
LIMIT_MESSAGES = {
    "unpaid_orders_limit": "unpaid orders. Pay or cancel",
    "unpaid_share_limit": "Unpaid orders may hold at most",
}
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def book(base: str, attempt: int, kind: str, lots: int, window: int, start: date) -> str:
    """One guest booking through the three steps; what the review page answered."""
    spoofed = f"10.{attempt % 250}.{random.randrange(250)}.{random.randrange(250)}"
    session = requests.Session()
    session.headers["X-Forwarded-For"] = spoofed
    page = session.get(f"{base}/en/book/", timeout=30)
    token = CSRF.search(page.text)
    assert token, "no CSRF token on the plan page"
    headers = {"X-CSRFToken": token.group(1), "Referer": f"{base}/en/book/"}
    plan: dict[str, Any] = {
        "kind": kind,
        "lot_count": str(lots),
        "window_days": str(window),
        "start_date": start.isoformat(),
        "environment": ENVIRONMENTS[kind],
        "usage_mode": "distributed",
        "hypothesis": "shorter_step",
    }
    answer = session.post(f"{base}/en/book/", plan, headers=headers, allow_redirects=False)
    if answer.status_code != 302:
        return "plan_refused"
    contact = {
        "contact_name": "Mallory",
        "contact_email": f"m{attempt}@attacker{attempt % 7}.example",
        "ssh_public_keys": SSH_KEY,
        "checkpoints-1-date": start.isoformat(),  # the window's first day
        "checkpoints-1-check": "none",
        "abort_criteria": "none",
    }
    answer = session.post(
        f"{base}/en/book/contact/", contact, headers=headers, allow_redirects=False
    )
    if answer.status_code != 302:
        return "contact_refused"
    answer = session.post(f"{base}/en/book/review/", headers=headers, allow_redirects=False)
    if answer.status_code == 302 and "/orders/" in answer.headers.get("Location", ""):
        return "placed"
    for code, text in LIMIT_MESSAGES.items():
        if text in answer.text:
            return code
    return "unavailable"


def attack(
    base: str, kinds: dict[str, int], horizon: int, budget: float, max_attempts: int
) -> dict[str, Any]:
    outcomes: dict[str, int] = {}
    attempts = 0
    started = time.perf_counter()
    tomorrow = date.today() + timedelta(days=1)
    plans = [
        (kind, lots, window)
        for window in (30, 7, 3)
        for kind, count in kinds.items()
        for lots in range(count, 0, -1)
    ]
    for offset in range(0, horizon - 3, 3):
        for kind, lots, window in plans:
            if attempts >= max_attempts or time.perf_counter() - started > budget:
                return {
                    "attempts": attempts,
                    "outcomes": outcomes,
                    "seconds": time.perf_counter() - started,
                }
            if offset + window > horizon:
                continue
            outcome = book(base, attempts, kind, lots, window, tomorrow + timedelta(days=offset))
            attempts += 1
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return {"attempts": attempts, "outcomes": outcomes, "seconds": time.perf_counter() - started}


def shares(horizon_days: int) -> dict[str, float]:
    """Per kind: the share of its lot-days over the horizon held by unpaid orders now."""
    from django.db.models import Count
    from django.utils import timezone

    from reservations.models import HardwareKind, Lot, Order

    now = timezone.now()
    result: dict[str, float] = {}
    lots = dict(
        Lot.objects.filter(status=Lot.Status.ACTIVE)
        .values_list("host__kind__slug")
        .annotate(n=Count("id"))
        .values_list("host__kind__slug", "n")
    )
    for kind in HardwareKind.objects.all():
        held = sum(
            o.lot_count * o.window_days
            for o in Order.objects.filter(
                kind=kind, status=Order.STATUS_AWAITING_PAYMENT, hold_expires_at__gt=now
            )
        )
        capacity = lots.get(kind.slug, 0) * horizon_days
        result[kind.slug] = round(held / capacity, 4) if capacity else 0.0
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0, help="the attack's time budget")
    parser.add_argument("--max-attempts", type=int, default=400)
    parser.add_argument("--no-limits", action="store_true", help="limits out of reach")
    args = parser.parse_args()

    fresh_database(DATABASE)
    from django.conf import settings
    from django.db import connections

    from reservations.catalogue import load_catalogue
    from reservations.models import Lot

    load_catalogue(demo_inventory=True)
    kinds: dict[str, int] = {}
    for slug in Lot.objects.values_list("host__kind__slug", flat=True):
        kinds[slug] = kinds.get(slug, 0) + 1
    horizon = settings.RESERVATION_HORIZON.days
    connections.close_all()

    with running_stack(DATABASE, **(NO_UNPAID_LIMITS if args.no_limits else {})) as port:
        replay = attack(f"http://127.0.0.1:{port}", kinds, horizon, args.seconds, args.max_attempts)
        by_kind = shares(horizon)
    connections.close_all()
    share_held = max(by_kind.values(), default=0.0)
    report = {
        "bench": "inventory_attack",
        "limits": not args.no_limits,
        "attempts": replay["attempts"],
        "placed": replay["outcomes"].get("placed", 0),
        "outcomes": replay["outcomes"],
        "seconds": round(replay["seconds"], 2),
        "share_by_kind": by_kind,
        "share_held": share_held,
        "target_share": TARGET_SHARE,
        "meets_target": share_held <= TARGET_SHARE,
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
