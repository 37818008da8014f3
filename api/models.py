"""Personal API tokens (stored as hashes) and remembered idempotent requests."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

TOKEN_PREFIX = "gl_"  # noqa: S105 (a marker, not a secret)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ApiToken(models.Model):
    """A researcher's token for scripts: shown once, kept only as a SHA-256 hash."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=80)
    prefix = models.CharField(
        max_length=12, help_text=_("The token's first characters, to recognise it")
    )
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def issue(cls, user: object, name: str) -> tuple[ApiToken, str]:
        """A new token for ``user``; the plain token is returned once and never stored."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        record = cls.objects.create(
            user=user, name=name.strip()[:80], prefix=token[:10], key_hash=hash_token(token)
        )
        return record, token


class IdempotentRequest(models.Model):
    """The first response to a request made with an Idempotency-Key, replayed on retries."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("user", "key"), name="idempotency_key_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.key}"
