"""The payment scanner's cost and speed, on a real anvil behind a provider-like proxy.

The chain: anvil with its genesis at block 50,000 (``--number``: its head is past 50,000;
eth_getLogs answers the blocks below genesis as empty), behind payments.devproxy, which
refuses eth_getLogs over more than 2,000 blocks or 10,000 results as public providers do.

For 10, 1,000 and 10,000 open invoices (four in five in USDC, one in five in ETH; the open
ones bulk-inserted, their orders cloned from one placed order), three cycles each:

- ``catch_up``: no cursor yet and every invoice made at block 1 — the scanner reads up to
  50,000 blocks (25 ranges of 2,000) for all the invoices' addresses in one cycle;
- ``steady``: the cursor at the head, 10 new USDC payments (real placed orders) mined and
  confirmed — the cycle reads the new blocks and the re-check window and settles them;
- ``quiet``: nothing new.

Per cycle: ``rpc_requests`` (HTTP requests; a batch is one), ``sql`` (statements),
``seconds``, ``settled``. The script exits non-zero when requests grow one per invoice
(more than a constant plus one per batch of the chain's limits), when a steady cycle does
not settle its 10 payments, or when the 10,000-invoice steady cycle takes longer than the
scan interval (PAYMENT_SCAN_SECONDS). Then the settle latency with the scanner at its
default interval. One JSON line.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import pstats
import secrets
import sys
import threading
import time
from datetime import timedelta
from decimal import Decimal
from typing import Any

from benchdb import fresh_database, h200_request, median

PAID_PER_CYCLE = 10
GENESIS = 50_000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10,1000,10000")
    parser.add_argument("--latency-samples", type=int, default=5)
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also print a cProfile of the largest size's steady cycle (on standard error)",
    )
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    fresh_database("gpulots_bench_payments")
    from django.conf import settings
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from payments import devchain, invoicing, scanning
    from payments.devproxy import ProviderProxy
    from payments.models import Chain, Invoice
    from payments.tasks import scan_open_invoices
    from reservations.catalogue import load_catalogue
    from reservations.models import HardwareKind, Host, Lot
    from reservations.services import place_order

    port = devchain.free_port()
    node = devchain.start_anvil(port, genesis_number=GENESIS)
    dev = devchain.DevChain(f"http://127.0.0.1:{port}")
    proxy = ProviderProxy(dev.url, max_range=2000, max_results=10_000).start()
    try:
        dev.deploy()
        chain = devchain.configure(proxy.url, confirmations=2)
        usdc, eth = chain.assets.get(symbol="USDC"), chain.assets.get(symbol="ETH")
        load_catalogue()
        host = Host.objects.create(
            name="bench", kind=HardwareKind.objects.get(slug="h200"), address="x"
        )
        paid_total = PAID_PER_CYCLE * len(sizes) + args.latency_samples + 1  # and the template
        Lot.objects.bulk_create(
            Lot(host=host, gpu_a=2 * i, gpu_b=2 * i + 1) for i in range(paid_total)
        )
        starts_at = timezone.now() + timedelta(days=2)
        template = place_order(h200_request(starts_at, lot_count=1, window_days=3))
        results: list[dict[str, Any]] = []
        for size in sizes:
            # Each size alone: earlier invoices leave their monitoring window.
            Invoice.objects.update(monitor_until=timezone.now())
            Chain.objects.filter(pk=chain.pk).update(
                scanned_block=None, checkpoint_block=None, checkpoint_hash=""
            )
            head = dev.w3.eth.block_number
            open_count = size - PAID_PER_CYCLE
            _seed_open_invoices(template, usdc, eth, max(0, open_count), created_block=1)
            paying = []
            for _ in range(min(size, PAID_PER_CYCLE)):
                order = place_order(h200_request(starts_at, lot_count=1, window_days=3))
                paying.append(invoicing.create_invoice(order, usdc))
            Invoice.objects.filter(pk__in=[i.pk for i in paying]).update(created_block=1)
            watched = Invoice.objects.filter(monitor_until__gt=timezone.now())
            natives = watched.filter(asset=eth).count()
            assert watched.count() == size, (watched.count(), size)

            def cycle(name: str, size: int = size) -> dict[str, Any]:
                fresh = Chain.objects.get(pk=chain.pk)
                profiler = cProfile.Profile()
                profiling = args.profile and name == "steady" and size == sizes[-1]
                with CaptureQueriesContext(connection) as queries:
                    started = time.perf_counter()
                    if profiling:
                        profiler.enable()
                    report = scanning.scan_chain(fresh)
                    if profiling:
                        profiler.disable()
                    seconds = time.perf_counter() - started
                if profiling:
                    print(f"== steady cycle, {size} open invoices", file=sys.stderr)
                    stats = pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative")
                    stats.print_stats(r"/(payments|reservations)/", 30)
                return {
                    "cycle": name,
                    "blocks_read": (report.to_block or 0) - (report.from_block or 0) + 1,
                    "rpc_requests": report.rpc_requests,
                    "sql": len(queries),
                    "seconds": round(seconds, 3),
                    "settled": len(report.settled),
                }

            catch_up = cycle("catch_up")
            while Chain.objects.get(pk=chain.pk).scanned_block != dev.w3.eth.block_number:
                scanning.scan_chain(Chain.objects.get(pk=chain.pk))  # the rest of the way
            for invoice in paying:
                dev.pay_invoice(invoice)
            dev.mine(2)
            steady = cycle("steady")
            quiet = cycle("quiet")
            limit = settings.PAYMENT_RPC_BATCH_LIMIT
            chunks = math.ceil((size - natives) / scanning.ADDRESS_CHUNK)
            per_request = min(limit, scanning.LOG_ADDRESSES_PER_REQUEST // scanning.ADDRESS_CHUNK)
            bound = (
                4  # chainId, head, one block batch, one receipt or spare
                + math.ceil(chunks * 25 / per_request)
                + math.ceil(natives / limit)
                + math.ceil(2 * PAID_PER_CYCLE / limit)
            )
            results.append(
                {
                    "invoices": size,
                    "native_invoices": natives,
                    "head": head,
                    "bound": bound,
                    "cycles": [catch_up, steady, quiet],
                }
            )

        # Settle latency with the scanner at its default interval.
        interval = settings.PAYMENT_SCAN_SECONDS
        stop = threading.Event()

        def scanner() -> None:
            from django.db import connections

            while not stop.is_set():
                scan_open_invoices()
                stop.wait(interval)
            connections.close_all()

        Invoice.objects.update(monitor_until=timezone.now())
        thread = threading.Thread(target=scanner, daemon=True)
        thread.start()
        latencies = []
        for _ in range(args.latency_samples):
            order = place_order(h200_request(starts_at, lot_count=1, window_days=3))
            invoice = invoicing.create_invoice(order, usdc)
            dev.pay_invoice(invoice)  # its block is the 1st confirmation
            time.sleep(interval * 0.37)  # land somewhere inside a scan interval
            dev.mine(1)  # the block bringing the 2nd (last required) confirmation
            confirmed_at = time.time()
            while not Invoice.objects.filter(pk=invoice.pk, status=Invoice.STATUS_SETTLED).exists():
                time.sleep(0.05)
            latencies.append(time.time() - confirmed_at)
        stop.set()
        thread.join(timeout=interval + 10)
    finally:
        proxy.stop()
        node.terminate()
        node.wait(timeout=10)

    interval = settings.PAYMENT_SCAN_SECONDS
    summary = {
        "bench": "payment_scan",
        "chain": f"anvil from block {GENESIS:,} behind a proxy of 2,000 blocks / 10,000 results",
        "address_chunk": scanning.ADDRESS_CHUNK,
        "batch_limit": settings.PAYMENT_RPC_BATCH_LIMIT,
        "scan_interval_seconds": interval,
        "sizes": results,
        "proxy_refusals": proxy.refused,
        "settle_latency_seconds": {
            "median": round(median(latencies), 2),
            "max": round(max(latencies), 2),
            "samples": len(latencies),
        },
    }
    largest = max(results, key=lambda r: r["invoices"])
    within = largest["cycles"][1]["seconds"] <= interval or largest["invoices"] < 10_000
    summary["largest_steady_within_interval"] = within
    print(json.dumps(summary))
    bounded = all(c["rpc_requests"] <= r["bound"] for r in results for c in r["cycles"]) and all(
        r["cycles"][1]["settled"] == min(r["invoices"], PAID_PER_CYCLE) for r in results
    )
    return 0 if bounded and within else 1


def _seed_open_invoices(
    template: Any, usdc: Any, eth: Any, count: int, *, created_block: int
) -> None:
    """``count`` open invoices, bulk-inserted: orders cloned from ``template`` (awaiting
    payment, without holds: nothing pays them), each with a fresh watch-only address (random
    here: the scanner only watches it) — one in five in ETH."""
    from datetime import timedelta

    from django.utils import timezone

    from payments import derivation
    from payments.models import DepositAddress, Invoice
    from reservations.models import Order

    if count == 0:
        return
    now = timezone.now()
    base = Order.objects.get(pk=template.pk)
    fields = {
        f.attname: getattr(base, f.attname)
        for f in Order._meta.concrete_fields
        if not f.primary_key
    }
    orders = [
        Order(
            **{
                **fields,
                "reference": f"B{i:07d}{secrets.token_hex(4)}",
                "secret": secrets.token_urlsafe(24),
            }
        )
        for i in range(count)
    ]
    orders = Order.objects.bulk_create(orders, batch_size=2000)
    top = DepositAddress.objects.order_by("-index").values_list("index", flat=True).first() or 0
    chain = usdc.chain
    addresses = DepositAddress.objects.bulk_create(
        [
            DepositAddress(
                chain=chain,
                index=top + 1 + i,
                address="0x" + secrets.token_hex(20),
                xpub_fingerprint=derivation.fingerprint(),  # the allocator goes on after them
            )
            for i in range(count)
        ],
        batch_size=2000,
    )
    Invoice.objects.bulk_create(
        [
            Invoice(
                order=order,
                asset=eth if i % 5 == 4 else usdc,
                deposit_address=address,
                amount_due=Decimal(500 * 10**6 if i % 5 != 4 else 166_667 * 10**12),
                usd_due=Decimal(500),
                usd_per_unit=Decimal(1),
                created_block=created_block,
                expires_at=now + timedelta(hours=2),
                monitor_until=now + timedelta(hours=26),
            )
            for i, (order, address) in enumerate(zip(orders, addresses, strict=True))
        ],
        batch_size=2000,
    )


if __name__ == "__main__":
    sys.exit(main())
