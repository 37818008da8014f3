"""Webhook deliveries under load, to real HTTP endpoints on loopback, through a real Celery
worker (the thread pool `make run`'s hooks worker uses).

20 endpoints hear of every event; one of them is failing (it hangs until the delivery's
timeout, the worst a receiver can do to a shared pool; ``--failing-mode 500`` answers 500
at once instead). Three phases, one JSON line:

- idle: single events with the worker idle; the time from the event's fan-out (what the
  domain event's receiver does after commit: payload built, messages and deliveries
  written, tasks enqueued) to the first attempt arriving at each healthy endpoint; p50 and
  p95 (target: p95 under 2 s);
- load with the failing endpoint: ``--events`` events as fast as they can be fanned out
  (500 × 20 endpoints = 10,000 deliveries); deliveries per second end to end, and the p95
  from fan-out to arrival at the healthy endpoints;
- the same load with the failing endpoint turned off: its p95 and rate beside the first,
  which shows whether the failing endpoint slows the others.

Runs with DJANGO_DEBUG=1 (printed as ``debug``): delivering to loopback addresses is refused
otherwise, as it is in production.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from benchdb import ROOT, fresh_database, median, percentile

DATABASE = "gpulots_bench_webhooks"
IDLE_TARGET_MS = 2000


class Arrivals:
    """What the endpoints received: (path, webhook-id) → first arrival time (wall clock)."""

    def __init__(self) -> None:
        self.first: dict[tuple[str, str], float] = {}
        self.posts = 0
        self.lock = threading.Lock()
        self.release = threading.Event()

    def server(self, failing_mode: str, hang_s: float) -> ThreadingHTTPServer:
        arrivals = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: object) -> None:
                pass

            def do_POST(self) -> None:
                at = time.time()
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                key = (self.path, self.headers.get("webhook-id", ""))
                with arrivals.lock:
                    arrivals.posts += 1
                    arrivals.first.setdefault(key, at)
                status = 200
                if self.path == "/failing":
                    if failing_mode == "hang":
                        arrivals.release.wait(hang_s)
                    status = 500
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(b"ok")

        class Server(ThreadingHTTPServer):
            request_queue_size = 1024  # a lab's server, not socketserver's backlog of 5
            daemon_threads = True

        server = Server(("127.0.0.1", 0), Handler)
        # The sender hangs up on the failing endpoint at its timeout: not worth a traceback.
        server.handle_error = lambda *_args: None  # type: ignore[method-assign]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


def start_worker(queue: str, threads: int, timeout_s: int, beat: Path) -> subprocess.Popen[str]:
    """The worker, with beat inside it (retries and lost deliveries, every second)."""
    environ = {
        **os.environ,
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "WEBHOOK_TIMEOUT_SECONDS": str(timeout_s),
        "WEBHOOK_DUE_SECONDS": "1",
        "LOG_LEVEL": "WARNING",
    }
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            str(threads),
            "--queues",
            queue,
            "--hostname",
            f"{queue}@%h",
            "--without-mingle",
            "--without-gossip",
            "--loglevel",
            "INFO",
            "--beat",
            "--schedule",
            str(beat),
        ],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    started = time.monotonic()
    output = []
    assert worker.stdout is not None
    for line in worker.stdout:
        output.append(line)
        if " ready." in line:
            break
        if time.monotonic() - started > 120:
            break
    else:
        raise RuntimeError("the worker exited:\n" + "".join(output[-30:]))
    threading.Thread(target=lambda: [None for _ in worker.stdout or []], daemon=True).start()
    return worker


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--endpoints", type=int, default=20)
    parser.add_argument("--idle-samples", type=int, default=40)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--timeout", type=int, default=2, help="WEBHOOK_TIMEOUT_SECONDS")
    parser.add_argument("--failing-mode", choices=("hang", "500"), default="hang")
    args = parser.parse_args()

    os.environ["REDIS_URL"] = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
    os.environ["CELERY_BROKER_URL"] = os.environ["REDIS_URL"]
    queue = f"bench-webhooks-{uuid.uuid4().hex[:8]}"
    os.environ["CELERY_TASK_DEFAULT_QUEUE"] = queue
    os.environ["WEBHOOK_MAX_ENDPOINTS"] = str(args.endpoints)
    fresh_database(DATABASE, debug=True)

    from django.db import connection

    from accounts.models import User
    from webhooks import services
    from webhooks.models import Attempt, Delivery, Endpoint

    arrivals = Arrivals()
    server = arrivals.server(args.failing_mode, hang_s=args.timeout + 1)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    operator = User.objects.create_superuser("bench@example.org", "bench-password-1")
    healthy = [f"/hook/{number}" for number in range(args.endpoints - 1)]
    for path in [*healthy, "/failing"]:
        services.create_endpoint(operator, url=base + path, event_types=[], all_orders=True)
    failing = Endpoint.objects.get(url=base + "/failing")
    data = {"order": {"reference": "GL-BENCH", "status": "paid"}}
    worker = start_worker(
        queue, args.threads, args.timeout, Path(tempfile.mkdtemp()) / "beat-schedule"
    )
    sent: dict[str, float] = {}  # message public id → when its fan-out started

    def fan_out(event_number: int) -> None:
        started = time.time()
        message = services.fan_out(
            "order.paid",
            f"bench:{event_number}:{uuid.uuid4().hex}",
            data,
            order_id=None,
            owner_id=None,
        )
        assert message is not None
        sent[message.public_id] = started

    def latencies(paths: list[str], ids: list[str]) -> list[float]:
        return [
            (arrivals.first[(path, message)] - sent[message]) * 1000
            for path in paths
            for message in ids
            if (path, message) in arrivals.first
        ]

    def wait_all(paths: list[str], ids: list[str], limit_s: float) -> float:
        deadline = time.monotonic() + limit_s
        want = {(path, message) for path in paths for message in ids}
        while time.monotonic() < deadline:
            with arrivals.lock:
                if want <= arrivals.first.keys():
                    return max(arrivals.first[key] for key in want)
            time.sleep(0.05)
        raise RuntimeError(f"{len(want - arrivals.first.keys())} deliveries never arrived")

    try:
        # 1. idle: one event at a time, the worker idle in between
        idle_ids = []
        for number in range(args.idle_samples):
            before = set(sent)
            fan_out(number)
            (message,) = set(sent) - before
            idle_ids.append(message)
            wait_all(healthy, [message], 30)
            time.sleep(0.1)
        idle = latencies(healthy, idle_ids)

        def load(label: str) -> dict[str, Any]:
            before = set(sent)
            started = time.time()
            for number in range(args.events):
                fan_out(number + 10**6)
            ids = [m for m in sent if m not in before]
            fanned_s = time.time() - started
            last = wait_all(healthy, ids, 600)
            heard = latencies(healthy, ids)
            return {
                "phase": label,
                "healthy_deliveries": len(heard),
                "fan_out_s": round(fanned_s, 2),
                "deliveries_per_s": round(len(heard) / (last - started), 1),
                "p50_ms": round(median(heard), 1),
                "p95_ms": round(percentile(heard, 0.95), 1),
            }

        with_failing = load("with the failing endpoint")
        services.update_endpoint(failing, enabled=False)
        without_failing = load("failing endpoint off")
        time.sleep(args.timeout + 1)  # what was being tried at the failing endpoint ends
        failing_attempts = Attempt.objects.filter(delivery__endpoint=failing).count()
        failing_deferred = Delivery.objects.filter(endpoint=failing, attempts=0).count()
        healthy_retried = Delivery.objects.exclude(endpoint=failing).filter(attempts__gt=1).count()
    finally:
        arrivals.release.set()
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
        server.shutdown()
        connection.close()

    idle_p95 = percentile(idle, 0.95)
    report = {
        "bench": "webhook_delivery",
        "events_per_load": args.events,
        "endpoints": args.endpoints,
        "deliveries_per_load": args.events * args.endpoints,
        "worker": f"celery --pool threads --concurrency {args.threads}",
        "failing_endpoint": (
            f"hangs until the {args.timeout} s timeout"
            if args.failing_mode == "hang"
            else "answers 500"
        ),
        "idle_first_attempt_ms": {
            "samples": len(idle),
            "p50": round(median(idle), 1),
            "p95": round(idle_p95, 1),
            "target_p95": IDLE_TARGET_MS,
            "met": idle_p95 < IDLE_TARGET_MS,
        },
        "load": [with_failing, without_failing],
        "healthy_p95_ratio_with_vs_without_failing": round(
            with_failing["p95_ms"] / without_failing["p95_ms"], 2
        ),
        "failing_endpoint_attempts": failing_attempts,
        "healthy_deliveries_retried": healthy_retried,
        "failing_endpoint_waiting_untried": failing_deferred,
        "debug": True,
        "note": "DJANGO_DEBUG=1 (loopback delivery is refused otherwise); one machine: the "
        "receivers, the producer and the worker share its cores",
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
