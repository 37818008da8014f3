"""The payment scanner's cost and speed, on a real anvil.

For 10, 100 and 1,000 open invoices that have all received transfers (four in five in
USDC, one in five in ETH), one scan cycle: the RPC requests it made and its seconds. The
requests must not grow one per invoice: at most a small constant plus one per address
chunk per asset (the script exits non-zero otherwise). Then the settle latency: seconds
from the block that brings the last required confirmation to the invoice settled, with the
scanner running at its default interval (PAYMENT_SCAN_SECONDS). One JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from datetime import timedelta

from benchdb import fresh_database, h200_request, median

CONSTANT_REQUESTS = 2  # eth_chainId and the latest block, whatever the number of invoices


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--latency-samples", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    fresh_database("gpulots_bench_payments")
    from django.conf import settings
    from django.utils import timezone

    from payments import devchain, services
    from payments.models import Chain, Invoice
    from payments.tasks import scan_open_invoices
    from reservations.catalogue import load_catalogue
    from reservations.models import HardwareKind, Host, Lot
    from reservations.services import place_order

    port = devchain.free_port()
    node = devchain.start_anvil(port)
    dev = devchain.DevChain(f"http://127.0.0.1:{port}")
    try:
        dev.deploy()
        chain = devchain.configure(dev.url, confirmations=2)
        usdc, eth = chain.assets.get(symbol="USDC"), chain.assets.get(symbol="ETH")
        load_catalogue()
        host = Host.objects.create(
            name="bench", kind=HardwareKind.objects.get(slug="h200"), address="x"
        )
        total = sum(sizes) + args.latency_samples
        Lot.objects.bulk_create(Lot(host=host, gpu_a=2 * i, gpu_b=2 * i + 1) for i in range(total))
        starts_at = timezone.now() + timedelta(days=2)
        cycles = []
        for size in sizes:
            # Each size alone: earlier invoices leave their monitoring window (settled ones
            # are watched too until it ends).
            Invoice.objects.update(monitor_until=timezone.now())
            invoices = []
            for i in range(size):
                order = place_order(h200_request(starts_at, lot_count=1, window_days=3))
                invoice = services.create_invoice(order, eth if i % 5 == 4 else usdc)
                dev.pay_invoice(invoice)
                invoices.append(invoice)
            dev.mine(2)
            fresh = Chain.objects.get(pk=chain.pk)
            started = time.perf_counter()
            report = services.scan_chain(fresh)
            seconds = time.perf_counter() - started
            # Per chunk of token addresses: one eth_getLogs and one block batch; per chunk of
            # native addresses: one balance batch.
            chunks = math.ceil(size * 4 / 5 / services.ADDRESS_CHUNK) * 2 + math.ceil(
                size / 5 / services.ADDRESS_CHUNK
            )
            cycles.append(
                {
                    "invoices": size,
                    "rpc_requests": report.rpc_requests,
                    "bound": CONSTANT_REQUESTS + chunks,
                    "settled": len(report.settled),
                    "seconds": round(seconds, 3),
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
            invoice = services.create_invoice(order, usdc)
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
        node.terminate()
        node.wait(timeout=10)

    summary = {
        "bench": "payment_scan",
        "address_chunk": services.ADDRESS_CHUNK,
        "cycles": cycles,
        "settle_latency_seconds": {
            "median": round(median(latencies), 2),
            "max": round(max(latencies), 2),
            "samples": len(latencies),
            "scan_interval_seconds": interval,
        },
    }
    print(json.dumps(summary))
    bounded = all(c["rpc_requests"] <= c["bound"] and c["settled"] == c["invoices"] for c in cycles)
    return 0 if bounded else 1


if __name__ == "__main__":
    sys.exit(main())
