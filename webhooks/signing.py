"""Secrets and signatures, per Standard Webhooks (https://www.standardwebhooks.com).

A secret is ``whsec_`` and 24 random bytes in base64; it is shown once, when made or rotated,
and kept encrypted (Fernet) with WEBHOOK_SECRETS_KEY from the environment, so that a dump of
the database alone gives no secret away. Each delivery carries ``webhook-id``,
``webhook-timestamp`` and ``webhook-signature``: ``v1,`` and the base64 HMAC-SHA256 of
``<id>.<timestamp>.<body>`` under each secret that signs (two in a rotation's overlap).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from cryptography.fernet import Fernet
from django.conf import settings

PREFIX = "whsec_"


def new_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def _fernet() -> Fernet:
    key = settings.WEBHOOK_SECRETS_KEY
    if not key:  # derived from the signing key, which also comes from the environment only
        digest = hashlib.sha256(b"gpulots webhook secrets\0" + settings.SECRET_KEY.encode())
        key = base64.urlsafe_b64encode(digest.digest()).decode()
    return Fernet(key)


def seal(secret: str) -> str:
    return _fernet().encrypt(secret.encode()).decode()


def unseal(sealed: str) -> str:
    return _fernet().decrypt(sealed.encode()).decode()


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix(PREFIX))
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def headers(secrets_: list[str], message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers, signed with each of ``secrets_``."""
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(
            signature(secret, message_id, timestamp, body) for secret in secrets_
        ),
    }
