"""Orders placed per second through ``place_order``, beside a bare one-row ORM INSERT.

Both run in the same process against the same database, interleaved round by round so
that the machine's noise hits both alike; the medians of the per-round rates are compared.
The aim: the full service (validation, catalogue look-ups, free-lot search, order, hold,
keys and audit event in one transaction) at no less than a third of the bare insert's rate.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import timedelta

from benchdb import fresh_database, h200_request, median

TARGET_RATIO = 1 / 3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--per-round", type=int, default=200)
    parser.add_argument("--lots", type=int, default=100)
    args = parser.parse_args()

    fresh_database("gpulots_bench_throughput")
    from django.utils import timezone

    from reservations.catalogue import load_catalogue
    from reservations.models import HardwareKind, Host, Lot, OrderEvent
    from reservations.services import OrderRequest, place_order

    load_catalogue()
    kind = HardwareKind.objects.get(slug="h200")
    host = Host.objects.create(name="bench-h200", kind=kind, address="127.0.0.1")
    Lot.objects.bulk_create(Lot(host=host, gpu_a=2 * i, gpu_b=2 * i + 1) for i in range(args.lots))
    base = timezone.now() + timedelta(days=1)

    def request(number: int) -> OrderRequest:
        # Fill every lot for one 3-day window, then move on to the next window.
        starts_at = base + timedelta(days=4 * (number // args.lots))
        return h200_request(starts_at, lot_count=1, window_days=3)

    anchor = place_order(request(0))
    placed = 1
    order_rates: list[float] = []
    insert_rates: list[float] = []
    for _ in range(args.rounds):
        requests = [request(placed + i) for i in range(args.per_round)]
        started = time.perf_counter()
        for item in requests:
            place_order(item)
        order_rates.append(args.per_round / (time.perf_counter() - started))
        placed += args.per_round

        started = time.perf_counter()
        for _ in range(args.per_round):
            OrderEvent.objects.create(order=anchor, actor_label="bench", to_status="bench")
        insert_rates.append(args.per_round / (time.perf_counter() - started))

    orders_per_second = median(order_rates)
    inserts_per_second = median(insert_rates)
    ratio = orders_per_second / inserts_per_second
    print(
        json.dumps(
            {
                "bench": "booking_throughput",
                "orders_per_second": round(orders_per_second, 1),
                "bare_inserts_per_second": round(inserts_per_second, 1),
                "ratio": round(ratio, 3),
                "target_ratio": round(TARGET_RATIO, 3),
                "meets_target": ratio >= TARGET_RATIO,
                "rounds": args.rounds,
                "per_round": args.per_round,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
