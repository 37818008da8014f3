"""Orders placed per second through ``place_order``, beside bare inserts.

The baselines, in the same process against the same database, interleaved round by round
so that the machine's noise hits all alike (the medians of the per-round rates compared):

- ``same_rows``: the rows one placement writes — the order, its hold, its SSH key and its
  audit event — inserted by the ORM in one transaction, with nothing read or checked (the
  target: placing an order at no less than half this rate, issue 15);
- ``one_row``: a single one-row ORM INSERT (the foundation's comparison, aim 1/3).

The full service does validation, the fairness limits, catalogue look-ups, the free-lot
search and the insert under the exclusion constraint, with its audit event.
``--profile`` prints a cProfile of placing orders instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import timedelta

from benchdb import fresh_database, h200_request, median

TARGET_RATIO = 0.5
"""Against the same rows inserted bare."""
ONE_ROW_TARGET = 1 / 3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--per-round", type=int, default=200)
    parser.add_argument("--lots", type=int, default=100)
    parser.add_argument("--profile", action="store_true", help="profile place_order instead")
    args = parser.parse_args()

    fresh_database("gpulots_bench_throughput")
    from django.db import transaction
    from django.utils import timezone

    from reservations.catalogue import load_catalogue
    from reservations.models import HardwareKind, Hold, Host, Lot, Order, OrderEvent, OrderSshKey
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
    if args.profile:
        import cProfile
        import pstats

        requests = [request(placed + i) for i in range(args.per_round)]
        profiler = cProfile.Profile()
        profiler.enable()
        for item in requests:
            place_order(item)
        profiler.disable()
        stats = pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative")
        stats.print_stats(r"/(reservations|payments|config|accounts)/", 30)
        return 0
    template = {
        f.attname: getattr(anchor, f.attname)
        for f in Order._meta.concrete_fields
        if not f.primary_key
    }
    hold = anchor.holds.get()
    key = anchor.ssh_keys.get()

    def same_rows(number: int) -> None:
        """The rows of one placement, written with nothing read or checked."""
        with transaction.atomic():
            order = Order.objects.create(
                **{**template, "reference": f"BARE-{number}", "secret": f"s{number}"}
            )
            Hold.objects.create(
                order=order,
                lot_id=hold.lot_id,
                period=hold.period,
                status=Hold.Status.RELEASED,
                released_at=base,
            )
            OrderSshKey.objects.create(
                order=order,
                algorithm=key.algorithm,
                public_key=key.public_key,
                fingerprint=key.fingerprint,
            )
            OrderEvent.objects.create(order=order, actor_label="bench", to_status=order.status)

    order_rates: list[float] = []
    same_rates: list[float] = []
    insert_rates: list[float] = []
    bare = 0
    for _ in range(args.rounds):
        requests = [request(placed + i) for i in range(args.per_round)]
        started = time.perf_counter()
        for item in requests:
            place_order(item)
        order_rates.append(args.per_round / (time.perf_counter() - started))
        placed += args.per_round

        started = time.perf_counter()
        for _ in range(args.per_round):
            bare += 1
            same_rows(bare)
        same_rates.append(args.per_round / (time.perf_counter() - started))

        started = time.perf_counter()
        for _ in range(args.per_round):
            OrderEvent.objects.create(order=anchor, actor_label="bench", to_status="bench")
        insert_rates.append(args.per_round / (time.perf_counter() - started))

    orders_per_second = median(order_rates)
    same_per_second = median(same_rates)
    inserts_per_second = median(insert_rates)
    ratio = orders_per_second / same_per_second
    print(
        json.dumps(
            {
                "bench": "booking_throughput",
                "orders_per_second": round(orders_per_second, 1),
                "same_rows_bare_per_second": round(same_per_second, 1),
                # three significant digits: a small ratio keeps its precision (0.0132, not 0.013)
                "ratio": float(f"{ratio:.3g}"),
                "target_ratio": round(TARGET_RATIO, 3),
                "meets_target": ratio >= TARGET_RATIO,
                "one_row_inserts_per_second": round(inserts_per_second, 1),
                "ratio_to_one_row": float(f"{orders_per_second / inserts_per_second:.3g}"),
                "one_row_target": round(ONE_ROW_TARGET, 3),
                "rounds": args.rounds,
                "per_round": args.per_round,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
