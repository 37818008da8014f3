#!/usr/bin/env python
"""Book a lot through the REST API, pay on the local dev chain, wait until it settles, then
until the lot is provisioned, and download the validation report.

    GPULOTS_TOKEN=gl_… python examples/book_and_pay.py [--url http://127.0.0.1:8000]

Needs `make run` (the dev chain included) and a token from the account page
(/en/account/tokens/). After payment an operator approves the order in the admin (or run
the server with PROVISIONING_AUTO_APPROVE=1); the script waits for that, up to --timeout.
Standard library only, apart from the payment, which this script makes by calling
`manage.py devchain pay` as a stand-in for your wallet.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


THROTTLED_TRIES = 5
"""How often a throttled request (429) is sent again, after the wait the server asks for."""


def call(url: str, token: str, method: str = "GET", body: Any = None, key: str = "") -> Any:
    """One API request; a 429 is waited out as its Retry-After says (a few times), any other
    error ends the script with the server's code and detail."""
    for attempt in range(THROTTLED_TRIES + 1):
        request = urllib.request.Request(url, method=method)
        request.add_header("Authorization", f"Bearer {token}")
        if body is not None:
            request.add_header("Content-Type", "application/json")
            request.data = json.dumps(body).encode()
        if key:
            request.add_header("Idempotency-Key", key)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            problem = json.loads(error.read() or b"{}")
            if error.code == 429 and attempt < THROTTLED_TRIES:
                wait = float(error.headers.get("Retry-After") or 1)
                print(f"throttled: waiting {wait:g} s as the server asks", file=sys.stderr)
                time.sleep(min(max(wait, 0.1), 60))
                continue
            sys.exit(
                f"{method} {url}: {error.code} {problem.get('code', '')}: "
                f"{problem.get('detail', '')}"
            )
    raise AssertionError("unreachable")


def wait_until_active(
    api: str, token: str, reference: str, timeout: float, every: float = 5
) -> list[dict[str, Any]]:
    """Approval, then per lot: account, keys, environment, cards, the validation benchmark
    (from a few hours before the start), and the keys at the window's start. Prints each
    change of progress; returns the lots once the order is active."""
    deadline = time.monotonic() + timeout
    shown = ""
    while True:
        provisioning = call(f"{api}/orders/{reference}/provisioning/", token)
        status, lots = provisioning["order"]["status"], provisioning["lots"]
        progress = f"order {status}: " + (
            "; ".join(
                f"{lot['lot']} {lot['status']} {lot['steps_done']}/{lot['steps_total']}"
                + (f" ({lot['current_step']})" if lot["current_step"] else "")
                + (f", access opens {lot['access_opens_at']}" if lot["status"] != "ready" else "")
                + (f": {lot['error']}" if lot["error"] else "")
                for lot in lots
            )
            or "waiting for approval"
        )
        if progress != shown:  # what changed, not every poll
            print(progress, flush=True)
            shown = progress
        if status == "active":
            return list(lots)
        if status not in ("paid", "approved"):
            sys.exit(f"order {reference} is {status}: nothing to provision")
        if time.monotonic() > deadline:
            sys.exit(f"order {reference} not active after {timeout:.0f} s; see its page")
        time.sleep(every)


def save_reports(api: str, token: str, reference: str, directory: Path) -> Path:
    """Download the validation reports (the benchmark's JSON, per lot) and print verdicts."""
    reports = call(f"{api}/orders/{reference}/report/", token)
    path = directory / f"{reference}-report.json"
    path.write_text(json.dumps(reports["lots"], indent=1) + "\n")
    print(f"validation reports saved to {path}")
    for lot in reports["lots"]:
        verdict = (lot["report"] or {}).get("verdict", {})
        print(f"{lot['lot']}: {verdict.get('answer', 'no report yet')}")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--ssh-key", default=str(Path.home() / ".ssh" / "id_ed25519.pub"))
    parser.add_argument(
        "--timeout", type=int, default=1800, help="seconds to wait for approval and provisioning"
    )
    parser.add_argument(
        "--starts-at",
        default="",
        help="the window's start, ISO 8601 with a zone (default: in two minutes, so that the "
        "example sees access open; access opens at the start, not at approval)",
    )
    args = parser.parse_args()
    token = os.environ.get("GPULOTS_TOKEN", "")
    if not token:
        sys.exit("set GPULOTS_TOKEN to an API token (create one on /en/account/tokens/)")
    key_file = Path(args.ssh_key).expanduser()
    if not key_file.is_file():
        sys.exit(f"no SSH public key at {key_file}: pass --ssh-key PATH (the .pub file)")
    api = f"{args.url}/api/v1"

    starts_at = (
        datetime.fromisoformat(args.starts_at)
        if args.starts_at
        else (datetime.now(UTC) + timedelta(minutes=2)).replace(second=0, microsecond=0)
    )
    query = urllib.parse.urlencode(
        {"kind": "h200", "window_days": 7, "lot_count": 1, "starts_at": starts_at.isoformat()}
    )
    free = call(f"{api}/availability/?{query}", token)
    if not free["available"]:
        starts_at = datetime.fromisoformat(free["next_start"])
    order = call(
        f"{api}/orders/",
        token,
        "POST",
        {
            "kind": "h200",
            "lot_count": 1,
            "window_days": 7,
            "starts_at": starts_at.isoformat(),
            "environment": "pytorch-2.9-cuda-12.8",
            "usage_mode": "distributed",
            "hypothesis": "shorter_step",
            "hypothesis_text": "Two H200 halve the step time of our 7B fine-tune.",
            "contact_name": "Example Lab",
            "contact_email": "lab@example.org",
            "ssh_public_keys": [key_file.read_text().strip()],
        },
        key=str(uuid.uuid4()),  # retrying with this key never books twice
    )
    reference = order["reference"]
    print(f"order {reference}: {order['total_usd']} USD, held until {order['hold_expires_at']}")

    invoice = call(f"{api}/orders/{reference}/invoice/", token, "POST", {"asset": "USDC"})
    amount = int(invoice["amount_due"]) / 10 ** invoice["decimals"]
    print(f"pay {amount} {invoice['asset']} to {invoice['address']}")
    paid = subprocess.run(
        [sys.executable, "manage.py", "devchain", "pay", reference],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "DJANGO_DEBUG": "1"},
        check=True,
    )
    tx_hash = paid.stdout.rsplit(" ", 1)[-1].strip()
    call(f"{api}/orders/{reference}/claim/", token, "POST", {"tx_hash": tx_hash})  # "I've paid"

    while True:
        invoice = call(f"{api}/orders/{reference}/invoice/", token)
        progress = f"{invoice['confirmations']} of {invoice['confirmations_needed']}"
        print(f"invoice {invoice['status']}: {progress} confirmations")
        if invoice["status"] == "settled":
            break
        time.sleep(2)
    print(f"order {reference} is {call(f'{api}/orders/{reference}/', token)['status']}")

    lots = wait_until_active(api, token, reference, args.timeout)
    for lot in lots:
        for account in lot["accounts"]:
            print(f"{lot['lot']}: {account['ssh']}   # cards {account['cards']}")
    save_reports(api, token, reference, Path.cwd())
    return 0


if __name__ == "__main__":
    sys.exit(main())
