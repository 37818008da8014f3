"""The receivers' page (docs/labs/webhooks.md): its Python and openssl verifications, run as
printed against a delivery signed by the site, agree with the reference library."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from webhooks import signing

PAGE = Path(__file__).resolve().parents[2] / "docs" / "labs" / "webhooks.md"


def example(marker: str) -> str:
    found = re.search(rf"<!-- {marker} -->\n```\w+\n(.*?)```", PAGE.read_text(), re.S)
    assert found, marker
    return found.group(1)


def signed() -> tuple[str, bytes, dict[str, str]]:
    secret = signing.new_secret()
    body = json.dumps({"type": "order.paid", "data": {"order": {"reference": "GL-1"}}}).encode()
    now = int(datetime.now(UTC).timestamp())
    return secret, body, signing.headers([secret], "msg_test", now, body)


def test_the_openssl_one_liner_prints_the_signature(tmp_path: Path) -> None:
    secret, body, headers = signed()
    (tmp_path / "body.json").write_bytes(body)
    printed = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", example("verify-openssl")],
        cwd=tmp_path,
        env={
            "PATH": "/usr/bin:/bin",
            "WEBHOOK_SECRET": secret,
            "WEBHOOK_ID": headers["webhook-id"],
            "WEBHOOK_TIMESTAMP": headers["webhook-timestamp"],
        },
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert f"v1,{printed}" == headers["webhook-signature"]
    stamp = datetime.fromtimestamp(int(headers["webhook-timestamp"]), tz=UTC)
    assert Webhook(secret).sign("msg_test", stamp, body.decode()) == headers["webhook-signature"]


def test_the_python_example_verifies_and_refuses_a_forgery() -> None:
    namespace: dict[str, Any] = {}
    exec(example("verify-python"), namespace)  # noqa: S102  (the page's own example)
    secret, body, headers = signed()
    assert namespace["handle"](body, headers, secret)["data"]["order"]["reference"] == "GL-1"
    with pytest.raises(WebhookVerificationError):
        namespace["handle"](body + b" ", headers, secret)
