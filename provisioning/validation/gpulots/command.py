"""``gpulots split-test``: the two runs, their report (version 2, ``"kind": "split_test"``,
the acceptance benchmark's format) and its upload to the order."""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

from . import not_measured
from .results import verdict
from .runner import Plan, UsageError, account_cards, launch, order_file, run_once, ship_hooks

VERSION = 1
REPORT_VERSION = 2
TOOL = f"gpulots split-test {VERSION}"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 5
EXIT_UPLOAD = 7
HYPOTHESES = ("shorter_step", "bigger_batch", "make_possible")


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def write_report(path: str, data: dict[str, Any]) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".split-test-", suffix=".json", dir=folder)
    with os.fdopen(handle, "w") as out:
        json.dump(data, out, indent=1, default=str)
    os.replace(temporary, path)


def upload(report: dict[str, Any], args: argparse.Namespace, order: dict[str, Any]) -> str:
    """POST the report to the order; the server's answer (its summary), or raises."""
    token = os.environ.get("GPULOTS_TOKEN", "")
    if args.token_file:
        with open(os.path.expanduser(args.token_file)) as handle:
            token = handle.read().strip()
    reference = args.order or order.get("reference")
    api = (args.api or order.get("api") or "").rstrip("/")
    if not token or not reference or not api:
        raise UsageError(
            "--upload needs your API token (GPULOTS_TOKEN or --token-file), the order "
            "(--order, or ~/.gpulots/order.json in a delivered account) and the API (--api)"
        )
    if not re.match(r"https?://", api):
        raise UsageError(f"--api: an http(s) URL, not {api!r}")
    request = urllib.request.Request(  # noqa: S310 (http or https, checked above)
        f"{api}/orders/{reference}/split-tests/",
        data=json.dumps(report, default=str).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 (http or https)
            body = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:500]
        raise RuntimeError(f"the upload was refused: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise RuntimeError(f"the upload failed: {exc}") from None
    return str(body.get("summary") or body.get("report_url") or body)


def split_test(args: argparse.Namespace) -> int:
    order = order_file()
    args.hypothesis = args.hypothesis or order.get("hypothesis") or "shorter_step"
    if args.hypothesis not in HYPOTHESES:
        raise UsageError(f"--hypothesis: one of {', '.join(HYPOTHESES)}")
    args.precision = args.precision or order.get("precision") or ""
    plan = Plan(args)
    launch(args.command, 1, args.launcher)  # a command refused before anything runs
    cards = account_cards(args.cards)
    threads = os.environ.get("OMP_NUM_THREADS") or "1"
    os.makedirs(args.logs, exist_ok=True)
    started, clock = now(), time.monotonic()
    report: dict[str, Any] = {
        "version": REPORT_VERSION,
        "kind": "split_test",
        "tool": TOOL,
        "complete": False,
        "started_at": started,
        "finished_at": None,
        "exit_code": None,
        "host": socket.gethostname(),
        "order": {
            "reference": args.order or order.get("reference"),
            "job": order.get("job"),
            "hypothesis": args.hypothesis,
            "precision": args.precision or None,
        },
        "command": args.command,
        "steps": {
            "warmup": args.warmup,
            "measured": args.steps,
            "profiled": args.profile_steps,
        },
        "sections": {},
        "split": {},
        "acceptance": {"passed": None, "checks": [], "failed": []},
    }
    if len(cards) < 2:
        raise UsageError(f"two cards are needed (visible: {','.join(cards)}); see --cards")
    with tempfile.TemporaryDirectory(prefix="gpulots-split-") as work:
        hooks = ship_hooks(work)
        for name, world in (("one_card", 1), ("two_cards", 2)):
            section = {"status": "running", "seconds": 0.0, "error": ""}
            report["sections"][name] = section
            write_report(args.out, report)
            run = run_once(args, plan, name, world, cards, threads, work, hooks)
            report["split"][name] = run
            section.update(
                status={"ok": "ok", "oom": "ok"}.get(run["status"], run["status"]),
                seconds=run["seconds"],
                error=run.get("error", ""),
            )
            print(f"{name}: {run['status']} {run.get('error') or ''}".rstrip(), file=sys.stderr)
    one, two = report["split"]["one_card"], report["split"]["two_cards"]
    stand_in = not any(
        str(r.get("device", "")).startswith("cuda") for r in [*one["per_rank"], *two["per_rank"]]
    )
    report["stand_in"] = stand_in
    report["split"]["exchange_share"] = two.get("exchange_share", not_measured("no two-card run"))
    report["split"]["exposed_exchange_seconds"] = (
        round(two["exchange_ms"] / 1000, 6)
        if isinstance(two.get("exchange_ms"), (int, float))
        else two.get("exchange_ms", not_measured("no two-card run"))
    )
    found = verdict(args.hypothesis, one, two, stand_in)
    found["held_constant"] = plan.held_constant(args, threads)
    report["verdict"] = found
    report["sections"]["verdict"] = {"status": "ok", "seconds": 0.0, "error": ""}
    statuses = {one["status"], two["status"]}
    code = EXIT_TIMEOUT if "timeout" in statuses else EXIT_FAILED if "failed" in statuses else 0
    report.update(
        complete=True,
        finished_at=now(),
        exit_code=code,
        seconds=round(time.monotonic() - clock, 1),
    )
    write_report(args.out, report)
    print(found["measured"])
    print(f"report: {os.path.abspath(args.out)}", file=sys.stderr)
    if args.upload:
        try:
            print(f"attached to the order: {upload(report, args, order)}")
        except (RuntimeError, OSError) as exc:
            print(str(exc), file=sys.stderr)
            return EXIT_UPLOAD
    return code
