#!/usr/bin/env python
"""Book a lot through the REST API, pay on the local dev chain, and wait until it settles.

    GPULOTS_TOKEN=gl_… python examples/book_and_pay.py [--url http://127.0.0.1:8000]

Needs `make run` (the dev chain included) and a token from the account page
(/en/account/tokens/). Standard library only, apart from the payment, which this script
makes by calling `manage.py devchain pay` as a stand-in for your wallet.
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


def call(url: str, token: str, method: str = "GET", body: Any = None, key: str = "") -> Any:
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
        problem = json.loads(error.read())
        sys.exit(f"{method} {url}: {error.code} {problem['code']}: {problem['detail']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--ssh-key", default=str(Path.home() / ".ssh" / "id_ed25519.pub"))
    args = parser.parse_args()
    token = os.environ["GPULOTS_TOKEN"]
    api = f"{args.url}/api/v1"

    starts_at = (datetime.now(UTC) + timedelta(days=14)).replace(
        hour=12, minute=0, second=0, microsecond=0
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
            "ssh_public_keys": [Path(args.ssh_key).read_text().strip()],
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
